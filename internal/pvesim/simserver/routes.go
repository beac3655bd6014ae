package simserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pveschema"
	"github.com/pveflow/pveflow/internal/pvesim"
)

// An endpoint serves one seam method.
type endpoint func(ctx context.Context, api pve.API, c *apiCall) (any, error)

// apiCall is a routed request: its path parameters and the request's parameters.
type apiCall struct {
	*request
	node, storage, volume string
	upid                  pve.UPID
	sid                   string
	vmid                  int
}

// endpoints are the seam methods (see pve.API), keyed by method and the schema's path
// template; migrate.go and ha.go add the migration's and the HA manager's.
var endpoints = map[string]endpoint{
	"GET /version": func(ctx context.Context, api pve.API, _ *apiCall) (any, error) {
		return result(api.Version(ctx))
	},
	"GET /nodes/{node}/status": func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return result(api.NodeStatus(ctx, c.node))
	},
	"GET /nodes/{node}/storage/{storage}/status": func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return result(api.StorageStatus(ctx, c.node, c.storage))
	},
	"GET /cluster/resources": clusterResources,
	"GET /nodes/{node}/qemu/{vmid}/config": func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return result(api.VMConfig(ctx, c.node, c.vmid))
	},
	"PUT /nodes/{node}/qemu/{vmid}/config": setVMConfig,
	"POST /nodes/{node}/qemu/{vmid}/clone": clone,
	"PUT /nodes/{node}/qemu/{vmid}/resize": resize,
	"POST /nodes/{node}/qemu/{vmid}/status/start": func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return result(api.Start(ctx, c.node, c.vmid))
	},
	"POST /nodes/{node}/qemu/{vmid}/status/stop": func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return result(api.Stop(ctx, c.node, c.vmid))
	},
	"POST /nodes/{node}/qemu/{vmid}/status/reboot": func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return result(api.Reboot(ctx, c.node, c.vmid))
	},
	"GET /nodes/{node}/qemu/{vmid}/status/current": func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return result(api.VMStatus(ctx, c.node, c.vmid))
	},
	"DELETE /nodes/{node}/qemu/{vmid}": destroyVM,
	"GET /nodes/{node}/tasks/{upid}/status": func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return result(api.TaskStatus(ctx, c.node, c.upid))
	},
	"GET /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces": agentInterfaces,
	"GET /nodes/{node}/qemu/{vmid}/agent/file-read":              agentFileRead,
	"POST /nodes/{node}/storage/{storage}/upload":                uploadISO,
	"DELETE /nodes/{node}/storage/{storage}/content/{volume}":    deleteVolume,
	"GET /nodes/{node}/storage/{storage}/content": func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return result(api.StorageContent(ctx, c.node, c.storage, c.params.Get("content")))
	},
	"GET /nodes/{node}/tasks/{upid}/log": taskLog,
	"GET /nodes/{node}/tasks":            nodeTasks,
	"GET /access/permissions":            permissions,
	"GET /cluster/sdn/vnets":             sdnVnets,
}

// result adapts a seam method's typed result to an endpoint's.
func result[T any](v T, err error) (any, error) {
	return v, err
}

func nodeTasks(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	p := pve.TaskListParams{Source: c.params.Get("source"), TypeFilter: c.params.Get("typefilter")}
	for key, to := range map[string]*int{"vmid": &p.VMID, "limit": &p.Limit} {
		if v := c.params.Get(key); v != "" {
			n, err := parseInt(key, v)
			if err != nil {
				return nil, err
			}
			*to = n
		}
	}
	return result(api.NodeTasks(ctx, c.node, p))
}

func clusterResources(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	switch c.params.Get("type") {
	case "", "vm":
		return result(api.ClusterResources(ctx))
	}
	// The model holds guests only; it has no node, storage or SDN resources to list.
	return []pve.VMResource{}, nil
}

func setVMConfig(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	cfg := make(pve.VMConfig, len(c.params))
	for k := range c.params {
		cfg[k] = c.params.Get(k)
	}
	// PUT config answers {"data":null}.
	return nil, api.SetVMConfig(ctx, c.node, c.vmid, cfg)
}

func clone(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	newID, err := intParam(c.params, "newid")
	if err != nil {
		return nil, err
	}
	full, err := boolParam(c.params, "full")
	if err != nil {
		return nil, err
	}
	return result(api.Clone(ctx, c.node, c.vmid, pve.CloneParams{
		NewID:       newID,
		Name:        c.params.Get("name"),
		Description: c.params.Get("description"),
		Full:        full,
		Target:      c.params.Get("target"),
		Storage:     c.params.Get("storage"),
		Pool:        c.params.Get("pool"),
	}))
}

// taskLog answers lines start+1 on of the task's log, limit of them (PVE's default 50), or all
// of them with a limit of 0 (pve-common src/PVE/Tools.pm dump_logfile_by_filehandle).
func taskLog(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	start, limit := 0, 50
	var err error
	if c.params.Has("start") {
		if start, err = intParam(c.params, "start"); err != nil {
			return nil, err
		}
	}
	if c.params.Has("limit") {
		if limit, err = intParam(c.params, "limit"); err != nil {
			return nil, err
		}
	}
	lines, err := api.TaskLog(ctx, c.node, c.upid)
	if err != nil {
		return nil, err
	}
	lines = lines[min(start, len(lines)):]
	if limit > 0 {
		lines = lines[:min(limit, len(lines))]
	}
	return lines, nil
}

// permissions answers /access/permissions for one path, as pveflow asks it; without a path PVE
// dumps the whole tree, which the model does not hold.
func permissions(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	path := c.params.Get("path")
	if path == "" {
		msg := "pvesim: /access/permissions without a path is not simulated"
		return nil, &pve.APIError{Status: http.StatusNotImplemented, Reason: msg, Message: msg}
	}
	privs, err := api.Permissions(ctx, path)
	if err != nil {
		return nil, err
	}
	answer := make(map[string]map[string]int, 1)
	answer[path] = make(map[string]int, len(privs))
	for p, propagate := range privs {
		answer[path][p] = 0
		if propagate {
			answer[path][p] = 1
		}
	}
	return answer, nil
}

// sdnVnets answers /cluster/sdn/vnets with each vnet's section as PVE lists it: its type, name
// and zone.
func sdnVnets(ctx context.Context, api pve.API, _ *apiCall) (any, error) {
	vnets, err := api.SDNVnets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, len(vnets))
	for i, v := range vnets {
		out[i] = map[string]string{"type": "vnet", "vnet": v.Vnet, "zone": v.Zone}
	}
	return out, nil
}

func resize(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	disk, err := stringParam(c.params, "disk")
	if err != nil {
		return nil, err
	}
	size, err := stringParam(c.params, "size")
	if err != nil {
		return nil, err
	}
	return result(api.Resize(ctx, c.node, c.vmid, disk, size))
}

func agentInterfaces(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	ifaces, err := api.AgentNetworkInterfaces(ctx, c.node, c.vmid)
	if err != nil {
		return nil, err
	}
	if ifaces == nil {
		ifaces = []pve.AgentInterface{}
	}
	return agentResult{Result: ifaces}, nil
}

// agentResult is how the agent endpoints wrap QEMU's answer: {"data":{"result":[...]}}.
type agentResult struct {
	Result []pve.AgentInterface `json:"result"`
}

// agentFileRead answers file-read as PVE does: count bytes from offset (defaults: 16 MiB from
// the start), base64 when decode is 0, bytes-read, and truncated when the read stopped short of
// the end (qemu-server src/PVE/API2/Qemu/Agent.pm file-read).
func agentFileRead(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	file, err := stringParam(c.params, "file")
	if err != nil {
		return nil, err
	}
	count, offset, decode := maxAgentRead, 0, true
	if c.params.Has("count") {
		if count, err = intParam(c.params, "count"); err != nil {
			return nil, err
		}
	}
	if c.params.Has("offset") {
		if offset, err = intParam(c.params, "offset"); err != nil {
			return nil, err
		}
	}
	if c.params.Has("decode") {
		if decode, err = boolParam(c.params, "decode"); err != nil {
			return nil, err
		}
	}
	content, err := api.AgentFileRead(ctx, c.node, c.vmid, file)
	if err != nil {
		return nil, err
	}
	data := []byte(content)[min(offset, len(content)):]
	// A map, not a struct: PVE sets truncated only when the read stopped short.
	answer := map[string]any{}
	if len(data) > count {
		data, answer["truncated"] = data[:count], 1
	}
	answer["bytes-read"], answer["content"] = len(data), string(data)
	if !decode {
		answer["content"] = base64.StdEncoding.EncodeToString(data)
	}
	return answer, nil
}

// maxAgentRead is PVE's $MAX_READ_SIZE, file-read's default and largest count.
const maxAgentRead = 16 * 1024 * 1024

func uploadISO(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	if content := c.params.Get("content"); content != "iso" {
		msg := fmt.Sprintf("pvesim: upload of content '%s' is not simulated, only 'iso'", content)
		return nil, &pve.APIError{Status: http.StatusNotImplemented, Reason: msg, Message: msg}
	}
	f := c.file
	return result(api.UploadISO(ctx, c.node, c.storage, f.name, bytes.NewReader(f.data), int64(len(f.data))))
}

func deleteVolume(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	upid, err := api.DeleteVolume(ctx, c.node, c.storage, c.volume)
	if err != nil || upid == "" {
		// PVE answers {"data":null} when the deletion finished within the request.
		return nil, err
	}
	return upid, nil
}

// route finds the endpoint for method and rel, the escaped path below /api2/json, and fills
// in its path parameters. A path the schema knows but the simulator does not serve is answered
// the way PVE answers a path it has no handler for, naming the path unescaped as PVE does.
func (r *request) route(method, rel string) (endpoint, *apiCall, error) {
	ep, ok := pveschema.Lookup(method, rel)
	serve, served := endpoints[ep.Method+" "+ep.Path]
	if !ok || !served {
		return nil, nil, notImplemented(method, rel)
	}
	vars := ep.PathParams
	c := &apiCall{
		request: r,
		node:    vars["node"],
		storage: vars["storage"],
		volume:  vars["volume"],
		upid:    pve.UPID(vars["upid"]),
		sid:     vars["sid"],
	}
	if v, ok := vars["vmid"]; ok {
		vmid, err := parseInt("vmid", v)
		if err != nil {
			return nil, nil, err
		}
		c.vmid = vmid
	}
	return serve, c, nil
}

// notImplemented is PVE's answer to a path without a handler (pve-manager PVE/HTTPServer.pm
// rest_handler), which names the path unescaped, as PVE routes it; rel is escaped.
func notImplemented(method, rel string) *pve.APIError {
	path, err := url.PathUnescape(rel)
	if err != nil {
		path = rel
	}
	msg := fmt.Sprintf("Method '%s %s' not implemented", method, path)
	return &pve.APIError{Status: http.StatusNotImplemented, Reason: msg, Message: msg}
}

// Parameter checks. The schema has verified the parameters before an endpoint runs; these
// give PVE's own answers should a value still not convert.

// paramError is PVE's 400 for parameters that fail verification (pve-common JSONSchema.pm).
func paramError(name, msg string) *pve.APIError {
	const reason = "Parameter verification failed."
	return &pve.APIError{Status: http.StatusBadRequest, Reason: reason, Message: reason, Errors: map[string]string{name: msg}}
}

func stringParam(params url.Values, name string) (string, error) {
	if !params.Has(name) {
		return "", paramError(name, "property is missing and it is not optional")
	}
	return params.Get(name), nil
}

func intParam(params url.Values, name string) (int, error) {
	s, err := stringParam(params, name)
	if err != nil {
		return 0, err
	}
	return parseInt(name, s)
}

func parseInt(name, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, paramError(name, fmt.Sprintf("type check ('integer') failed - got '%s'", s))
	}
	return n, nil
}

// boolParam reads an optional boolean, which form encoding sends as 0 or 1.
func boolParam(params url.Values, name string) (bool, error) {
	switch s := params.Get(name); s {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, paramError(name, fmt.Sprintf("type check ('boolean') failed - got '%s'", s))
	}
}

// purgeChooser is an API that destroys a VM with or without purge; pvesim.Cluster is one.
type purgeChooser interface {
	DestroyWith(ctx context.Context, node string, vmid int, p pvesim.DestroyParams) (pve.UPID, error)
}

// destroyVM destroys a VM with the request's purge flag where the API can choose, and as the
// seam's Destroy (with purge) otherwise. destroy-unreferenced-disks is verified by the schema
// and otherwise taken as given: the model's destroy removes every disk of the VMID.
func destroyVM(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	purge, err := boolParam(c.params, "purge")
	if err != nil {
		return nil, err
	}
	if d, ok := api.(purgeChooser); ok {
		return result(d.DestroyWith(ctx, c.node, c.vmid, pvesim.DestroyParams{Purge: purge}))
	}
	return result(api.Destroy(ctx, c.node, c.vmid))
}
