package workflows

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// DeleteProxyInput is the input of DeleteProxy.
type DeleteProxyInput struct {
	UID string `json:"uid"`
	// Name is the VM's name; empty means the name from ProviderID, else proxy.NameFromUID(UID).
	Name string `json:"name,omitempty"`
	// ProviderID is "vms/<vmid>/<name>", when the operator knows it.
	ProviderID string `json:"providerID,omitempty"`
}

// DeleteProxyResult is what DeleteProxy returns.
type DeleteProxyResult struct {
	// Destroyed lists the VMs destroyed; empty when there was nothing to destroy.
	Destroyed []activities.VMRef `json:"destroyed"`
	// Skipped lists VMs with the proxy's name that do not carry its mark, left alone.
	Skipped []int `json:"skipped,omitempty"`
}

// DeleteProxy deletes the proxy VM of a Proxy UID and its seed ISO. A running CreateProxy of the
// same UID is stopped first, and the delete waits until it has closed. A VM that is absent, or
// that carries the proxy's name without its mark, is left alone. Deleting twice succeeds twice.
func (w *Workflows) DeleteProxy(ctx workflow.Context, in DeleteProxyInput) (DeleteProxyResult, error) {
	if in.UID == "" {
		return DeleteProxyResult{}, permanentf("delete proxy: the proxy UID is empty")
	}
	if in.ProviderID != "" {
		_, name, err := proxy.ParseProviderID(in.ProviderID)
		if err != nil {
			return DeleteProxyResult{}, permanentf("delete proxy %s: %v", in.UID, err)
		}
		if in.Name == "" {
			in.Name = name
		}
	}
	if in.Name == "" {
		in.Name = proxy.NameFromUID(in.UID)
	}
	t, err := newTracker(ctx, in.UID, in.Name)
	if err != nil {
		return DeleteProxyResult{}, err
	}
	var s settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return settingsOf(w.Config) }).Get(&s); err != nil {
		return DeleteProxyResult{}, err
	}
	d := &deletion{ctx: ctx, in: in, s: s, t: t}
	res, err := d.run()
	if err != nil {
		t.failed(err)
		return DeleteProxyResult{}, err
	}
	t.phase(PhaseDeleted, "done")
	return res, nil
}

type deletion struct {
	ctx workflow.Context
	in  DeleteProxyInput
	s   settings
	t   *tracker
}

func (d *deletion) run() (DeleteProxyResult, error) {
	closed := d.stopCreate()
	d.t.phase(PhaseLookingUp, "look up the proxy's VMs")
	h, err := lookup(d.ctx, d.s, d.t, d.in.Name, d.in.UID, closed.VMID)
	if err != nil {
		return DeleteProxyResult{}, err
	}
	res := DeleteProxyResult{Destroyed: []activities.VMRef{}, Skipped: h.Foreign}
	if len(h.Foreign) > 0 {
		workflow.GetLogger(d.ctx).Info("Leaving VMs with the proxy's name but without its mark alone", "name", d.in.Name, "vmids", h.Foreign)
	}
	nodes := slices.Clone(d.s.Nodes)
	for _, v := range h.Ours {
		if err := d.destroy(v); err != nil {
			return DeleteProxyResult{}, err
		}
		res.Destroyed = append(res.Destroyed, v.ref())
		nodes = append(nodes, v.Node)
	}
	if closed.Node != "" {
		nodes = append(nodes, closed.Node)
	}
	slices.Sort(nodes)
	return res, d.deleteSeed(slices.Compact(nodes))
}

// stopCreate stops a running CreateProxy of the same UID and waits until it has closed, so that
// no create step runs while the delete looks. The closed create says which VM it was working
// on. A create that does not answer within the unlock budget is logged and the delete goes on.
func (d *deletion) stopCreate() createClosed {
	d.t.phase(PhaseStoppingCreate, "stop a running create")
	var closed createClosed
	err := workflow.SignalExternalWorkflow(d.ctx, CreateWorkflowID(d.in.UID), "", deleteRequestedSignal, nil).Get(d.ctx, nil)
	if err != nil {
		return closed // no create runs
	}
	d.t.step("wait for the create to stop")
	timerCtx, stopTimer := workflow.WithCancel(d.ctx)
	defer stopTimer()
	timedOut := false
	workflow.NewSelector(d.ctx).
		AddReceive(workflow.GetSignalChannel(d.ctx, createClosedSignal), func(ch workflow.ReceiveChannel, _ bool) {
			ch.Receive(d.ctx, &closed)
		}).
		AddFuture(workflow.NewTimer(timerCtx, d.s.Budgets.Unlock), func(workflow.Future) { timedOut = true }).
		Select(d.ctx)
	if timedOut {
		workflow.GetLogger(d.ctx).Warn("The running create did not stop in time; deleting anyway", "workflowID", CreateWorkflowID(d.in.UID))
	}
	return closed
}

// destroy stops and destroys one VM of the proxy, waiting out a lock first.
func (d *deletion) destroy(v vm) error {
	var a *activities.Activities
	ref := v.ref()
	d.t.vm(v.Node, v.VMID)
	summary := "read status of " + ref.String()
	opts := d.s.callOptions(summary)
	req := activities.VMStatusRequest{VMRef: ref}
	if v.Lock != "" {
		summary = fmt.Sprintf("wait for lock %q on %s to clear", v.Lock, ref)
		opts = d.s.waitOptions(d.s.Budgets.Unlock, summary)
		req.WaitFor = activities.WaitUnlocked
	}
	d.t.phase(PhaseStopping, summary)
	var st pve.VMStatus
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(d.ctx, opts), a.VMStatus, req).Get(d.ctx, &st)
	if isType(err, activities.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fail(summary, err)
	}
	if st.Status == "running" {
		summary = "stop " + ref.String()
		var upid pve.UPID
		if err := workflow.ExecuteActivity(workflow.WithActivityOptions(d.ctx, d.s.callOptions(summary)), a.Stop, ref).Get(d.ctx, &upid); err != nil {
			return fail(summary, err)
		}
		if err := waitTask(d.ctx, d.s, d.t, upid, d.s.Budgets.Stop, "wait for stop of "+ref.String()); err != nil {
			return err
		}
	}
	d.t.phase(PhaseDestroying, "destroy "+ref.String())
	summary = "destroy " + ref.String()
	var upid pve.UPID
	err = workflow.ExecuteActivity(workflow.WithActivityOptions(d.ctx, d.s.callOptions(summary)), a.Destroy, ref).Get(d.ctx, &upid)
	if isType(err, activities.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fail(summary, err)
	}
	err = awaitTask(d.ctx, d.s, d.t, upid, d.s.Budgets.Destroy, "wait for destroy of "+ref.String())
	if err != nil && !isTaskFailedWith(err, activities.ErrNotFound) {
		return fail("wait for destroy of "+ref.String(), err)
	}
	return nil
}

// deleteSeed deletes the proxy's seed ISO on every node that may hold it. PVE ends the deletion
// of a missing ISO with task OK, so absence costs nothing.
func (d *deletion) deleteSeed(nodes []string) error {
	var a *activities.Activities
	d.t.phase(PhaseCleaning, "delete seed ISO")
	volid := proxy.SeedVolID(d.s.ISOStorage, d.in.Name)
	for _, node := range nodes {
		summary := fmt.Sprintf("delete seed ISO %s on %s", volid, node)
		var upid pve.UPID
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(d.ctx, d.s.callOptions(summary)), a.DeleteVolume,
			activities.DeleteVolumeRequest{StorageRef: activities.StorageRef{Node: node, Storage: d.s.ISOStorage}, VolID: volid}).Get(d.ctx, &upid)
		if isType(err, activities.ErrNotFound) {
			continue
		}
		if err != nil {
			return fail(summary, err)
		}
		if upid == "" {
			continue
		}
		if err := waitTask(d.ctx, d.s, d.t, upid, d.s.Budgets.Request, "wait for "+summary); err != nil {
			return err
		}
	}
	return nil
}
