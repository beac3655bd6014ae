// Command extract cuts the endpoints pveflow uses out of the official Proxmox VE API schema
// (pve-docs api-viewer/apidata.js, converted to plain JSON) and writes them as
// internal/pveschema/schema.json:
//
//	go run ./internal/pveschema/extract -in ../shared/pve/apidata.json -out internal/pveschema/schema.json
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/pveflow/pveflow/internal/pveschema"
)

// paths are the API paths pveflow calls, or may call, relative to /api2/json. Every method
// apidata.js has on them is kept.
var paths = []string{
	"/version",
	"/access/permissions",
	"/cluster/nextid",
	"/cluster/resources",
	"/nodes/{node}/status",
	"/nodes/{node}/qemu/{vmid}",
	"/nodes/{node}/qemu/{vmid}/config",
	"/nodes/{node}/qemu/{vmid}/clone",
	"/nodes/{node}/qemu/{vmid}/resize",
	"/nodes/{node}/qemu/{vmid}/status/start",
	"/nodes/{node}/qemu/{vmid}/status/stop",
	"/nodes/{node}/qemu/{vmid}/status/reboot",
	"/nodes/{node}/qemu/{vmid}/status/current",
	"/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
	"/nodes/{node}/qemu/{vmid}/agent/ping",
	"/nodes/{node}/qemu/{vmid}/agent/file-read",
	"/nodes/{node}/tasks",
	"/nodes/{node}/tasks/{upid}",
	"/nodes/{node}/tasks/{upid}/status",
	"/nodes/{node}/tasks/{upid}/log",
	"/nodes/{node}/storage/{storage}/status",
	"/nodes/{node}/storage/{storage}/upload",
	"/nodes/{node}/storage/{storage}/content",
	"/nodes/{node}/storage/{storage}/content/{volume}",
	"/nodes/{node}/qemu/{vmid}/migrate",
	"/cluster/ha/status/manager_status",
	"/cluster/ha/resources",
	"/cluster/ha/resources/{sid}",
	"/cluster/sdn/vnets",
}

// numbered is how many keys each of apidata.js's compressed "name[n]" parameters stands for:
// qemu-server's maxima (MAX_NETS, MAX_USB_DEVICES, ...). Where a description states the range
// ("n is 0 to 3"), it must agree.
var numbered = map[string]int{
	"net":      32,
	"ide":      4,
	"scsi":     31,
	"virtio":   16,
	"sata":     6,
	"unused":   256,
	"ipconfig": 32,
	"usb":      14,
	"hostpci":  16,
	"serial":   4,
	"parallel": 3,
	"numa":     8,
	"virtiofs": 10,
}

var statedRange = regexp.MustCompile(`\(n is 0 to (\d+)\)`)

// namedPropertyStrings are the property-string formats PVE registers by name (register_format
// with a hash), which apidata.js names but does not describe.
var namedPropertyStrings = map[string]map[string]pveschema.Param{
	// qemu-server src/PVE/QemuServer/Network.pm, $ipconfig_fmt.
	"pve-qm-ipconfig": {
		"ip":  {Type: "string", Format: "pve-ipv4-config", Optional: true},
		"gw":  {Type: "string", Format: "ipv4", Optional: true, Requires: "ip"},
		"ip6": {Type: "string", Format: "pve-ipv6-config", Optional: true},
		"gw6": {Type: "string", Format: "ipv6", Optional: true, Requires: "ip6"},
	},
}

// node is one path of apidata.js's tree. Its methods are decoded only for the kept paths:
// elsewhere apidata.js is looser than what method expects.
type node struct {
	Path     string                     `json:"path"`
	Info     map[string]json.RawMessage `json:"info"`
	Children []node                     `json:"children"`
}

type method struct {
	Name        string          `json:"name"`
	Protected   int             `json:"protected"`
	ProxyTo     string          `json:"proxyto"`
	Permissions json.RawMessage `json:"permissions"`
	Returns     struct {
		Type string `json:"type"`
	} `json:"returns"`
	Parameters struct {
		AdditionalProperties *int                `json:"additionalProperties"`
		Properties           map[string]property `json:"properties"`
	} `json:"parameters"`
}

type property struct {
	Type        string   `json:"type"`
	Description string   `json:"description"`
	Optional    int      `json:"optional"`
	Enum        []string `json:"enum"`
	Pattern     string   `json:"pattern"`
	// Format is a format's name, or the inlined description of a property string.
	Format    json.RawMessage `json:"format"`
	Minimum   perlNumber      `json:"minimum"`
	Maximum   perlNumber      `json:"maximum"`
	MinLength *int            `json:"minLength"`
	MaxLength *int            `json:"maxLength"`
	Requires  string          `json:"requires"`
	// Alias, KeyAlias and DefaultKey are keys' attributes in a property string's format.
	Alias      string `json:"alias"`
	KeyAlias   string `json:"keyAlias"`
	DefaultKey int    `json:"default_key"`
}

// perlNumber is a number apidata.js may give as a JSON string ("minimum": "0").
type perlNumber struct{ v *float64 }

func (n *perlNumber) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("number %s: %w", b, err)
	}
	n.v = &f
	return nil
}

func main() {
	in := flag.String("in", "", "apidata.json: pve-docs apidata.js as plain JSON")
	out := flag.String("out", "", "schema.json to write")
	flag.Parse()
	if *in == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*in, *out); err != nil {
		log.Fatal(err)
	}
}

func run(in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var tree []node
	if err := json.Unmarshal(data, &tree); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	byPath := make(map[string]node)
	var walk func([]node)
	walk = func(ns []node) {
		for _, n := range ns {
			byPath[n.Path] = n
			walk(n.Children)
		}
	}
	walk(tree)

	var eps []pveschema.Endpoint
	formats := make(map[string]map[string]pveschema.Param)
	for _, p := range paths {
		n, ok := byPath[p]
		if !ok || len(n.Info) == 0 {
			return fmt.Errorf("%s: no path %s", in, p)
		}
		for m, raw := range n.Info {
			ep, epFormats, err := endpoint(m, p, raw)
			if err != nil {
				return fmt.Errorf("%s %s: %w", m, p, err)
			}
			for name, format := range epFormats {
				if prev, ok := formats[name]; ok && !reflect.DeepEqual(prev, format) {
					return fmt.Errorf("%s %s: property string %s differs from another endpoint's", m, p, name)
				}
				formats[name] = format
			}
			eps = append(eps, ep)
		}
	}
	sort.Slice(eps, func(i, j int) bool {
		if eps[i].Path != eps[j].Path {
			return eps[i].Path < eps[j].Path
		}
		return eps[i].Method < eps[j].Method
	})

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(pveschema.Schema{Endpoints: eps, PropertyStrings: formats}); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// endpoint is one method of a path, and the property-string formats its parameters name.
func endpoint(m, path string, raw json.RawMessage) (pveschema.Endpoint, map[string]map[string]pveschema.Param, error) {
	var info method
	if err := json.Unmarshal(raw, &info); err != nil {
		return pveschema.Endpoint{}, nil, err
	}
	// pveschema.Validate treats every parameter it does not know as an error, which only holds
	// for methods that forbid additional properties.
	if ap := info.Parameters.AdditionalProperties; ap == nil || *ap != 0 {
		return pveschema.Endpoint{}, nil, errors.New("allows additional properties")
	}
	ep := pveschema.Endpoint{
		Method:      m,
		Path:        path,
		Name:        info.Name,
		Protected:   info.Protected != 0,
		ProxyTo:     info.ProxyTo,
		Permissions: info.Permissions,
		Returns:     info.Returns.Type,
		Params:      make(map[string]pveschema.Param),
	}
	formats := make(map[string]map[string]pveschema.Param)
	for name, prop := range info.Parameters.Properties {
		base, isNumbered := strings.CutSuffix(name, "[n]")
		p, err := param(prop)
		if err == nil {
			err = propertyString(base, &p, prop, formats)
		}
		if err != nil {
			return ep, nil, fmt.Errorf("parameter %s: %w", name, err)
		}
		if !isNumbered {
			ep.Params[name] = p
			continue
		}
		count, ok := numbered[base]
		if !ok {
			return ep, nil, fmt.Errorf("parameter %s: no known range", name)
		}
		if m := statedRange.FindStringSubmatch(prop.Description); m != nil && m[1] != strconv.Itoa(count-1) {
			return ep, nil, fmt.Errorf("parameter %s: described as 0 to %s, expected 0 to %d", name, m[1], count-1)
		}
		for i := range count {
			ep.Params[base+strconv.Itoa(i)] = p
		}
	}
	return ep, formats, nil
}

// propertyString names p's property-string format, if it has one, and adds the format to
// formats: an inlined one under the parameter's base name, a named one under its name.
func propertyString(base string, p *pveschema.Param, prop property, formats map[string]map[string]pveschema.Param) error {
	if named, ok := namedPropertyStrings[p.Format]; ok {
		p.PropertyString = p.Format
		formats[p.Format] = named
		return nil
	}
	if len(prop.Format) == 0 || prop.Format[0] != '{' {
		return nil
	}
	var keys map[string]property
	if err := json.Unmarshal(prop.Format, &keys); err != nil {
		return fmt.Errorf("property string: %w", err)
	}
	format := make(map[string]pveschema.Param, len(keys))
	for key, kp := range keys {
		if len(kp.Format) > 0 && kp.Format[0] == '{' {
			return fmt.Errorf("property string: key %s is a property string itself", key)
		}
		sub, err := param(kp)
		if err != nil {
			return fmt.Errorf("property string: key %s: %w", key, err)
		}
		format[key] = sub
	}
	p.PropertyString = base
	formats[base] = format
	return nil
}

// goPattern is a Perl pattern as Go's regexp reads it. A Perl qr// interpolated into another
// pattern stringifies as "(?^:...)", a group with the default flags, which is a plain
// non-capturing group (access-control's userid pattern is made so); "(?^i:...)" adds its own
// flags to them (pve-network's vnet alias), as Go's "(?i:...)" does.
func goPattern(perl string) string {
	return strings.ReplaceAll(perl, "(?^", "(?")
}

func param(prop property) (pveschema.Param, error) {
	p := pveschema.Param{
		Type:       prop.Type,
		Optional:   prop.Optional != 0,
		Enum:       prop.Enum,
		Pattern:    goPattern(prop.Pattern),
		Minimum:    prop.Minimum.v,
		Maximum:    prop.Maximum.v,
		MinLength:  prop.MinLength,
		MaxLength:  prop.MaxLength,
		Requires:   prop.Requires,
		Alias:      prop.Alias,
		KeyAlias:   prop.KeyAlias,
		DefaultKey: prop.DefaultKey != 0,
	}
	if len(prop.Format) > 0 && prop.Format[0] == '"' {
		if err := json.Unmarshal(prop.Format, &p.Format); err != nil {
			return p, err
		}
	}
	if p.Pattern != "" {
		if _, err := regexp.Compile("^" + p.Pattern + "$"); err != nil {
			return p, fmt.Errorf("pattern: %w", err)
		}
	}
	return p, nil
}
