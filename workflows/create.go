package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// CreateProxyInput is the input of CreateProxy.
type CreateProxyInput struct {
	UID string `json:"uid"`
	// Name is the VM's name; empty means proxy.NameFromUID(UID).
	Name string `json:"name,omitempty"`
	// Zone is the node; it may be empty when the config names one node.
	Zone string `json:"zone,omitempty"`
	// Image is a key of the config's templates.
	Image string `json:"image"`
	// MachineType is a key of the config's machine types.
	MachineType string `json:"machineType"`
	// Region is accepted and ignored: a Proxmox cluster has no regions.
	Region string `json:"region,omitempty"`
	// UserData is the cloud-init user-data. It may hold secrets: it goes onto the seed ISO and
	// nowhere else pveflow writes (logs, errors, search attributes, results).
	UserData string `json:"userData,omitempty"`
}

// CreateProxyResult is what CreateProxy returns.
type CreateProxyResult struct {
	// ProviderID is "vms/<vmid>/<name>".
	ProviderID string    `json:"providerID"`
	VMID       int       `json:"vmid"`
	Node       string    `json:"node"`
	Name       string    `json:"name"`
	CreatedAt  time.Time `json:"createdAt"`
	// IPv4 is the guest's address as its agent reports it.
	IPv4 string `json:"ipv4"`
}

// maxProbes bounds how many VMIDs CreateProxy tries before giving up as Transient.
const maxProbes = 32

// CreateProxy creates the proxy VM of a Proxy UID: clone the template, upload the seed ISO,
// configure, start, and wait for the guest's IPv4. Every step is idempotent: running it again
// for the same UID, or resuming it after any partial step, returns the same VM.
func (w *Workflows) CreateProxy(ctx workflow.Context, in CreateProxyInput) (CreateProxyResult, error) {
	// A DeleteProxy of the same UID asks this run to stop by a signal (a cancel request would
	// be accepted even by a closed run, leaving the delete to wait for an answer in vain). The
	// run stops its work and then tells the delete which VM it was working on.
	ctx, stop := workflow.WithCancel(ctx)
	deleteRequests := workflow.GetSignalChannel(ctx, deleteRequestedSignal)
	deleteRequested := false
	workflow.Go(ctx, func(ctx workflow.Context) {
		deleteRequests.Receive(ctx, nil)
		deleteRequested = true
		stop()
	})

	c, err := newCreate(ctx, w.Config, in)
	if err != nil {
		if deleteRequested || deleteRequests.ReceiveAsync(nil) {
			notifyDelete(ctx, in.UID, createClosed{})
		}
		return CreateProxyResult{}, err
	}
	res, err := c.run()
	// A request that arrived with the last step's result has not reached the goroutine yet.
	deleteRequested = deleteRequested || deleteRequests.ReceiveAsync(nil)
	switch {
	case deleteRequested:
		c.t.phase(PhaseCancelled, "stopped for a delete of the same proxy")
		notifyDelete(ctx, in.UID, createClosed{Node: c.t.status.Node, VMID: c.t.status.VMID, UPID: c.t.status.UPID})
		return CreateProxyResult{}, temporal.NewCanceledError("a DeleteProxy of the same proxy stopped this create")
	case ctx.Err() != nil:
		c.t.phase(PhaseCancelled, c.t.status.Step)
	case err != nil:
		c.t.failed(err)
	default:
		c.t.phase(PhaseCreated, "done")
	}
	return res, err
}

// resolved is the side effect CreateProxy records: the settings and the placement, or why the
// placement is invalid.
type resolved struct {
	Settings       settings         `json:"settings"`
	Placement      config.Placement `json:"placement"`
	PlacementError string           `json:"placementError,omitempty"`
}

type create struct {
	ctx workflow.Context
	in  CreateProxyInput
	s   settings
	p   config.Placement
	t   *tracker
	// vm is the VM being created, once it is known.
	vm vm
	// createdAt is written into the mark of the VM this run clones.
	createdAt time.Time
}

func newCreate(ctx workflow.Context, cfg config.Config, in CreateProxyInput) (*create, error) {
	if in.UID == "" {
		return nil, permanentf("create proxy: the proxy UID is empty")
	}
	if in.Name == "" {
		in.Name = proxy.NameFromUID(in.UID)
	}
	t, err := newTracker(ctx, in.UID, in.Name)
	if err != nil {
		return nil, err
	}
	t.phase(PhaseValidating, "resolve placement")
	var r resolved
	err = workflow.SideEffect(ctx, func(workflow.Context) any {
		p, err := cfg.Proxmox.ResolvePlacement(in.Zone, in.Image, in.MachineType)
		r := resolved{Settings: settingsOf(cfg), Placement: p}
		if err != nil {
			r.PlacementError = err.Error()
		}
		return r
	}).Get(&r)
	if err != nil {
		return nil, err
	}
	c := &create{ctx: ctx, in: in, s: r.Settings, p: r.Placement, t: t, createdAt: workflow.Now(ctx).UTC().Truncate(time.Second)}
	if r.PlacementError != "" {
		err := permanentf("create proxy %s: invalid placement: %s", in.Name, r.PlacementError)
		t.failed(err)
		return nil, err
	}
	return c, nil
}

func (c *create) run() (CreateProxyResult, error) {
	c.t.phase(PhaseLookingUp, "look up existing VMs")
	h, err := lookup(c.ctx, c.s, c.t, c.in.Name, c.in.UID, 0)
	if err != nil {
		return CreateProxyResult{}, err
	}
	if err := c.refuseForeign(h); err != nil {
		return CreateProxyResult{}, err
	}
	if len(h.Ours) == 0 {
		if err := c.clone(h); err != nil {
			return CreateProxyResult{}, err
		}
	} else {
		c.adopt(h.Ours[0])
		if err := c.waitUnlocked(); err != nil {
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

// refuseForeign fails when the proxy's name is taken by VMs that are not this proxy's, or when
// more than one VM carries its mark: a person has to resolve that.
func (c *create) refuseForeign(h holdings) error {
	if len(h.Foreign) > 0 {
		return permanentf("create proxy %s: VM(s) %v already carry the name %s without this proxy's mark (uid %s)", c.in.Name, h.Foreign, c.in.Name, c.in.UID)
	}
	if len(h.Ours) > 1 {
		ids := make([]int, len(h.Ours))
		for i, v := range h.Ours {
			ids[i] = v.VMID
		}
		return permanentf("create proxy %s: VMs %v all carry this proxy's mark; keep one and destroy the others", c.in.Name, ids)
	}
	return nil
}

func (c *create) adopt(v vm) {
	c.vm = v
	c.t.vm(v.Node, v.VMID)
}

// clone clones the template onto the first free VMID of the proxy's probe sequence and waits
// for the clone to finish. A VMID taken by another VM moves on to the next; one taken by this
// proxy (an earlier attempt whose answer was lost) is adopted.
func (c *create) clone(h holdings) error {
	tmplNode, ok := h.template(c.p.TemplateVMID)
	if !ok {
		return permanentf("create proxy %s: template %d (image %q) not found in the cluster", c.in.Name, c.p.TemplateVMID, c.p.Image)
	}
	var a *activities.Activities
	for attempt := 0; attempt < maxProbes; attempt++ {
		vmid := proxy.VMIDFor(c.in.UID, c.s.VMIDRange, attempt)
		c.t.status.Attempt = attempt + 1
		c.t.phase(PhaseCloning, fmt.Sprintf("clone template %d to VM %d", c.p.TemplateVMID, vmid))
		c.t.vm(c.p.Node, vmid)
		req := activities.CloneRequest{Node: tmplNode, TemplateVMID: c.p.TemplateVMID, Params: pve.CloneParams{
			NewID:       vmid,
			Name:        c.in.Name,
			Description: proxy.FormatDescription(proxy.Mark{UID: c.in.UID, CreatedAt: c.createdAt}),
			Full:        true,
			Storage:     c.s.Storage,
		}}
		if c.p.Node != tmplNode {
			req.Params.Target = c.p.Node
		}
		summary := fmt.Sprintf("clone template %d on %s to VM %d on %s", c.p.TemplateVMID, tmplNode, vmid, c.p.Node)
		var upid pve.UPID
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.callOptions(summary)), a.Clone, req).Get(c.ctx, &upid)
		if err == nil {
			summary = fmt.Sprintf("wait for clone of %d to %d on %s", c.p.TemplateVMID, vmid, c.p.Node)
			err = awaitTask(c.ctx, c.s, c.t, upid, c.s.Budgets.Clone, summary)
			if err == nil {
				c.vm = vm{Node: c.p.Node, VMID: vmid, Status: "stopped"}
				return nil
			}
		}
		switch {
		case isType(err, activities.ErrAlreadyExists), isTaskFailedWith(err, activities.ErrAlreadyExists):
			if adopted, err := c.adoptIfOurs(vmid); adopted || err != nil {
				return err
			}
			continue
		default:
			return fail(summary, err)
		}
	}
	return transientf("create proxy %s: no free VMID among %d tried in %d-%d", c.in.Name, maxProbes, c.s.VMIDRange.Min, c.s.VMIDRange.Max)
}

// adoptIfOurs looks at a VMID a clone found taken: it is adopted when it carries this proxy's
// mark, so a clone whose answer was lost is not repeated elsewhere. A clone still copying its
// disks has not written its mark yet; as the VMID is this proxy's own probe, the clone is
// waited for and its mark checked then.
func (c *create) adoptIfOurs(vmid int) (bool, error) {
	h, err := lookup(c.ctx, c.s, c.t, c.in.Name, c.in.UID, vmid)
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(h.Ours, func(v vm) bool { return v.VMID == vmid })
	if i < 0 {
		return false, nil
	}
	c.adopt(h.Ours[i])
	if err := c.waitUnlocked(); err != nil {
		return false, err
	}
	if _, marked := proxy.ParseDescription(h.Ours[i].Config["description"]); marked {
		return true, nil
	}
	if h, err = lookup(c.ctx, c.s, c.t, c.in.Name, c.in.UID, 0); err != nil {
		return false, err
	}
	if slices.ContainsFunc(h.Ours, func(v vm) bool { return v.VMID == vmid }) {
		return true, nil
	}
	c.vm = vm{}
	return false, nil
}

// waitUnlocked waits while the VM is locked, for instance by a clone an earlier run started.
func (c *create) waitUnlocked() error {
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

// provision puts the seed ISO on the VM's node, configures the VM, grows its disk and starts it.
func (c *create) provision() error {
	var a *activities.Activities
	ref := c.vm.ref()

	c.t.phase(PhaseSeeding, "upload seed ISO")
	var seed activities.UploadISOResult
	summary := fmt.Sprintf("upload seed ISO %s to %s on %s", proxy.SeedISOName(c.in.Name), c.s.ISOStorage, c.vm.Node)
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.callOptions(summary)), a.UploadISO, activities.UploadISORequest{
		StorageRef: activities.StorageRef{Node: c.vm.Node, Storage: c.s.ISOStorage},
		Name:       c.in.Name,
		InstanceID: c.in.UID,
		UserData:   c.in.UserData,
	}).Get(c.ctx, &seed)
	if err != nil {
		return fail(summary, err)
	}
	if err := c.waitTask(seed.UPID, c.s.Budgets.Upload, "wait for upload of "+seed.VolID); err != nil {
		return err
	}

	c.t.phase(PhaseConfiguring, "read config")
	var cfg pve.VMConfig
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.callOptions("read config of "+ref.String())), a.VMConfig, ref).Get(c.ctx, &cfg); err != nil {
		return fail("read config of "+ref.String(), err)
	}
	params := pve.VMConfig{
		"cores":  fmt.Sprint(c.p.Cores),
		"memory": fmt.Sprint(c.p.MemoryMiB),
		"agent":  "1",
		"tags":   proxy.Tag,
		"ide2":   seed.VolID + ",media=cdrom",
	}
	if net0 := proxy.RewriteNet0(cfg["net0"], c.s.Bridge); net0 != cfg["net0"] {
		params["net0"] = net0
	}
	c.t.step("set config")
	summary = "configure " + ref.String()
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.callOptions(summary)), a.SetVMConfig,
		activities.SetVMConfigRequest{VMRef: ref, Params: params}).Get(c.ctx, nil); err != nil {
		return fail(summary, err)
	}
	c.vm.Config = cfg
	if err := c.resize(); err != nil {
		return err
	}

	c.t.phase(PhaseStarting, "start VM")
	var upid pve.UPID
	summary = "start " + ref.String()
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.callOptions(summary)), a.Start, ref).Get(c.ctx, &upid); err != nil {
		return fail(summary, err)
	}
	c.t.task(upid)
	return c.waitTask(upid, c.s.Budgets.Start, "wait for start of "+ref.String())
}

// resize grows the boot disk to the machine type's size; a disk already that large is left
// alone, since PVE cannot shrink one.
func (c *create) resize() error {
	if c.p.DiskGiB == 0 {
		return nil
	}
	disk, err := proxy.BootDisk(c.vm.Config)
	if err != nil {
		return permanentf("create proxy %s: VM %d: %v", c.in.Name, c.vm.VMID, err)
	}
	grow, err := proxy.NeedsResize(c.vm.Config[disk], c.p.DiskGiB)
	if err != nil {
		return permanentf("create proxy %s: VM %d disk %s: %v", c.in.Name, c.vm.VMID, disk, err)
	}
	if !grow {
		return nil
	}
	var a *activities.Activities
	ref := c.vm.ref()
	size := fmt.Sprintf("%dG", c.p.DiskGiB)
	summary := fmt.Sprintf("resize disk %s of %s to %s", disk, ref, size)
	c.t.step(summary)
	var upid pve.UPID
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.callOptions(summary)), a.Resize,
		activities.ResizeRequest{VMRef: ref, Disk: disk, Size: size}).Get(c.ctx, &upid); err != nil {
		return fail(summary, err)
	}
	c.t.task(upid)
	return c.waitTask(upid, c.s.Budgets.Resize, "wait for "+summary)
}

// waitReady waits until the VM runs and its guest agent reports a routable IPv4.
func (c *create) waitReady() (CreateProxyResult, error) {
	var a *activities.Activities
	ref := c.vm.ref()
	c.t.phase(PhaseBooting, "wait for the VM to run")
	summary := "wait for " + ref.String() + " to run"
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.waitOptions(c.s.Budgets.Running, summary)), a.VMStatus,
		activities.VMStatusRequest{VMRef: ref, WaitFor: activities.WaitRunning}).Get(c.ctx, nil); err != nil {
		return CreateProxyResult{}, fail(summary, err)
	}
	if c.vm.Config == nil {
		c.t.step("read config")
		if err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.callOptions("read config of "+ref.String())), a.VMConfig, ref).Get(c.ctx, &c.vm.Config); err != nil {
			return CreateProxyResult{}, fail("read config of "+ref.String(), err)
		}
	}
	summary = "wait for an IPv4 from the guest agent of " + ref.String()
	c.t.step(summary)
	var agent activities.AgentResult
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(c.ctx, c.s.waitOptions(c.s.Budgets.Agent, summary)), a.AgentNetworkInterfaces,
		activities.AgentRequest{VMRef: ref, WaitForIPv4: true, MAC: proxy.MACFromNet(c.vm.Config["net0"])}).Get(c.ctx, &agent); err != nil {
		return CreateProxyResult{}, fail(summary, err)
	}
	createdAt := c.createdAt
	if mark, ok := proxy.ParseDescription(c.vm.Config["description"]); ok && !mark.CreatedAt.IsZero() {
		createdAt = mark.CreatedAt
	}
	return CreateProxyResult{
		ProviderID: proxy.FormatProviderID(c.vm.VMID, c.in.Name),
		VMID:       c.vm.VMID,
		Node:       c.vm.Node,
		Name:       c.in.Name,
		CreatedAt:  createdAt,
		IPv4:       agent.IPv4,
	}, nil
}

// waitTask waits for a Proxmox task within budget.
func (c *create) waitTask(upid pve.UPID, budget time.Duration, summary string) error {
	return waitTask(c.ctx, c.s, c.t, upid, budget, summary)
}

// notifyDelete tells the DeleteProxy that stopped a create which VM the create was working on,
// once none of its activities runs any more: the delete then knows about a clone whose mark is
// not written yet.
func notifyDelete(ctx workflow.Context, uid string, notice createClosed) {
	ctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	err := workflow.SignalExternalWorkflow(ctx, DeleteWorkflowID(uid), "", createClosedSignal, notice).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("The delete that stopped this create could not be told", "error", err)
	}
}

// createClosed is the createClosedSignal's payload.
type createClosed struct {
	Node string   `json:"node,omitempty"`
	VMID int      `json:"vmid,omitempty"`
	UPID pve.UPID `json:"upid,omitempty"`
}

// waitTask waits for a Proxmox task within budget, showing it as the current step, and fails
// the way the workflow fails.
func waitTask(ctx workflow.Context, s settings, t *tracker, upid pve.UPID, budget time.Duration, summary string) error {
	if err := awaitTask(ctx, s, t, upid, budget, summary); err != nil {
		return fail(summary, err)
	}
	return nil
}

// awaitTask waits for a Proxmox task within budget and returns the activity's own error, for a
// caller that acts on how the task failed.
func awaitTask(ctx workflow.Context, s settings, t *tracker, upid pve.UPID, budget time.Duration, summary string) error {
	var a *activities.Activities
	t.step(summary)
	t.task(upid)
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, s.waitOptions(budget, summary+", "+string(upid))),
		a.TaskStatus, activities.TaskStatusRequest{UPID: upid}).Get(ctx, nil)
}
