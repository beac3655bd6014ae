package proxyvm

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
)

// vm is a VM the cluster holds for a proxy.
type vm struct {
	Node   string
	VMID   int
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
	// Unsettled are VMs on the proxy's probe VMIDs that a clone is still copying under PVE's
	// temporary config: whose they are shows only once the clone writes its mark.
	Unsettled []vm
	// Foreign are the VMIDs of VMs with the proxy's name that do not carry its mark.
	Foreign []int
	// Taken are the VMIDs the cluster uses for anything that is not the proxy's: a create does
	// not try to clone onto them.
	Taken map[int]bool
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

// maxFollows bounds how often one call follows a VM that PVE no longer finds where it was seen.
const maxFollows = 3

// proxyOps are the Proxmox look-ups both workflows make for one proxy, and the one rule by
// which they decide what is the proxy's: a VM is ours only when its mark carries our UID
// (proxy.OwnerOf), and never a template. Names, statuses and the template flag in cluster
// resources come from a cache that lags, so they decide nothing.
type proxyOps struct {
	ctx  workflow.Context
	s    core.Settings
	t    *core.Tracker
	uid  string
	name string
	// read makes every call one of a read workflow's (readOptions): no waits, one retry.
	read bool
}

// runID is the ID of the run of the operation: what the VM's mark records of the operation
// that wrote it (proxy.Op), to tell the run made again after its worker died what it did.
func (o *proxyOps) runID() string { return workflow.GetInfo(o.ctx).WorkflowExecution.RunID }

// callOptions are the options of one Proxmox call.
func (o *proxyOps) callOptions(summary string) workflow.ActivityOptions {
	if o.read {
		return o.s.ReadOptions(summary)
	}
	return o.s.CallOptions(summary)
}

// lookup finds what the cluster holds for the proxy: every VM on its probe VMIDs, where a create
// clones and so where its VMs are found in every state (still copying, nameless in the cache,
// named as the operator chose), and every VM carrying its name. It reads each one's config.
// Of the cluster's resources it keeps those VMs and the templates, by VMID (a create's).
//
// Of the guests it lists, only containers are ruled out unread, as no lag can make one ours: a
// guest's type (and node) comes from pmxcfs's vmlist, which PVE changes with the config file
// itself, and pveflow makes qemu VMs. Nothing else in the list can rule a VM out. Its name,
// status and template flag come from pvestatd's cache, keyed by VMID and kept 5 minutes, so
// this proxy's clone on a VMID freed a moment before shows the old VM's name and template flag
// until pvestatd's next round, and a person may rename the proxy's VM. Its lock and tags are
// live, but every proxy's clone has the same lock, and the tag, the same on every proxy's VM,
// comes only at the create's configure step. So the config of every VM on a probe VMID is read,
// another proxy's too: about 32 × the share of vmidRange that VMs hold, per lookup, which a
// wider vmidRange makes smaller. Containers, and VMs whose config says they are templates,
// stay Taken: a create clones onto neither.
func (o *proxyOps) lookup(templates ...int) (holdings, error) {
	h := holdings{Taken: make(map[int]bool)}
	probes := proxy.ProbeVMIDs(o.uid, o.s.VMIDRange)
	filter := activities.ResourcesFilter{VMIDs: append(workflow.DeterministicKeys(probes), templates...), Names: []string{o.name}}
	if err := o.listResources(filter, &h.Resources); err != nil {
		return h, err
	}
	for _, r := range h.Resources {
		h.Taken[r.VMID] = true
		if r.Type != "qemu" || (!probes[r.VMID] && r.Name != o.name) {
			continue
		}
		v := vm{Node: r.Node, VMID: r.VMID}
		gone, err := o.readVM(&v, readConfig, activities.WaitNone, 0, &v.Config)
		if err != nil {
			return h, err
		}
		if gone {
			delete(h.Taken, r.VMID)
			continue
		}
		v.Lock = v.Config["lock"]
		switch owner, known := proxy.OwnerOf(v.Config); {
		case v.Config["template"] == "1":
			// Never ours, whatever its mark says: a person made a template of a proxy's VM.
		case !known:
			h.Unsettled = append(h.Unsettled, v)
		case owner == o.uid:
			delete(h.Taken, r.VMID)
			h.Ours = append(h.Ours, v)
		case v.Config["name"] == o.name:
			h.Foreign = append(h.Foreign, r.VMID)
		}
	}
	slices.Sort(h.Foreign)
	return h, nil
}

// settle waits, for each VM in h.Unsettled, until its clone shows whose VM it is. One of this
// proxy's (an earlier run's clone whose answer was lost) joins h.Ours; another proxy's stays
// in h.Taken, and one whose clone failed is gone.
func (o *proxyOps) settle(h *holdings) error {
	for _, v := range h.Unsettled {
		gone, err := o.readVM(&v, readConfig, activities.WaitOwnerKnown, o.s.Budgets.Clone, &v.Config)
		switch {
		case err != nil:
			return err
		case gone:
			delete(h.Taken, v.VMID)
		default:
			if owner, _ := proxy.OwnerOf(v.Config); owner == o.uid {
				v.Lock = v.Config["lock"]
				delete(h.Taken, v.VMID)
				h.Ours = append(h.Ours, v)
			}
		}
	}
	h.Unsettled = nil
	return nil
}

// What readVM reads.
const (
	readConfig = "config"
	readStatus = "status"
)

// readVM reads VM v's config or status into out, waiting within budget until it is as waitFor
// says. PVE finds a VM only on the node a call names, and VMs move: a clone to another node
// moves its config there when it ends, and VMs migrate. So a VM PVE does not find is looked up
// in the cluster and followed to its node (v.Node changes); gone reports one that exists nowhere.
func (o *proxyOps) readVM(v *vm, what, waitFor string, budget time.Duration, out any) (gone bool, err error) {
	var a *activities.Activities
	for range maxFollows {
		ref := v.ref()
		step := fmt.Sprintf("read %s of %s", what, ref)
		switch waitFor {
		case activities.WaitUnlocked:
			step = fmt.Sprintf("wait for the lock on %s to clear", ref)
		case activities.WaitOwnerKnown:
			step = fmt.Sprintf("wait for the clone onto %s to show whose VM it is", ref)
		}
		o.t.Step(step)
		var activity, arg any = a.VMConfig, activities.VMConfigRequest{VMRef: ref, WaitFor: waitFor}
		if what == readStatus {
			activity, arg = a.VMStatus, activities.VMStatusRequest{VMRef: ref, WaitFor: waitFor}
		}
		opts := o.callOptions(step)
		if waitFor != activities.WaitNone {
			opts = o.s.WaitOptions(budget, step)
		}
		err := core.Call(o.ctx, opts, activity, arg).Get(o.ctx, out)
		if !core.IsType(err, activities.ErrNotFound) {
			if err != nil {
				return false, core.Fail(step, err)
			}
			return false, nil
		}
		node, found, err := o.locate(v.VMID)
		if err != nil || !found {
			return err == nil, err
		}
		v.Node = node
	}
	return false, core.Transientf("VM %d: Proxmox does not find it on node %s, where the cluster lists it", v.VMID, v.Node)
}

// locate finds the node VM vmid is on now; found is false when the cluster has no such VM. A
// container on vmid is no VM: the VM is gone and its VMID used again, and following it there
// would only read it again where no qemu call finds it.
func (o *proxyOps) locate(vmid int) (node string, found bool, err error) {
	r, found, err := o.guest(vmid)
	if err != nil || !found || r.Type != "qemu" {
		return "", false, err
	}
	return r.Node, true, nil
}

// guest is what the cluster holds on vmid, a VM or a container; found is false when nothing.
func (o *proxyOps) guest(vmid int) (r pve.VMResource, found bool, err error) {
	var resources []pve.VMResource
	if err := o.listResources(activities.ResourcesFilter{VMIDs: []int{vmid}}, &resources); err != nil {
		return pve.VMResource{}, false, err
	}
	for _, r := range resources {
		if r.VMID == vmid {
			return r, true, nil
		}
	}
	return pve.VMResource{}, false, nil
}

// listResources lists the cluster's VMs that filter wants.
func (o *proxyOps) listResources(filter activities.ResourcesFilter, out *[]pve.VMResource) error {
	return core.ListResources(o.ctx, o.callOptions("list cluster resources"), o.t, filter, out)
}
