package pvesim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// haState is what the HA manager keeps (pve-ha-manager): its resources by sid, and the nodes
// in maintenance mode.
type haState struct {
	resources   map[string]pve.HAResourceParams
	maintenance map[string]bool
	// round is how long the manager takes to act on a requested state (Options.HARound).
	round time.Duration
}

// defaultHARound is Options.HARound's default.
const defaultHARound = 50 * time.Millisecond

// The HA manager, in short. PVE's CRM (src/PVE/HA/Manager.pm) and each node's LRM
// (src/PVE/HA/LRM.pm) loop every 10 s or so; between them they bring a resource's VM to the
// state its config requests:
//
//   - started: the VM runs. The CRM hands the LRM a fresh command after each result while the
//     state is started ("ensure service gets started again if it went unexpected down",
//     next_state_started), and the LRM starts a VM that does not run (exec_resource_agent).
//   - stopped and disabled: the VM is stopped (next_state_started requests the stop; the LRM
//     shuts the VM down). They differ in what the simulator does not model: a stopped
//     resource is recovered to another node when its node fails, a disabled one is not.
//   - ignored: the manager drops the resource from its status and leaves the VM alone, and
//     qemu-server starts and stops it as any other VM (PVE::HA::Config::vm_is_ha_managed).
//
// The simulator acts once per request, HARound after the requested state was set (a
// registration, or the end of a hastart or hastop task), not in a loop: no VM of the model
// goes down by itself. An action the VM's state forbids (a lock, a clone holding the VM, a
// template) is not tried again: PVE's LRM fails it, and after its restart and relocation
// tries the CRM puts the resource into its error state, which needs an operator.

// haManaged reports whether vmid's start and stop go through the HA manager, as
// PVE::HA::Config::vm_is_ha_managed decides: it is a resource whose state is not ignored.
func (c *Cluster) haManaged(vmid int) bool {
	p, ok := c.ha.resources[haSID(vmid)]
	return ok && p.State != "ignored"
}

// requestHAState sets the requested state of vmid's resource at time at, and has the manager
// act on it a round later.
func (c *Cluster) requestHAState(vmid int, state string, at time.Time) {
	sid := haSID(vmid)
	p, ok := c.ha.resources[sid]
	if !ok {
		return
	}
	p.State = state
	c.ha.resources[sid] = p
	c.scheduleHARound(vmid, at)
}

// scheduleHARound has the manager bring vmid's VM to its resource's requested state a round
// after at.
func (c *Cluster) scheduleHARound(vmid int, at time.Time) {
	round := at.Add(c.ha.round)
	c.at(round, func() { c.applyHAState(vmid, round) })
}

// applyHAState is the manager's round for vmid at time at: it starts or stops the VM as its
// resource's current requested state says; an empty state is PVE's default, started.
func (c *Cluster) applyHAState(vmid int, at time.Time) {
	p, ok := c.ha.resources[haSID(vmid)]
	g := c.vms[vmid]
	if !ok || g == nil {
		return
	}
	switch p.State {
	case "", "started":
		if !g.running && c.startExit(g) == "OK" {
			c.boot(g, at)
		}
	case "stopped", "disabled":
		if g.running && !flockHeld(g) && g.cfg["lock"] == "" {
			g.halt()
		}
	}
}

// HAState is the requested state of HA resource sid, and whether there is one.
func (c *Cluster) HAState(sid string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance(c.clock.Now())
	p, ok := c.ha.resources[sid]
	return p.State, ok
}

// SetNodeMaintenance puts node into HA maintenance mode, or takes it out, as `ha-manager
// crm-command node-maintenance enable|disable <node>` does once the CRM took the command up.
func (c *Cluster) SetNodeMaintenance(node string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ha.maintenance == nil {
		c.ha.maintenance = make(map[string]bool)
	}
	c.ha.maintenance[node] = on
}

// HAResources are the sids of the HA manager's resources, sorted.
func (c *Cluster) HAResources() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.ha.resources))
}

// HAManagerStatus answers as pve-ha-manager's manager_status endpoint does
// (src/PVE/API2/HA/Status.pm): the CRM's node states, and each node's LRM. Every node is
// online, or in maintenance; a cluster that never had HA resources nor maintenance has an
// empty manager status, as PVE's does before the CRM first ran.
func (c *Cluster) HAManagerStatus(ctx context.Context) (pve.HAManagerStatus, error) {
	return call(c, ctx, Call{Method: "HAManagerStatus"}, func(now time.Time) (pve.HAManagerStatus, error) {
		if err := c.allow("/", "Sys.Audit"); err != nil {
			return pve.HAManagerStatus{}, err
		}
		var st pve.HAManagerStatus
		if len(c.ha.resources) == 0 && len(c.ha.maintenance) == 0 {
			return st, nil
		}
		names := slices.Sorted(maps.Keys(c.nodes))
		st.ManagerStatus = pve.HACRMStatus{MasterNode: names[0], NodeStatus: make(map[string]string)}
		st.LRMStatus = make(map[string]pve.HALRMStatus)
		for _, name := range names {
			state, mode := "online", "active"
			if c.ha.maintenance[name] {
				state, mode = "maintenance", "maintenance"
			}
			st.ManagerStatus.NodeStatus[name] = state
			st.LRMStatus[name] = pve.HALRMStatus{Mode: mode, State: "active", Timestamp: now.Unix()}
		}
		return st, nil
	})
}

// AddHAResource registers an HA resource as pve-ha-manager's create does
// (src/PVE/API2/HA/Resources.pm): the VM must exist, and the sid must be new. The manager then
// brings the VM to the requested state: the CRM adds a new resource as request_start when its
// state is started, as request_stop otherwise (Manager.pm, "adding new service").
func (c *Cluster) AddHAResource(ctx context.Context, p pve.HAResourceParams) error {
	_, err := call(c, ctx, Call{Method: "AddHAResource"}, func(now time.Time) (struct{}, error) {
		if err := c.allow("/", "Sys.Console"); err != nil {
			return struct{}{}, err
		}
		sid, vmid, err := parseHASID(p.SID)
		if err != nil {
			return struct{}{}, err
		}
		if c.vms[vmid] == nil {
			return struct{}{}, serverErr(fmt.Sprintf("resource 'vm:%d' does not exist in cluster", vmid))
		}
		if _, ok := c.ha.resources[sid]; ok {
			return struct{}{}, serverErr(fmt.Sprintf("resource ID '%s' already defined", sid))
		}
		if c.ha.resources == nil {
			c.ha.resources = make(map[string]pve.HAResourceParams)
		}
		p.SID = sid
		c.ha.resources[sid] = p
		c.scheduleHARound(vmid, now)
		return struct{}{}, nil
	})
	return err
}

// DeleteHAResource removes an HA resource; PVE refuses one it does not manage.
func (c *Cluster) DeleteHAResource(ctx context.Context, sid string) error {
	_, err := call(c, ctx, Call{Method: "DeleteHAResource"}, func(time.Time) (struct{}, error) {
		if err := c.allow("/", "Sys.Console"); err != nil {
			return struct{}{}, err
		}
		sid, _, err := parseHASID(sid)
		if err != nil {
			return struct{}{}, err
		}
		if _, ok := c.ha.resources[sid]; !ok {
			return struct{}{}, serverErr(fmt.Sprintf("cannot delete service '%s', not HA managed!", sid))
		}
		delete(c.ha.resources, sid)
		return struct{}{}, nil
	})
	return err
}

// parseHASID parses a VM's sid, "vm:<vmid>", as PVE::HA::Config::parse_sid does; the
// simulator knows no containers' HA, nor a bare VMID.
func parseHASID(sid string) (string, int, error) {
	name, ok := strings.CutPrefix(sid, "vm:")
	vmid, err := strconv.Atoi(name)
	if !ok || err != nil {
		return "", 0, serverErr(fmt.Sprintf("unable to parse service id '%s'", sid))
	}
	return sid, vmid, nil
}

// forgetHA removes vmid from the HA resources, as a destroy with purge does ("NOTE: removed VM
// <vmid> from HA resource configuration.").
func (c *Cluster) forgetHA(vmid int) {
	delete(c.ha.resources, haSID(vmid))
}

// haSID is the sid of VM vmid's HA resource.
func haSID(vmid int) string { return "vm:" + strconv.Itoa(vmid) }
