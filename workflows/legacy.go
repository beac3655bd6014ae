package workflows

// The code of CreateProxy and DeleteProxy as it ran before ownershipVersion. Runs recorded
// before that change replay on it and finish as they started: a workflow must do on replay what
// it did when it ran. Nothing else uses it. It can go, with the workflow.GetVersion branches
// that lead here, once no such run is open:
//
//	temporal workflow list --query 'ExecutionStatus = "Running" AND TemporalChangeVersion IS NULL'
//
// lists none. Its faults are why the change was made: the lookup took any VM being cloned at
// the VMID a create waited on for the proxy's own, a delete trusted the VMID a stopped create
// reported, and a create resumed from the status cluster resources cache.

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

func (c *create) runV0() (CreateProxyResult, error) {
	c.t.phase(PhaseLookingUp, "look up existing VMs")
	h, err := lookupV0(c.ctx, c.s, c.t, c.in.Name, c.in.UID, 0)
	if err != nil {
		return CreateProxyResult{}, err
	}
	if err := c.refuseForeign(h.Foreign); err != nil {
		return CreateProxyResult{}, err
	}
	if err := c.refuseMany(h.Ours); err != nil {
		return CreateProxyResult{}, err
	}
	if len(h.Ours) == 0 {
		if err := c.cloneV0(h); err != nil {
			return CreateProxyResult{}, err
		}
	} else {
		c.adopt(h.Ours[0])
		if err := c.waitUnlockedV0(); err != nil {
			return CreateProxyResult{}, err
		}
	}
	if c.vm.Status != "running" {
		if err := c.provision(); err != nil {
			return CreateProxyResult{}, err
		}
	}
	return c.waitReady()
}

func (c *create) cloneV0(h holdings) error {
	tmplNode, ok := h.template(c.p.TemplateVMID)
	if !ok {
		return permanentf("create proxy %s: template %d (image %q) not found in the cluster", c.in.Name, c.p.TemplateVMID, c.p.Image)
	}
	for attempt := 0; attempt < proxy.MaxProbes; attempt++ {
		vmid := proxy.VMIDFor(c.in.UID, c.s.VMIDRange, attempt)
		step, err := c.cloneOnto(tmplNode, vmid, attempt)
		if err == nil {
			c.vm = vm{Node: c.p.Node, VMID: vmid, Status: "stopped"}
			return nil
		}
		if !isType(err, activities.ErrAlreadyExists) && !isTaskFailedWith(err, activities.ErrAlreadyExists) {
			return fail(step, err)
		}
		if adopted, err := c.adoptIfOursV0(vmid); adopted || err != nil {
			return err
		}
	}
	return transientf("create proxy %s: no free VMID among %d tried in %d-%d", c.in.Name, proxy.MaxProbes, c.s.VMIDRange.Min, c.s.VMIDRange.Max)
}

func (c *create) adoptIfOursV0(vmid int) (bool, error) {
	h, err := lookupV0(c.ctx, c.s, c.t, c.in.Name, c.in.UID, vmid)
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(h.Ours, func(v vm) bool { return v.VMID == vmid })
	if i < 0 {
		return false, nil
	}
	c.adopt(h.Ours[i])
	if err := c.waitUnlockedV0(); err != nil {
		return false, err
	}
	if _, marked := proxy.ParseDescription(h.Ours[i].Config["description"]); marked {
		return true, nil
	}
	if h, err = lookupV0(c.ctx, c.s, c.t, c.in.Name, c.in.UID, 0); err != nil {
		return false, err
	}
	if slices.ContainsFunc(h.Ours, func(v vm) bool { return v.VMID == vmid }) {
		return true, nil
	}
	c.vm = vm{}
	return false, nil
}

func (c *create) waitUnlockedV0() error {
	if c.vm.Lock == "" {
		return nil
	}
	var a *activities.Activities
	step := fmt.Sprintf("wait for lock %q on VM %d on %s to clear", c.vm.Lock, c.vm.VMID, c.vm.Node)
	c.t.step(step)
	var st pve.VMStatus
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.waitOptions(c.s.Budgets.Clone, step)),
		a.VMStatus, activities.VMStatusRequest{VMRef: c.vm.ref(), WaitFor: activities.WaitUnlocked}).Get(c.ctx, &st)
	if err != nil {
		return fail(step, err)
	}
	c.vm.Lock, c.vm.Status = st.Lock, st.Status
	return nil
}

func (d *deletion) runV0() (DeleteProxyResult, error) {
	closed := d.stopCreateV0()
	d.t.phase(PhaseLookingUp, "look up the proxy's VMs")
	h, err := lookupV0(d.ctx, d.s, d.t, d.in.Name, d.in.UID, closed.VMID)
	if err != nil {
		return DeleteProxyResult{}, err
	}
	res := DeleteProxyResult{Destroyed: []activities.VMRef{}, Skipped: h.Foreign}
	if len(h.Foreign) > 0 {
		workflow.GetLogger(d.ctx).Info("Leaving VMs with the proxy's name but without its mark alone", "name", d.in.Name, "vmids", h.Foreign)
	}
	nodes := slices.Clone(d.s.Nodes)
	for _, v := range h.Ours {
		if err := d.destroyV0(v); err != nil {
			return DeleteProxyResult{}, err
		}
		res.Destroyed = append(res.Destroyed, v.ref())
		nodes = append(nodes, v.Node)
	}
	if closed.Node != "" {
		nodes = append(nodes, closed.Node)
	}
	slices.Sort(nodes)
	return res, d.deleteSeed(slices.Compact(nodes), []string{proxy.SeedVolID(d.s.ISOStorage, d.in.Name)})
}

func (d *deletion) stopCreateV0() createClosed {
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

func (d *deletion) destroyV0(v vm) error {
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
	_, err = d.stopAndDestroy(ref, st.Status == "running")
	return err
}

func lookupV0(ctx workflow.Context, s settings, t *tracker, name, uid string, expectVMID int) (holdings, error) {
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
			a.VMConfig, activities.VMConfigRequest{VMRef: ref}).Get(ctx, &cfg)
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
