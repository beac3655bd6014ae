package activities

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// taskWarnings reads the warnings of a task that ended with exit "WARNINGS: N" from its log,
// each naming the task: the exit status counts them, only the log says what they are. A log
// without a warning line (one rotated away) gives the exit status itself.
func (a *Activities) taskWarnings(ctx context.Context, node string, upid pve.UPID, what, exit string) ([]string, error) {
	log, err := a.API.TaskLog(ctx, node, upid)
	if err != nil {
		return nil, failure(fmt.Sprintf("read log of %s task %s on node %s", what, upid, node), err)
	}
	texts := pve.TaskWarnings(log)
	if len(texts) == 0 {
		texts = []string{exit}
	}
	out := make([]string, len(texts))
	for i, w := range texts {
		out[i] = fmt.Sprintf("%s task %s on node %s: %s", what, upid, node, w)
	}
	return out, nil
}

// PermissionsRequest is the input of Permissions: the ACL paths to read.
type PermissionsRequest struct {
	Paths []string `json:"paths"`
	// Fresh reads every path from the cluster, past the worker's PrivilegeCache: the health
	// check's answer is what the token holds now, seconds after an operator changed an ACL.
	Fresh bool `json:"fresh,omitempty"`
}

// Permissions reads the token's effective privileges on each path, one call per path, or from
// the worker's PrivilegeCache when it has one and the request is not Fresh.
func (a *Activities) Permissions(ctx context.Context, req PermissionsRequest) (map[string]pve.Privileges, error) {
	out := make(map[string]pve.Privileges, len(req.Paths))
	for _, path := range req.Paths {
		var privs pve.Privileges
		var err error
		if a.Privileges == nil || req.Fresh {
			privs, err = a.API.Permissions(ctx, path)
		} else {
			privs, err = a.Privileges.read(ctx, a.API, path)
		}
		if err != nil {
			return nil, failure("read the API token's permissions on "+path, err)
		}
		out[path] = privs
	}
	return out, nil
}

// PrivilegeCacheTTL is how long a worker's creates reuse the privileges read on a path: long
// enough for a fleet's creates started together to share their reads, short enough that an ACL
// fixed after a refusal counts for the next create within seconds.
const PrivilegeCacheTTL = 10 * time.Second

// PrivilegeCache keeps the privileges a worker read on each ACL path for TTL. A fleet's creates
// start together and each reads the same paths before it clones: without it they would cost the
// cluster a read per path per create, held back by the call cap (proxmox.calls) for all the
// other calls to wait behind. Reads of one path at once share one call. It is safe for
// concurrent use.
type PrivilegeCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[string]*privilegeRead
}

// privilegeRead is one read of a path: done is closed once privs and err are set.
type privilegeRead struct {
	done  chan struct{}
	privs pve.Privileges
	err   error
	at    time.Time
}

// NewPrivilegeCache keeps each path's privileges for ttl, on the clock now (time.Now when nil).
func NewPrivilegeCache(ttl time.Duration, now func() time.Time) *PrivilegeCache {
	if now == nil {
		now = time.Now
	}
	return &PrivilegeCache{ttl: ttl, now: now, entries: map[string]*privilegeRead{}}
}

// read answers the privileges on path: from a read younger than the TTL, by waiting for the
// read in flight, or by a read of its own. A read that failed is never reused: a waiter whose
// shared read failed (its caller gave up, say) reads for itself.
func (c *PrivilegeCache) read(ctx context.Context, api pve.API, path string) (pve.Privileges, error) {
	c.mu.Lock()
	r := c.entries[path]
	if r != nil && r.finished() && (r.err != nil || c.now().Sub(r.at) >= c.ttl) {
		r = nil
	}
	if r == nil {
		r = &privilegeRead{done: make(chan struct{})}
		c.entries[path] = r
		c.mu.Unlock()
		r.privs, r.err = api.Permissions(ctx, path)
		r.at = c.now()
		close(r.done)
		return maps.Clone(r.privs), r.err
	}
	c.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		return api.Permissions(ctx, path)
	}
	return maps.Clone(r.privs), nil
}

func (r *privilegeRead) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// NetworkAccessRequest is the input of NetworkAccess: the templates whose NICs a clone copies.
type NetworkAccessRequest struct {
	Templates []VMRef `json:"templates"`
}

// NetworkAccess is what PVE's bridge check reads besides the NICs pveflow writes: the
// templates' NICs, which their clone copies, and the zones of the SDN vnets.
type NetworkAccess struct {
	// TemplateNICs are each template's net[n] values, by VMID.
	TemplateNICs map[int]pve.VMConfig `json:"templateNICs"`
	// Zones are the zones of the vnets GET /cluster/sdn/vnets lists, by vnet: those the token
	// holds SDN.Audit or SDN.Allocate on.
	Zones map[string]string `json:"zones,omitempty"`
}

// NetworkAccess reads the templates' NICs and the SDN vnets' zones.
func (a *Activities) NetworkAccess(ctx context.Context, req NetworkAccessRequest) (NetworkAccess, error) {
	out := NetworkAccess{TemplateNICs: map[int]pve.VMConfig{}, Zones: map[string]string{}}
	for _, ref := range req.Templates {
		cfg, err := a.API.VMConfig(ctx, ref.Node, ref.VMID)
		if err != nil {
			return NetworkAccess{}, failure("read config of template "+ref.String(), err)
		}
		out.TemplateNICs[ref.VMID] = proxy.NICsOf(cfg)
	}
	vnets, err := a.API.SDNVnets(ctx)
	if err != nil {
		return NetworkAccess{}, failure("read the SDN vnets", err)
	}
	for _, v := range vnets {
		out.Zones[v.Vnet] = v.Zone
	}
	return out, nil
}
