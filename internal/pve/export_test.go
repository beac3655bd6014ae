package pve

import "regexp"

// TextRulePatterns are the classifier's text rules in the order Classify tries them. The test
// that pins each rule to a fixture lives in package pve_test, because package pve's own tests
// cannot import pvefixture (it imports pve).
func TextRulePatterns() []*regexp.Regexp {
	res := make([]*regexp.Regexp, len(textRules))
	for i, r := range textRules {
		res[i] = r.re
	}
	return res
}

// StatusClass is statusClass, for the table test in package pve_test.
var StatusClass = statusClass
