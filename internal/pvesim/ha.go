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
// (src/PVE/API2/HA/Resources.pm): the VM must exist, and the sid must be new.
func (c *Cluster) AddHAResource(ctx context.Context, p pve.HAResourceParams) error {
	_, err := call(c, ctx, Call{Method: "AddHAResource"}, func(time.Time) (struct{}, error) {
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
	delete(c.ha.resources, "vm:"+strconv.Itoa(vmid))
}
