package simserver

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pveschema"
)

// render turns a seam result into the value PVE would serialise for it, ready for
// encoding/json. PVE's Perl writes booleans as the integers 0 and 1 and leaves out properties it
// has no value for (lock and tags when unset, a fresh clone's name, exitstatus while a task
// runs, a guest interface's missing addresses); the DTOs say "absent" with an empty string or a
// nil slice, so those fields are left out. The pve DTOs keep plain bool fields for their
// callers, which is why this walks them instead of relying on their JSON tags alone.
func render(v any) any {
	switch v := v.(type) {
	case nil:
		return nil
	case pve.VMConfig:
		return renderConfig(v)
	}
	return renderValue(reflect.ValueOf(v))
}

func renderValue(v reflect.Value) any {
	switch {
	case v.Kind() == reflect.Bool:
		if v.Bool() {
			return 1
		}
		return 0
	case v.Kind() == reflect.String:
		return v.String()
	case v.CanInt():
		return v.Int()
	case v.CanFloat():
		return v.Float()
	case v.Kind() == reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = renderValue(v.Index(i))
		}
		return out
	case v.Kind() == reflect.Struct:
		return renderStruct(v)
	}
	return v.Interface()
}

func renderStruct(v reflect.Value) map[string]any {
	t := v.Type()
	out := make(map[string]any, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fv := v.Field(i)
		if (fv.Kind() == reflect.String && fv.Len() == 0) || (fv.Kind() == reflect.Slice && fv.IsNil()) {
			continue
		}
		out[name] = renderValue(fv)
	}
	return out
}

// renderConfig writes a VM config the way GET .../config returns it. qemu-server converts each
// value to its schema type when it parses the config file (check_type), so integer, number and
// boolean options (cores, sockets, onboot, ...) come back as JSON numbers and everything else,
// property strings such as memory and agent included, as strings. VMConfig has lost the types;
// the schema of PUT .../config has them.
func renderConfig(cfg pve.VMConfig) map[string]any {
	types := configTypes()
	out := make(map[string]any, len(cfg))
	for k, v := range cfg {
		switch types[k] {
		case "integer", "number", "boolean":
			if _, err := strconv.ParseFloat(v, 64); err == nil && json.Valid([]byte(v)) {
				out[k] = json.Number(v)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// configTypes maps each VM config option to its schema type.
var configTypes = sync.OnceValue(func() map[string]string {
	ep, ok := pveschema.Lookup(http.MethodPut, "/nodes/{node}/qemu/{vmid}/config")
	if !ok {
		panic("simserver: the schema has no PUT /nodes/{node}/qemu/{vmid}/config")
	}
	types := make(map[string]string, len(ep.Params))
	for name, p := range ep.Params {
		types[name] = p.Type
	}
	return types
})
