// Package pveschema is the slice of the official Proxmox VE API schema (pve-docs 9.1.3,
// api-viewer/apidata.js) that pveflow uses: its endpoints, their parameters, and PVE's own
// parameter checks, so that a test or the simulator can tell whether Proxmox would accept a request
// and, if not, answer exactly what Proxmox would.
//
// schema.json is generated; regenerate it from a newer apidata.json (converted to plain JSON) with
// `go run ./internal/pveschema/extract -in ../shared/pve/apidata.json -out internal/pveschema/schema.json`.
package pveschema

import (
	_ "embed"
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"sync"
)

// Endpoint is one method on one path of the API, as apidata.js describes it.
type Endpoint struct {
	Method string `json:"method"`
	// Path is the template relative to /api2/json, such as "/nodes/{node}/qemu/{vmid}/config".
	Path string `json:"path"`
	// Name is PVE's handler name, such as "update_vm".
	Name string `json:"name"`
	// Protected methods run in pvedaemon rather than pveproxy.
	Protected bool `json:"protected,omitempty"`
	// ProxyTo names the parameter whose node the call is forwarded to, usually "node".
	ProxyTo     string          `json:"proxyto,omitempty"`
	Permissions json.RawMessage `json:"permissions,omitempty"`
	// Returns is the type of the answer's data: "string" for a UPID, "null", "object", ...
	Returns string `json:"returns"`
	// Params holds every parameter, path variables included, with PVE's numbered keys expanded
	// (net[n] is net0 to net31). It is shared: callers must not modify it.
	Params map[string]Param `json:"parameters"`
	// PathParams holds, in an Endpoint returned by Lookup, the value of each {variable} of Path
	// in the looked-up path.
	PathParams map[string]string `json:"-"`
}

// Param is one parameter of an Endpoint.
type Param struct {
	// Type is "string", "integer", "number" or "boolean".
	Type     string   `json:"type"`
	Optional bool     `json:"optional,omitempty"`
	Enum     []string `json:"enum,omitempty"`
	// Pattern is a Perl regular expression the whole value must match.
	Pattern string `json:"pattern,omitempty"`
	// Format names a registered PVE format such as "pve-vmid" or "pve-tag-list"; it is empty for
	// plain values and for property strings, whose sub-format apidata.js inlines.
	Format string `json:"format,omitempty"`
	// PropertyString names the value's property-string format in Schema.PropertyStrings: the
	// parameter's base name for a format apidata.js inlines ("net" for net[n]), or a named one
	// ("pve-qm-ipconfig"). Empty for any other value.
	PropertyString string `json:"propertyString,omitempty"`
	// Alias, in a property string's format, makes the key another's: "virtio=<MAC>" is
	// "macaddr=<MAC>", and, with KeyAlias, "model=virtio" too.
	Alias    string `json:"alias,omitempty"`
	KeyAlias string `json:"keyAlias,omitempty"`
	// DefaultKey marks the key of a property string's part that has no "key=".
	DefaultKey bool     `json:"defaultKey,omitempty"`
	Minimum    *float64 `json:"minimum,omitempty"`
	Maximum    *float64 `json:"maximum,omitempty"`
	MinLength  *int     `json:"minLength,omitempty"`
	MaxLength  *int     `json:"maxLength,omitempty"`
	// Requires names another parameter that must be present whenever this one is.
	Requires string `json:"requires,omitempty"`
}

// Schema is schema.json: the endpoints, and the property-string formats their parameters name.
type Schema struct {
	Endpoints []Endpoint `json:"endpoints"`
	// PropertyStrings are the formats of property strings by name (Param.PropertyString), a
	// Param for each key.
	PropertyStrings map[string]map[string]Param `json:"propertyStrings"`
}

//go:embed schema.json
var schemaJSON []byte

// route is an Endpoint with its path template split into segments.
type route struct {
	Endpoint
	segments []string
}

type index struct {
	routes          []route
	propertyStrings map[string]map[string]Param
	patterns        map[string]*regexp.Regexp
}

// load parses schema.json on first use rather than at init, so that the extractor, which
// shares the types, still runs when the file is broken.
var load = sync.OnceValue(func() *index {
	var s Schema
	if err := json.Unmarshal(schemaJSON, &s); err != nil {
		panic("pveschema: schema.json: " + err.Error())
	}
	idx := &index{propertyStrings: s.PropertyStrings, patterns: make(map[string]*regexp.Regexp)}
	compile := func(params map[string]Param) {
		for _, p := range params {
			if p.Pattern != "" && idx.patterns[p.Pattern] == nil {
				// PVE matches m/^$pattern$/: the anchors bind to the first and last
				// alternative, not to the whole pattern.
				idx.patterns[p.Pattern] = regexp.MustCompile("^" + p.Pattern + "$")
			}
		}
	}
	for _, ep := range s.Endpoints {
		idx.routes = append(idx.routes, route{Endpoint: ep, segments: splitPath(ep.Path)})
		compile(ep.Params)
	}
	for _, format := range s.PropertyStrings {
		compile(format)
	}
	return idx
})

// Lookup finds the endpoint a concrete path matches, e.g. "/nodes/pve1/qemu/100/config", and
// sets its PathParams. The path is relative to /api2/json and escaped as on the wire: a volume ID
// with a slash is one segment, "local:iso%2Fseed.iso". Like PVE, empty segments are skipped and a
// path variable matches any segment without white space.
func Lookup(method, path string) (Endpoint, bool) {
	segs := splitPath(path)
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			return Endpoint{}, false
		}
		segs[i] = u
	}
	for _, r := range load().routes {
		if r.Method != method {
			continue
		}
		if vars, ok := r.match(segs); ok {
			ep := r.Endpoint
			ep.PathParams = vars
			return ep, true
		}
	}
	return Endpoint{}, false
}

func (r route) match(segs []string) (map[string]string, bool) {
	if len(segs) != len(r.segments) {
		return nil, false
	}
	vars := make(map[string]string)
	for i, tmpl := range r.segments {
		name, isVar := strings.CutPrefix(tmpl, "{")
		if !isVar {
			if segs[i] != tmpl {
				return nil, false
			}
			continue
		}
		if strings.ContainsFunc(segs[i], isPerlSpace) {
			return nil, false
		}
		vars[strings.TrimSuffix(name, "}")] = segs[i]
	}
	return vars, true
}

func splitPath(path string) []string {
	return strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
}

// isPerlSpace is Perl's \s, which PVE's router uses to match path variables (\S+).
func isPerlSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}
