package workflows

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// vm is a VM the cluster holds for a proxy.
type vm struct {
	Node   string
	VMID   int
	Status string
	Lock   string
	Config pve.VMConfig
}

func (v vm) ref() activities.VMRef { return activities.VMRef{Node: v.Node, VMID: v.VMID} }

// holdings is what the cluster holds for one proxy.
type holdings struct {
	// Resources is the cluster resources list the lookup read.
	Resources []pve.VMResource
	// Ours are the VMs carrying the proxy's mark.
	Ours []vm
	// Foreign are the VMIDs of VMs with the proxy's name that do not carry its mark.
	Foreign []int
}

// lookup finds the VMs of a proxy: those named after it, and those whose name PVE does not show
// yet (a fresh clone appears in cluster resources without a name for some seconds). A VM is ours
// only if its description carries our mark with our UID; expectVMID names a VM known to be ours
// even though a clone in progress has not written its mark yet.
func lookup(ctx workflow.Context, s settings, t *tracker, name, uid string, expectVMID int) (holdings, error) {
	var a *activities.Activities
	t.step("list cluster resources")
	var h holdings
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, s.callOptions("list cluster resources")),
		a.ClusterResources).Get(ctx, &h.Resources)
	if err != nil {
		return h, fail("list cluster resources", err)
	}
	for _, r := range h.Resources {
		if r.Type != "qemu" || r.Template || (r.Name != name && r.Name != "" && r.VMID != expectVMID) {
			continue
		}
		ref := activities.VMRef{Node: r.Node, VMID: r.VMID}
		t.step(fmt.Sprintf("read config of VM %d on node %s", r.VMID, r.Node))
		var cfg pve.VMConfig
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, s.callOptions("read config of "+ref.String())),
			a.VMConfig, ref).Get(ctx, &cfg)
		if isType(err, activities.ErrNotFound) {
			continue // destroyed since the list was read
		}
		if err != nil {
			return h, fail("read config of "+ref.String(), err)
		}
		mark, managed := proxy.ParseDescription(cfg["description"])
		switch {
		case managed && mark.UID == uid, r.VMID == expectVMID && cfg["lock"] == "clone":
			h.Ours = append(h.Ours, vm{Node: r.Node, VMID: r.VMID, Status: r.Status, Lock: cfg["lock"], Config: cfg})
		case r.Name == name || cfg["name"] == name:
			h.Foreign = append(h.Foreign, r.VMID)
		}
	}
	slices.Sort(h.Foreign)
	return h, nil
}

// template finds the node of a template in the resources list.
func (h holdings) template(vmid int) (string, bool) {
	for _, r := range h.Resources {
		if r.Type == "qemu" && r.VMID == vmid {
			return r.Node, true
		}
	}
	return "", false
}
