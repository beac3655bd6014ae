package nocloud

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// networkSchema is cloud-init's JSON schema of network-config version 2 (testdata/README.md).
func networkSchema(t *testing.T) schemaCheck {
	t.Helper()
	data, err := os.ReadFile("testdata/schema-network-config-v2.json")
	require.NoError(t, err)
	var root map[string]any
	require.NoError(t, json.Unmarshal(data, &root))
	return schemaCheck{root: root}
}

// schemaCheck validates a document against a JSON schema (draft-07) with the keywords
// cloud-init's network-config schema uses. A keyword it does not know is a problem of its own,
// so that a newer schema that needs more than this check does fails the test, not passes it.
type schemaCheck struct{ root map[string]any }

// annotations are keywords that do not constrain a value.
var annotations = map[string]bool{"$schema": true, "$defs": true, "description": true}

// problems are where, and how, v breaks schema s; none when it is valid. v is as encoding/json
// decodes a document: numbers are float64.
func (c schemaCheck) problems(s map[string]any, v any, at string) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, at+": "+fmt.Sprintf(format, args...)) }
	for _, kw := range slices.Sorted(maps.Keys(s)) {
		arg := s[kw]
		switch kw {
		case "$ref":
			out = append(out, c.problems(c.ref(arg.(string)), v, at)...)
		case "allOf":
			for _, sub := range arg.([]any) {
				out = append(out, c.problems(sub.(map[string]any), v, at)...)
			}
		case "oneOf":
			var each []string // when none matches, why each does not
			matching := 0
			for _, sub := range arg.([]any) {
				if p := c.problems(sub.(map[string]any), v, at); len(p) > 0 {
					each = append(each, p...)
				} else {
					matching++
				}
			}
			if matching != 1 {
				add("matches %d of oneOf's %d schemas, not exactly one", matching, len(arg.([]any)))
			}
			if matching == 0 {
				out = append(out, each...)
			}
		case "type":
			types, ok := arg.([]any)
			if !ok {
				types = []any{arg}
			}
			if !slices.ContainsFunc(types, func(t any) bool { return hasType(v, t.(string)) }) {
				add("%#v is not of type %v", v, arg)
			}
		case "enum":
			if !slices.ContainsFunc(arg.([]any), func(e any) bool { return reflect.DeepEqual(e, v) }) {
				add("%#v is not one of %v", v, arg)
			}
		case "required":
			obj, _ := v.(map[string]any)
			for _, key := range arg.([]any) {
				if _, ok := obj[key.(string)]; obj != nil && !ok {
					add("lacks %q", key)
				}
			}
		case "properties":
			obj, _ := v.(map[string]any)
			for key, sub := range arg.(map[string]any) {
				if value, ok := obj[key]; ok {
					out = append(out, c.problems(sub.(map[string]any), value, at+"."+key)...)
				}
			}
		case "additionalProperties":
			obj, _ := v.(map[string]any)
			declared, _ := s["properties"].(map[string]any)
			for _, key := range slices.Sorted(maps.Keys(obj)) {
				if _, ok := declared[key]; ok {
					continue
				}
				switch sub := arg.(type) {
				case bool:
					if !sub {
						add("has %q, which the schema does not allow", key)
					}
				case map[string]any:
					out = append(out, c.problems(sub, obj[key], at+"."+key)...)
				}
			}
		case "items":
			list, _ := v.([]any)
			for i, item := range list {
				out = append(out, c.problems(arg.(map[string]any), item, fmt.Sprintf("%s[%d]", at, i))...)
			}
		default:
			if !annotations[kw] {
				add("keyword %q is not known to this check", kw)
			}
		}
	}
	return out
}

// ref is the schema a local reference ("#/$defs/mapping") points to.
func (c schemaCheck) ref(ref string) map[string]any {
	node := any(c.root)
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		node = node.(map[string]any)[part]
	}
	return node.(map[string]any)
}

// declared are the keys schema s names in its properties, its own and those of the schemas it
// takes in by allOf and $ref.
func (c schemaCheck) declared(s map[string]any) map[string]bool {
	out := map[string]bool{}
	for key := range s["properties"].(map[string]any) {
		out[key] = true
	}
	subs, _ := s["allOf"].([]any)
	for _, sub := range subs {
		sub := sub.(map[string]any)
		if ref, ok := sub["$ref"].(string); ok {
			sub = c.ref(ref)
		}
		maps.Copy(out, c.declared(sub))
	}
	return out
}

func hasType(v any, typ string) bool {
	switch typ {
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f)
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	}
	return false
}

// asJSON is the YAML text as cloud-init loads it, in encoding/json's types.
func asJSON(t *testing.T, text string) any {
	t.Helper()
	var doc any
	require.NoError(t, yaml.Unmarshal([]byte(text), &doc))
	data, err := json.Marshal(doc)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(data, &out))
	return out
}

// everyKindOfNIC are NICs with every value NetworkConfig writes.
var everyKindOfNIC = []Ethernet{
	{Name: "net0", MAC: "BC:24:11:2E:C5:4A", Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"}, Gateway4: "192.0.2.1", Gateway6: "fe80::1",
		Nameservers: []string{"192.0.2.53", "2001:db8::53"}},
	{Name: "net1", MAC: "BC:24:11:00:00:01", DHCP4: true, Optional: true},
	{Name: "net2", MAC: "00:11:22:33:44:55", DHCP4: true},
}

func TestNetworkConfig_isValidForCloudInitsSchema(t *testing.T) {
	text, err := NetworkConfig(everyKindOfNIC)
	require.NoError(t, err)
	require.Contains(t, text, "optional: true")

	s := networkSchema(t)
	assert.Empty(t, s.problems(s.root, asJSON(t, text), "network-config"))
}

func TestNetworkConfig_writesOnlyKeysCloudInitsSchemaDeclares(t *testing.T) {
	text, err := NetworkConfig(everyKindOfNIC)
	require.NoError(t, err)
	s := networkSchema(t)
	// The schema does not set additionalProperties on an ethernet, so it lets any key through:
	// a key it does not declare could be a typo that cloud-init ignores. accept-ra is the one
	// exception: cloud-init reads it though the schema leaves it out (network_state.py's
	// NETWORK_V2_KEY_FILTER and _v2_common, networkd.py's IPv6AcceptRA).
	declared := s.declared(s.ref("#/$defs/mapping_physical"))
	declared["accept-ra"] = true
	require.True(t, declared["optional"])

	ethernets := asJSON(t, text).(map[string]any)["ethernets"].(map[string]any)
	for name, e := range ethernets {
		for key := range e.(map[string]any) {
			assert.True(t, declared[key], "%s: key %q is not declared by cloud-init's schema", name, key)
		}
	}
}

func TestSchemaCheck_findsWhatBreaksTheSchema(t *testing.T) {
	s := networkSchema(t)
	for name, tc := range map[string]struct{ text, problem string }{
		"a string for a boolean": {"version: 2\nethernets:\n  net0:\n    optional: \"true\"\n", `network-config.ethernets.net0.optional: "true" is not of type boolean`},
		"an unknown match key":   {"version: 2\nethernets:\n  net0:\n    match:\n      mac: x\n", `network-config.ethernets.net0.match: has "mac", which the schema does not allow`},
		"version 1":              {"version: 1\nethernets: {}\n", `network-config.version: 1 is not one of [2]`},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Contains(t, s.problems(s.root, asJSON(t, tc.text), "network-config"), tc.problem)
		})
	}
}
