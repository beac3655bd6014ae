package proxyvm

import (
	"github.com/pveflow/pveflow/activities"

	"github.com/pveflow/pveflow/workflows/core"
)

// registerHA makes the proxy's ready VM a resource of PVE's HA manager when proxmox.ha is on:
// the HA manager restarts it, or starts it on another node, when its node fails, and moves it
// off a node put into maintenance. A VM registered already counts.
func (o *proxyOps) registerHA(ref activities.VMRef) error {
	if !o.s.HA.Enabled {
		return nil
	}
	var a *activities.Activities
	summary := "register " + ref.String() + " as an HA resource"
	o.t.Step(summary)
	req := activities.HAResourceRequest{VMRef: ref, State: o.s.HA.State, Comment: "pveflow proxy " + o.uid}
	if err := core.Call(o.ctx, o.s.CallOptions(summary), a.AddHAResource, req).Get(o.ctx, nil); err != nil {
		return core.Fail(summary, err)
	}
	return nil
}

// unregisterHA removes the VM's HA resource when proxmox.ha is on, before the VM is stopped:
// PVE hands a stop of an HA-managed VM to the HA manager (a hastop task that ends before the VM
// has stopped), which a destroy would then find running. The destroy's purge would remove the
// resource too. A VM without one counts as removed.
func (o *proxyOps) unregisterHA(ref activities.VMRef) error {
	if !o.s.HA.Enabled {
		return nil
	}
	var a *activities.Activities
	summary := "remove the HA resource of " + ref.String()
	o.t.Step(summary)
	if err := core.Call(o.ctx, o.s.CallOptions(summary), a.DeleteHAResource, ref).Get(o.ctx, nil); err != nil {
		return core.Fail(summary, err)
	}
	return nil
}
