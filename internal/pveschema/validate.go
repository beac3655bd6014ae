package pveschema

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pveflow/pveflow/internal/pve"
)

// Validate checks one request against the schema slice, the way PVE's own parameter
// verification does. The values in the path (node, vmid, storage, volume, upid) are checked like
// the other parameters and win over fields of the same name, as in PVE. params are the request's
// query, form or multipart fields; for an upload the file part counts as the field filename,
// holding its file name. path is as for Lookup.
//
// It returns nil, or the *pve.APIError PVE would answer:
//
//   - an unknown path or method: 501, reason and message "Method 'GET /nodes/x/bogus' not
//     implemented";
//   - bad parameters: 400 "Parameter verification failed." with PVE's text for each parameter
//     in Errors, such as "property is not defined in schema and the schema does not allow
//     additional properties" or "type check ('boolean') failed - got 'true'". Format errors keep
//     the trailing newline PVE sends ("invalid format - value does not look like a valid VM ID\n").
func Validate(method, path string, params url.Values) *pve.APIError {
	ep, ok := Lookup(method, path)
	if !ok {
		msg := fmt.Sprintf("Method '%s %s' not implemented", method, path)
		return &pve.APIError{Status: http.StatusNotImplemented, Reason: msg, Message: msg}
	}
	values := make(map[string]string, len(params)+len(ep.PathParams))
	for k, vs := range params {
		// Perl's CGI joins repeated fields with NUL, which is how PVE sees them.
		values[k] = strings.Join(vs, "\x00")
	}
	// PVE overwrites body and query fields with the values from the path.
	maps.Copy(values, ep.PathParams)

	errs := make(paramErrors)
	for _, name := range slices.Sorted(maps.Keys(ep.Params)) {
		v, present := values[name]
		if msg := check(name, ep.Params[name], v, present); msg != "" {
			errs.add(name, msg)
		}
	}
	// Every endpoint in the slice forbids additional properties; the extractor makes sure.
	for _, name := range slices.Sorted(maps.Keys(values)) {
		p, known := ep.Params[name]
		switch {
		case !known:
			errs.add(name, "property is not defined in schema and the schema does not allow additional properties")
		case p.Requires != "":
			if _, ok := values[p.Requires]; !ok {
				errs.add(p.Requires, fmt.Sprintf("missing property - '%s' requires this property", name))
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	const msg = "Parameter verification failed."
	return &pve.APIError{Status: http.StatusBadRequest, Reason: msg, Message: msg, Errors: errs}
}

// paramErrors is PVE's error map; a second error for one parameter is appended after a literal
// backslash-n, as PVE's add_error does.
type paramErrors map[string]string

func (e paramErrors) add(name, msg string) {
	if prev, ok := e[name]; ok {
		msg = prev + `\n` + msg
	}
	e[name] = msg
}

var (
	integerRE = regexp.MustCompile(`^[+-]?\d+$`)
	numberRE  = regexp.MustCompile(`^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$`)
)

// CheckValue is PVE's check of value v of the endpoint's parameter name (check_prop): "" when
// it passes, else the parameter's message in the 400 PVE answers, as Validate gives it.
func (ep Endpoint) CheckValue(name, v string) string {
	p, ok := ep.Params[name]
	if !ok {
		return "property is not defined in schema and the schema does not allow additional properties"
	}
	return check(name, p, v, true)
}

// check is PVE's check_prop for one form value, or for the value of a key of a property string,
// at path (the parameter's name, or "net0.tag"): the first failing check gives the message, ""
// means the value passes.
func check(path string, p Param, v string, present bool) string {
	if !present {
		if p.Optional {
			return ""
		}
		return "property is missing and it is not optional"
	}
	if !typeOK(p.Type, v) {
		return fmt.Sprintf("type check ('%s') failed - got '%s'", p.Type, v)
	}
	idx := load()
	if p.PropertyString != "" {
		if msg := checkPropertyString(path, idx.propertyStrings[p.PropertyString], v); msg != "" {
			return "invalid format - " + msg
		}
	} else if msg := checkFormat(p.Format, v); msg != "" {
		return "invalid format - " + msg
	}
	if p.Pattern != "" && !idx.patterns[p.Pattern].MatchString(v) {
		return "value does not match the regex pattern"
	}
	if p.MaxLength != nil && utf8.RuneCountInString(v) > *p.MaxLength {
		return fmt.Sprintf("value may only be %d characters long", *p.MaxLength)
	}
	if p.MinLength != nil && utf8.RuneCountInString(v) < *p.MinLength {
		return fmt.Sprintf("value must be at least %d characters long", *p.MinLength)
	}
	if numberRE.MatchString(v) {
		n, _ := strconv.ParseFloat(v, 64)
		if p.Maximum != nil && n > *p.Maximum {
			return "value must have a maximum value of " + perlNumber(*p.Maximum)
		}
		if p.Minimum != nil && n < *p.Minimum {
			return "value must have a minimum value of " + perlNumber(*p.Minimum)
		}
	}
	if len(p.Enum) > 0 && !slices.Contains(p.Enum, v) {
		return fmt.Sprintf("value '%s' does not have a value in the enumeration '%s'", v, strings.Join(p.Enum, ", "))
	}
	return ""
}

// typeOK is PVE's check_type for a form value: booleans are only 0 and 1 there.
func typeOK(typ, v string) bool {
	switch typ {
	case "boolean":
		return v == "0" || v == "1"
	case "integer":
		return integerRE.MatchString(v)
	case "number":
		return numberRE.MatchString(v)
	}
	return true
}

func perlNumber(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}
