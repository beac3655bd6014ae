package pveschema

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// checkPropertyString is PVE's parse_property_string (pve-common src/PVE/JSONSchema.pm) of
// value v, at path (the parameter's name), with format: "" when v parses and every key passes
// its check (check_object), else the text PVE dies with. A part that does not parse dies with
// its own line ("invalid key in comma-separated list property: foo\n"); failing keys die with
// "format error\n" and a line "<path>.<key>: <message>" for each (PVE::Exception's stringify).
func checkPropertyString(path string, format map[string]Param, v string) string {
	res := make(map[string]string)
	defaultKey := ""
	for _, part := range strings.Split(v, ",") {
		if strings.TrimFunc(part, isPerlSpace) == "" {
			continue
		}
		k, value, hasEq := strings.Cut(part, "=")
		switch {
		case hasEq && k != "" && value != "":
			if _, dup := res[k]; dup {
				return "duplicate key in comma-separated list property: " + k + "\n"
			}
			schema, known := format[k]
			if schema.Alias != "" {
				if schema.KeyAlias != "" {
					if _, dup := res[schema.KeyAlias]; dup {
						return fmt.Sprintf("key alias '%s' is already defined\n", schema.KeyAlias)
					}
					res[schema.KeyAlias] = k
				}
				k = schema.Alias
				schema, known = format[k]
				if _, dup := res[k]; dup {
					return fmt.Sprintf("key '%s' is already defined (via alias)\n", k)
				}
			}
			if !known {
				return "invalid key in comma-separated list property: " + k + "\n"
			}
			res[k] = booleanOr(schema, value)
		case !hasEq:
			if defaultKey != "" {
				return "duplicate key in comma-separated list property: " + defaultKey + "\n"
			}
			for key, schema := range format {
				if schema.DefaultKey {
					defaultKey = key
				}
			}
			if defaultKey == "" {
				return "value without key, but schema does not define a default key\n"
			}
			if prev := res[defaultKey]; prev != "" && prev != "0" { // Perl's truth
				return "duplicate key in comma-separated list property: " + defaultKey + "\n"
			}
			res[defaultKey] = booleanOr(format[defaultKey], part)
		default:
			return "missing key in comma-separated list property\n"
		}
	}

	errs := make(paramErrors)
	for _, key := range slices.Sorted(maps.Keys(format)) {
		schema := format[key]
		if schema.Alias != "" {
			continue // an alias's value was moved to its target
		}
		value, present := res[key]
		if msg := check(path+"."+key, schema, value, present); msg != "" {
			errs.add(path+"."+key, msg)
		}
		if requires := schema.Requires; present && requires != "" {
			if _, ok := res[requires]; !ok {
				errs.add(path+"."+requires, fmt.Sprintf("missing property required by '%s.%s'", path, key))
			}
		}
	}
	if len(errs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("format error\n")
	for _, key := range slices.Sorted(maps.Keys(errs)) {
		fmt.Fprintf(&b, "%s: %s\n", key, errs[key])
	}
	return b.String()
}

// booleanOr is a property string's value as PVE keeps it: parse_boolean's 1 or 0 for a boolean
// key when it reads one (yes, on, true, ...), else the value as given.
func booleanOr(schema Param, v string) string {
	if schema.Type != "boolean" {
		return v
	}
	switch strings.ToLower(v) {
	case "1", "on", "yes", "true":
		return "1"
	case "0", "off", "no", "false":
		return "0"
	}
	return v
}
