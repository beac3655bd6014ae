package pve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// decodeData decodes the JSON value data into the value out points to, the way PVE's answers
// need: PVE is written in Perl, whose scalars are numbers or strings as they were last used, so an
// integer may arrive as "42" and a boolean as 1, "1" or true. Struct fields are matched by their
// json tags, unknown keys are ignored and null leaves the zero value. A string target takes any
// scalar, rendered as PVE would read it back: numbers in decimal without exponent, booleans as
// "0" or "1"; that is what makes VMConfig a map of strings.
func decodeData(data []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	return assign(reflect.ValueOf(out).Elem(), v, "data")
}

func assign(dst reflect.Value, v any, path string) error {
	if v == nil {
		return nil
	}
	switch dst.Kind() {
	case reflect.String:
		s, ok := scalarString(v)
		if !ok {
			return mismatch(path, "a scalar", v)
		}
		dst.SetString(s)
	case reflect.Bool:
		b, ok := perlBool(v)
		if !ok {
			return mismatch(path, "a boolean", v)
		}
		dst.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := perlInt(v)
		if !ok || dst.OverflowInt(n) {
			return mismatch(path, "an integer", v)
		}
		dst.SetInt(n)
	case reflect.Float32, reflect.Float64:
		f, ok := perlFloat(v)
		if !ok {
			return mismatch(path, "a number", v)
		}
		dst.SetFloat(f)
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return mismatch(path, "an object", v)
		}
		t := dst.Type()
		for i := range t.NumField() {
			name := jsonName(t.Field(i))
			fv, ok := obj[name]
			if name == "" || !ok {
				continue
			}
			if err := assign(dst.Field(i), fv, path+"."+name); err != nil {
				return err
			}
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return mismatch(path, "an array", v)
		}
		s := reflect.MakeSlice(dst.Type(), len(arr), len(arr))
		for i, e := range arr {
			if err := assign(s.Index(i), e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		dst.Set(s)
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok || dst.Type().Key().Kind() != reflect.String {
			return mismatch(path, "an object", v)
		}
		m := reflect.MakeMapWithSize(dst.Type(), len(obj))
		for k, e := range obj {
			if e == nil {
				continue
			}
			ev := reflect.New(dst.Type().Elem()).Elem()
			if err := assign(ev, e, path+"."+k); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k).Convert(dst.Type().Key()), ev)
		}
		dst.Set(m)
	default:
		return fmt.Errorf("%s: cannot decode into %s", path, dst.Type())
	}
	return nil
}

// jsonName is the key a struct field is decoded from, or "" for a field to skip.
func jsonName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch name {
	case "-":
		return ""
	case "":
		return f.Name
	}
	return name
}

func scalarString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		if !strings.ContainsAny(string(v), "eE") {
			return string(v), true
		}
		f, err := v.Float64()
		return strconv.FormatFloat(f, 'f', -1, 64), err == nil
	case bool:
		if v {
			return "1", true
		}
		return "0", true
	}
	return "", false
}

func perlBool(v any) (bool, bool) {
	if b, ok := v.(bool); ok {
		return b, true
	}
	s, ok := numberText(v)
	if !ok {
		return false, false
	}
	// Perl's own false stringifies as "".
	if s == "" {
		return false, true
	}
	switch f, err := strconv.ParseFloat(s, 64); {
	case err != nil:
		return false, false
	case f == 0:
		return false, true
	case f == 1:
		return true, true
	}
	return false, false
}

func perlInt(v any) (int64, bool) {
	s, ok := numberText(v)
	if !ok {
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	// A fraction truncates: PVE reports some counts as numbers (an LXC guest's maxcpu follows
	// its cpulimit, e.g. 0.5), and one such guest must not make a whole answer unreadable.
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

func perlFloat(v any) (float64, bool) {
	s, ok := numberText(v)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
}

// numberText is the text of a JSON number, or of a string that may hold one.
func numberText(v any) (string, bool) {
	switch v := v.(type) {
	case json.Number:
		return string(v), true
	case string:
		return v, true
	}
	return "", false
}

// mismatch describes a value that does not fit its target, without quoting long strings: a
// config's description can be large and is nobody's business in an error.
func mismatch(path, want string, v any) error {
	var got string
	switch v := v.(type) {
	case map[string]any:
		got = "an object"
	case []any:
		got = "an array"
	case string:
		if len(v) > 32 {
			got = fmt.Sprintf("a string of %d bytes", len(v))
		} else {
			got = strconv.Quote(v)
		}
	default:
		got = fmt.Sprint(v)
	}
	return fmt.Errorf("%s: want %s, got %s", path, want, got)
}
