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

// DeleteProxyInput is the input of DeleteProxy.
type DeleteProxyInput struct {
	UID string `json:"uid"`
	// Name is the VM's name as the proxy's entity knows it, for the delete's progress and
	// summaries; empty means proxy.NameFromUID(UID). The UID alone finds the VM and its seed
	// ISO, so a delete request's name is not read.
	Name string `json:"name,omitempty"`
	// UnlessWantedSince, in a delete request, makes the proxy's entity refuse it (FailSuperseded)
	// when it accepted a create or change of the proxy after that time (ProxyState.WantedAt):
	// the time a garbage collection began looking. DeleteProxy itself never reads it.
	UnlessWantedSince time.Time `json:"unlessWantedSince,omitzero"`
	// KeepAddresses keeps the proxy's addresses allocated in its address pool: the entity sets
	// it on the delete that begins a rebuild, whose create takes the same addresses again.
	KeepAddresses bool `json:"keepAddresses,omitempty"`
}

// DeleteProxyResult is what DeleteProxy returns.
type DeleteProxyResult struct {
	// Destroyed lists the VMs destroyed; empty when there was nothing to destroy.
	Destroyed []activities.VMRef `json:"destroyed"`
	// Skipped lists VMs with the proxy's name that do not carry its mark, left alone.
	Skipped []int `json:"skipped,omitempty"`
	// Warnings are the warnings of the Proxmox tasks the delete ran that ended "WARNINGS: N",
	// read from their logs, each naming its task and node: a disk a destroy could not remove
	// stays on its storage.
	Warnings []string `json:"warnings,omitempty"`
}

// DeleteProxy deletes the proxy VM of a Proxy UID and its seed ISO. The UID alone finds them:
// the VM by its mark on the proxy's probe VMIDs, whatever its name and state, the seed ISO by
// the UID's default name. It runs only as a child of the proxy's entity (Proxy), which stops a
// running create first. A VM that is absent, or that does not carry the proxy's mark, is left
// alone. Deleting twice succeeds twice.
func (w *Workflows) DeleteProxy(ctx workflow.Context, in DeleteProxyInput) (_ DeleteProxyResult, err error) {
	var t *core.Tracker
	defer func() { recordOutcome(ctx, deleteMetrics, in.UID, t, err) }()
	if err := checkOperation(ctx, "delete", in.UID, nil); err != nil {
		return DeleteProxyResult{}, err
	}
	if in.Name == "" {
		in.Name = proxy.NameFromUID(in.UID)
	}
	t, err = core.NewTracker(ctx, in.UID, in.Name)
	if err != nil {
		return DeleteProxyResult{}, err
	}
	var s core.Settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return core.SettingsOf(w.Config) }).Get(&s); err != nil {
		return DeleteProxyResult{}, err
	}
	d := &deletion{
		proxyOps: proxyOps{ctx: t.Ctx, s: s, t: t, uid: in.UID, name: in.Name},
		in:       in,
	}
	res, err := d.run()
	t.Closed(err, core.PhaseDeleted)
	if err != nil {
		return DeleteProxyResult{}, err
	}
	res.Warnings = t.Status.Warnings
	return res, nil
}

type deletion struct {
	proxyOps
	in DeleteProxyInput
}

func (d *deletion) run() (DeleteProxyResult, error) {
	d.t.Phase(core.PhaseLookingUp, "look up the proxy's VMs")
	h, err := d.lookup()
	if err != nil {
		return DeleteProxyResult{}, err
	}
	if err := d.settle(&h); err != nil {
		return DeleteProxyResult{}, err
	}
	res := DeleteProxyResult{Destroyed: []activities.VMRef{}, Skipped: h.Foreign}
	if len(h.Foreign) > 0 {
		workflow.GetLogger(d.ctx).Debug("leaving VMs with the proxy's name but without its mark alone", "name", d.in.Name, "vmids", h.Foreign)
	}
	nodes := slices.Clone(d.s.Nodes)
	for _, v := range h.Ours {
		destroyed, err := d.destroy(&v)
		if err != nil {
			return DeleteProxyResult{}, err
		}
		if !destroyed {
			res.Skipped = append(res.Skipped, v.VMID)
			continue
		}
		res.Destroyed = append(res.Destroyed, v.ref())
		nodes = append(nodes, v.Node)
	}
	slices.Sort(nodes)
	if err := d.deleteSeed(slices.Compact(nodes), proxy.SeedVolID(d.s.ISOStorage, proxy.NameFromUID(d.uid))); err != nil {
		return res, err
	}
	return res, d.freeAddresses()
}

// destroy stops and destroys a VM of the proxy: once no lock (a clone still copying, a backup)
// holds it, and only if it still carries the proxy's mark then. It follows the VM to the node
// it moves to, and reports it destroyed only when it exists no more.
func (d *deletion) destroy(v *vm) (destroyed bool, err error) {
	for range maxFollows {
		d.t.VM(v.Node, v.VMID)
		d.t.Phase(core.PhaseStopping, fmt.Sprintf("wait for the lock on %s to clear", v.ref()))
		var cfg pve.VMConfig
		gone, err := d.readVM(v, readConfig, activities.WaitUnlocked, d.s.Budgets.Unlock, &cfg)
		if err != nil || gone {
			return gone, err
		}
		if owner, _ := proxy.OwnerOf(cfg); owner != d.uid {
			workflow.GetLogger(d.ctx).Warn("leaving a VM alone whose mark changed since it was looked up", "vmid", v.VMID, "node", v.Node)
			return false, nil
		}
		if err := d.unregisterHA(v.ref()); err != nil {
			return false, err
		}
		var st pve.VMStatus
		if gone, err = d.readVM(v, readStatus, activities.WaitNone, 0, &st); err != nil || gone {
			return gone, err
		}
		vanished, err := d.stopAndDestroy(v.ref(), st.Status == "running")
		if err != nil || !vanished {
			return err == nil, err
		}
		// PVE did not find it where it was a moment ago: it moved, or is gone.
		node, found, err := d.locate(v.VMID)
		if err != nil || !found {
			return err == nil, err
		}
		v.Node = node
	}
	return false, core.Transientf("delete proxy %s: VM %d keeps moving while it is being destroyed", d.in.Name, v.VMID)
}

// stopAndDestroy stops a VM that runs and destroys it. vanished reports that PVE no longer found
// the VM on the node ref names, at the stop as at the destroy.
//
// Either may find it gone. The stop is a local activity, recorded only when its workflow task
// completes; the destroy an activity (callRecorded), which records the lookup and the stop
// before it is made, so that a delete whose worker was lost after its destroy took effect
// answers the VM it destroyed. A destroy made again after its worker was lost may find the
// first one's task still holding the VM's config lock, which fails it: it is made again, and
// finds the VM gone. A stop made again finds it stopped, which ends OK.
func (d *deletion) stopAndDestroy(ref activities.VMRef, running bool) (vanished bool, err error) {
	var a *activities.Activities
	if running {
		step, err := d.redoOnLock("the stop of "+ref.String(), func() (string, error) {
			summary := "stop " + ref.String()
			var upid pve.UPID
			if err := core.Call(d.ctx, d.s.CallOptions(summary), a.Stop, ref).Get(d.ctx, &upid); err != nil {
				return summary, err
			}
			summary = "wait for stop of " + ref.String()
			if err := core.WaitTask(d.ctx, d.s, d.t, core.LocalLooksFirst, upid, d.s.Budgets.Stop, summary); err != nil {
				return summary, err
			}
			return d.awaitHAStop(ref, upid)
		})
		if notFound(err) {
			return true, nil
		}
		if err != nil {
			return false, core.Fail(step, err)
		}
	}
	d.t.Phase(core.PhaseDestroying, "destroy "+ref.String())
	// A destroy task that fails on a lock (a backup's) destroyed nothing: it is made again, as
	// a refused destroy call is, within the unlock budget.
	step, err := d.redoOnLock("the destroy of "+ref.String(), func() (string, error) {
		summary := "destroy " + ref.String()
		var upid pve.UPID
		if err := core.CallRecorded(d.ctx, d.s.CallOptions(summary), a.Destroy, ref).Get(d.ctx, &upid); err != nil {
			return summary, err
		}
		summary = "wait for destroy of " + ref.String()
		return summary, core.WaitTask(d.ctx, d.s, d.t, core.LocalLooksFirst, upid, d.s.Budgets.Destroy, summary)
	})
	if notFound(err) {
		return true, nil
	}
	if err != nil {
		return false, core.Fail(step, err)
	}
	return false, nil
}

// awaitHAStop waits, after a stop that PVE handed to its HA manager (a hastop task: qemu-server
// API2/Qemu.pm vm_stop, which ends once the request is written down), until the manager has
// stopped the VM, which PVE refuses to destroy while it runs. A VM the delete unregistered
// first (unregisterHA) is stopped by a qmstop task, which ends with the VM stopped: this is for
// a VM that is an HA resource while proxmox.ha is off, registered by hand or before ha was
// turned off. The destroy's purge then removes its resource.
func (d *deletion) awaitHAStop(ref activities.VMRef, stop pve.UPID) (step string, err error) {
	if info, err := pve.ParseUPID(stop); err != nil || info.Type != "hastop" {
		return "", nil
	}
	var a *activities.Activities
	summary := "wait for PVE's HA manager to stop " + ref.String()
	d.t.Step(summary)
	return summary, core.Poll(d.ctx, d.s.WaitOptions(d.s.Budgets.Stop, summary), a.VMStatus,
		activities.VMStatusRequest{VMRef: ref, WaitFor: activities.WaitStopped, Pace: d.s.Pace(d.ctx)}).Get(d.ctx, nil)
}

// notFound reports whether a call, or the task it started, did not find the VM it names.
func notFound(err error) bool {
	return core.IsType(err, activities.ErrNotFound) || core.IsTaskFailedWith(err, activities.ErrNotFound)
}

// deleteSeed deletes the proxy's seed ISO, volid, on every node that may hold it.
func (d *deletion) deleteSeed(nodes []string, volid string) error {
	d.t.Phase(core.PhaseCleaning, "delete seed ISO")
	for _, node := range nodes {
		if err := d.deleteSeedISO(node, volid); err != nil {
			return err
		}
	}
	return nil
}
