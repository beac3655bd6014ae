package proxyvm

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/admission"
	"github.com/pveflow/pveflow/workflows/core"
)

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
	// Warnings are the warnings of the Proxmox tasks the create ran that ended "WARNINGS: N",
	// read from their logs, each naming its task and node.
	Warnings []string `json:"warnings,omitempty"`
	// Provisioned reports that this run configured the VM from the spec and started it: a VM it
	// cloned, or one it found stopped.
	Provisioned bool `json:"provisioned,omitempty"`
	// Changed says what this run changed on a VM it found running, to make it the spec's, one
	// entry each (as ChangeProxyResult.Changed); empty when it provisioned the VM or found it
	// matching.
	Changed []string `json:"changed,omitempty"`
	// Restarted reports that this run started the VM, or rebooted it to apply Changed.
	Restarted bool `json:"restarted,omitempty"`
	// IPv6 is net0's routable IPv6 address, its static one when it has one, or empty.
	IPv6 string `json:"ipv6,omitempty"`
	// Addresses are net0's routable addresses as the guest agent reports them,
	// "address/prefix-length".
	Addresses []string `json:"addresses,omitempty"`
	// AddressPool is the pool the proxy's addresses were allocated from, empty for none.
	AddressPool string `json:"addressPool,omitempty"`
}

// CreateProxy creates the proxy VM of a Proxy UID: clone the template, upload the seed ISO,
// configure, start, and wait for the guest's IPv4. Every step is idempotent: running it again
// for the same UID, or resuming it after any partial step, returns the same VM, and a VM found
// stopped is provisioned and started again. It runs only as a child of the proxy's entity
// (Proxy), which never runs it beside another operation of the proxy and cancels it when a
// delete supersedes it.
func (w *Workflows) CreateProxy(ctx workflow.Context, in ProxySpec) (_ CreateProxyResult, err error) {
	var t *core.Tracker
	defer func() { recordOutcome(ctx, createMetrics, in.UID, t, err) }()
	if err := checkOperation(ctx, "create", in.UID, in.check); err != nil {
		return CreateProxyResult{}, err
	}
	c, err := newCreate(ctx, w.Config, in)
	if err != nil {
		return CreateProxyResult{}, err
	}
	t = c.t
	res, err := c.run()
	c.t.Closed(err, core.PhaseCreated)
	if err == nil {
		res.AddressPool = in.AddressPool
	}
	return res, err
}

// checkOperation refuses operation op before its first step: a UID that is not one, a run that
// its proxy's entity did not start, and, with checkSpec, a spec that check refuses (a create's
// or change's).
func checkOperation(ctx workflow.Context, op, uid string, checkSpec func(op string) error) error {
	if err := proxy.ValidateUID(uid); err != nil {
		return core.Permanentf("%s proxy: %v", op, err)
	}
	if err := underEntity(ctx, op, uid); err != nil {
		return err
	}
	if checkSpec != nil {
		if err := checkSpec(op); err != nil {
			return core.Permanentf("%v", err)
		}
	}
	return nil
}

// underEntity refuses an operation that was not started by the proxy's entity: beside it, it
// could act on the VM while another operation does.
func underEntity(ctx workflow.Context, op, uid string) error {
	if parent := workflow.GetInfo(ctx).ParentWorkflowExecution; parent != nil && parent.ID == core.ProxyWorkflowID(uid) {
		return nil
	}
	return core.Permanentf("%s proxy %s: runs only as a child of the proxy's entity %s, which keeps its operations one at a time; "+
		"send the request there: pveflow %s --uid %s, or an Update with start on %s (starter.Client)",
		op, uid, core.ProxyWorkflowID(uid), map[string]string{"create": "create", "change": "update", "delete": "delete"}[op], uid, core.ProxyWorkflowID(uid))
}

// resolved is the side effect CreateProxy records: the settings and the placement, or why the
// placement is invalid.
type resolved struct {
	Settings       core.Settings    `json:"settings"`
	Placement      config.Placement `json:"placement"`
	PlacementError string           `json:"placementError,omitempty"`
}

// resolve records, in a side effect, the worker's settings and the placement of zone, image
// and machine type, or why that placement is invalid.
func resolve(ctx workflow.Context, cfg config.Config, zone, image, machineType string) (resolved, error) {
	var r resolved
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		p, err := cfg.Proxmox.ResolvePlacement(zone, image, machineType)
		r := resolved{Settings: core.SettingsOf(cfg), Placement: p}
		if err != nil {
			r.PlacementError = err.Error()
		}
		return r
	}).Get(&r)
	return r, err
}

type create struct {
	proxyOps
	in ProxySpec
	p  config.Placement
	// vm is the VM being created, once it is known.
	vm vm
	// createdAt is written into the mark of the VM this run clones.
	createdAt time.Time
}

func newCreate(ctx workflow.Context, cfg config.Config, in ProxySpec) (*create, error) {
	if in.Name == "" {
		in.Name = proxy.NameFromUID(in.UID)
	}
	t, err := core.NewTracker(ctx, in.UID, in.Name)
	if err != nil {
		return nil, err
	}
	t.Phase(core.PhaseValidating, "resolve placement")
	r, err := resolve(ctx, cfg, in.Zone, in.Image, in.MachineType)
	if err != nil {
		return nil, err
	}
	c := &create{
		proxyOps:  proxyOps{ctx: t.Ctx, s: r.Settings, t: t, uid: in.UID, name: in.Name},
		in:        in,
		p:         r.Placement,
		createdAt: workflow.Now(ctx).UTC().Truncate(time.Second),
	}
	if r.PlacementError != "" {
		err := core.Permanentf("create proxy %s: invalid placement: %s", in.Name, r.PlacementError)
		t.Closed(err, core.PhaseCreated)
		return nil, err
	}
	return c, nil
}

func (c *create) run() (CreateProxyResult, error) {
	if err := c.allocateAddresses(); err != nil {
		return CreateProxyResult{}, err
	}
	c.t.Phase(core.PhaseLookingUp, "look up the proxy's VMs")
	h, err := c.lookup(c.p.TemplateVMIDs()...)
	if err != nil {
		return CreateProxyResult{}, err
	}
	if err := c.refuseForeign("create", h.Foreign); err != nil {
		return CreateProxyResult{}, err
	}
	if err := c.settle(&h); err != nil {
		return CreateProxyResult{}, err
	}
	if err := c.refuseMany("create", h.Ours); err != nil {
		return CreateProxyResult{}, err
	}
	if len(h.Ours) == 0 {
		if err := c.place(h); err != nil {
			return CreateProxyResult{}, err
		}
		if err := c.clone(h); err != nil {
			return CreateProxyResult{}, err
		}
	} else {
		c.adopt(h.Ours[0])
	}
	// Whether the VM runs is read live: cluster resources lag, and a running VM they show as
	// stopped would be provisioned again.
	var st pve.VMStatus
	if err := c.readOurVM("create", &c.vm, readStatus, activities.WaitUnlocked, c.s.Budgets.Unlock, &st); err != nil {
		return CreateProxyResult{}, err
	}
	provisioned := st.Status != "running"
	seeded := provisioned
	var converged ChangeProxyResult
	if provisioned {
		if err := c.provision(); err != nil {
			return CreateProxyResult{}, err
		}
	} else if provisioned, seeded, err = c.converge(&converged); err != nil {
		return CreateProxyResult{}, err
	}
	res, err := c.waitReady()
	if err != nil {
		return CreateProxyResult{}, err
	}
	res.Provisioned, res.Changed, res.Restarted = provisioned, converged.Changed, provisioned || converged.Restarted
	// Only a seed this run wrote is known to keep the guest's instance without it: a VM found
	// running may boot from one an older pveflow wrote.
	if seeded {
		if err := c.releaseSeed(&c.vm); err != nil {
			return CreateProxyResult{}, err
		}
	}
	if err := c.registerHA(c.vm.ref()); err != nil {
		return CreateProxyResult{}, err
	}
	return res, nil
}

// converge makes the running VM the create adopted its spec's, as ChangeProxy would, and reports
// whether this run provisioned it after all and whether it gave it a new seed.
//
// A VM found running was made by an earlier run, for a spec that may not be this one's (a create
// that failed late, and a change since): it is made this one's, as a change would make it. One
// this run provisioned, its mark says (proxy.Op), was started by this run before its worker
// died: it is the spec's, and answered as provisioned.
func (c *create) converge(res *ChangeProxyResult) (provisioned, reseeded bool, err error) {
	cfg, err := c.readConfig(c.vm.ref())
	if err != nil {
		return false, false, err
	}
	if mark, _ := proxy.ParseDescription(cfg["description"]); mark.Op.By(c.runID()) && mark.Op.Provisioned {
		c.vm.Config = cfg
		return true, true, nil
	}
	in := c.in
	ch := &change{proxyOps: c.proxyOps, p: c.p, vm: c.vm, in: ProxySpec{UID: in.UID, Name: in.Name, Zone: in.Zone, Image: in.Image,
		MachineType: in.MachineType, UserData: in.UserData, InstanceID: in.InstanceID, Addresses: in.Addresses, NICs: in.NICs, AddressPool: in.AddressPool}}
	reseeded, err = ch.converge(cfg, true, res)
	c.vm = ch.vm
	return false, reseeded, err
}

func (c *create) adopt(v vm) {
	c.vm = v
	c.t.VM(v.Node, v.VMID)
}

// clone clones the template onto the first VMID of the proxy's probe sequence that the lookup
// did not find taken, and waits for the clone to finish. A VMID taken meanwhile (another clone
// got there first) is looked at once its clone shows its mark: one of this proxy's (an earlier
// attempt whose answer was lost) is adopted, anything else makes the create move on.
func (c *create) clone(h holdings) error {
	tmplNode, ok := h.template(c.p.TemplateVMID)
	if !ok {
		return core.Permanentf("create proxy %s: template %d (image %q) not found in the cluster", c.in.Name, c.p.TemplateVMID, c.p.Image)
	}
	storage, shared, tmplCfg, err := c.cloneTarget(tmplNode)
	if err != nil {
		return err
	}
	if err := c.preflight(tmplNode, tmplCfg, storage); err != nil {
		return err
	}
	if tmplNode != c.p.Node && !shared {
		return core.Permanentf("create proxy %s: template %d is on node %s, the proxy goes on node %s, and storage %s is local to %s: "+
			"PVE refuses such a clone (can't clone VM to node '%s' (VM uses local storage)); give image %q a template on %s (templates.%s.nodes) or clone onto shared storage",
			c.in.Name, c.p.TemplateVMID, tmplNode, c.p.Node, storage, tmplNode, c.p.Node, c.p.Image, c.p.Node, c.p.Image)
	}
	var l *admission.Lease
	if c.s.Clones.PerStorage > 0 {
		key := storage
		if !shared {
			key = tmplNode + "/" + storage // another node's storage of that name is another storage
		}
		if l, err = admission.Admit(c.ctx, c.s, c.t, c.in.Name, key); err != nil {
			return err
		}
		defer l.Release(c.ctx, c.s)
	}
	begun := workflow.Now(c.ctx)
	for attempt := 0; attempt < proxy.MaxProbes; attempt++ {
		vmid := proxy.VMIDFor(c.in.UID, c.s.VMIDRange, attempt)
		if h.Taken[vmid] {
			continue
		}
		step, err := c.cloneOnto(tmplNode, vmid, attempt, l)
		for core.IsTaskFailedWith(err, activities.ErrLocked) && !vmidTaken(err, vmid) {
			again, backOffErr := c.backOffFromLock(vmid, begun)
			if backOffErr != nil {
				step, err = "clone again onto VM "+fmt.Sprint(vmid), backOffErr
			}
			if !again {
				break
			}
			step, err = c.cloneOnto(tmplNode, vmid, attempt, l)
		}
		if err == nil {
			c.vm = vm{Node: c.p.Node, VMID: vmid}
			return nil
		}
		if !vmidTaken(err, vmid) {
			return core.Fail(step, err)
		}
		c.t.Step(fmt.Sprintf("VM %d is taken: see whose it is", vmid))
		theirs := vm{VMID: vmid}
		node, found, err := c.locate(vmid)
		if err != nil {
			return err
		}
		if !found {
			l.Covers(nil)
			continue // a clone that failed and was removed (PVE frees the VMID), or a container's VMID
		}
		theirs.Node = node
		gone, err := c.readVM(&theirs, readConfig, activities.WaitOwnerKnown, c.s.Budgets.Clone, &theirs.Config)
		if err != nil {
			return err
		}
		if owner, _ := proxy.OwnerOf(theirs.Config); !gone && owner == c.in.UID {
			// An earlier attempt's clone, whose answer was lost: the lease covers it until the
			// admission sees its VM unlocked.
			l.Covers(&admission.CloneInFlight{Node: node, VMID: vmid})
			c.adopt(theirs)
			return nil
		}
		l.Covers(nil) // another proxy's clone, under its own lease
	}
	return core.Transientf("create proxy %s: no free VMID among %d tried in %d-%d", c.in.Name, proxy.MaxProbes, c.s.VMIDRange.Min, c.s.VMIDRange.Max)
}

// preflight refuses a create whose API token lacks a privilege the proxy needs on its node,
// cloning onto storage, before anything is made: the message is the one `pveflow check` gives
// the node (pve.MissingMessage). A PVE that answers 403 after the clone would leave a VM half
// made. The template's NICs, from tmplNode unless tmplCfg holds its config already, and the
// vnets' zones are read first: PVE checks SDN.Use on their paths.
func (c *create) preflight(tmplNode string, tmplCfg pve.VMConfig, storage string) error {
	var a *activities.Activities
	step := "read the template's NICs and the SDN vnets"
	c.t.Step(step)
	var net activities.NetworkAccess
	var req activities.NetworkAccessRequest
	if tmplCfg == nil {
		req.Templates = []activities.VMRef{{Node: tmplNode, VMID: c.p.TemplateVMID}}
	}
	if err := core.Call(c.ctx, c.s.CallOptions(step), a.NetworkAccess, req).Get(c.ctx, &net); err != nil {
		return core.Fail(step, err)
	}
	if tmplCfg != nil {
		net.TemplateNICs = map[int]pve.VMConfig{c.p.TemplateVMID: proxy.NICsOf(tmplCfg)}
	}
	nicSets := [][]config.NIC{c.s.NICs(c.in.NICs, c.in.MachineType)}
	cloudInit := c.s.MachineTypes[c.in.MachineType].WaitsForCloudInit()
	required := c.s.PrivilegeTarget(c.p.Node, nicSets, cloudInit, net, []int{c.p.TemplateVMID}, storage).Required()
	step = "read the API token's permissions"
	c.t.Step(step)
	var held map[string]pve.Privileges
	if err := core.Call(c.ctx, c.s.CallOptions(step), a.Permissions, activities.PermissionsRequest{Paths: core.RequiredPaths(required)}).Get(c.ctx, &held); err != nil {
		return core.Fail(step, err)
	}
	if missing := pve.Missing(required, held); len(missing) > 0 {
		return core.Permanentf("create proxy %s: %s", c.in.Name, pve.MissingMessage(c.p.Node, missing))
	}
	return nil
}

// backOffFromLock waits, after a clone onto vmid failed on a lock (its storage's allocation
// lock, the template's), before the clone is made again on the same VMID: PVE removed the failed
// clone. again is false when the clone budget, counted from begun, has no room for another try.
// Something holding the VMID again is an AlreadyExists error, as a clone finding it would meet:
// a clone never goes onto a VMID that holds something.
func (c *create) backOffFromLock(vmid int, begun time.Time) (again bool, err error) {
	if again, err := c.sleepOutLock(fmt.Sprintf("the clone onto VM %d", vmid), begun, c.s.Budgets.Clone); !again || err != nil {
		return false, err
	}
	_, found, err := c.guest(vmid)
	switch {
	case err != nil:
		return false, err
	case found:
		return false, temporal.NewNonRetryableApplicationError(fmt.Sprintf("VM %d holds something again", vmid), activities.ErrAlreadyExists, nil)
	}
	return true, nil
}

// cloneTarget is the storage a clone allocates its volumes on, the configured target or else
// the template's boot disk's, and whether it is shared among the nodes; and the template's
// config when it was read for that (nil otherwise), so that the preflight reads it no more.
func (c *create) cloneTarget(tmplNode string) (storage string, shared bool, tmplCfg pve.VMConfig, err error) {
	var a *activities.Activities
	storage = c.s.Storage
	if storage == "" {
		ref := activities.VMRef{Node: tmplNode, VMID: c.p.TemplateVMID}
		step := "read config of template " + ref.String()
		if err := core.Call(c.ctx, c.s.CallOptions(step), a.VMConfig, activities.VMConfigRequest{VMRef: ref}).Get(c.ctx, &tmplCfg); err != nil {
			return "", false, nil, core.Fail(step, err)
		}
		if storage, err = core.BootStorage(tmplCfg); err != nil {
			return "", false, nil, core.Permanentf("create proxy %s: template %d: %v", c.in.Name, c.p.TemplateVMID, err)
		}
	}
	step := fmt.Sprintf("read status of storage %s on node %s", storage, tmplNode)
	var st pve.StorageStatus
	err = core.Call(c.ctx, c.s.CallOptions(step), a.StorageStatus,
		activities.StorageRef{Node: tmplNode, Storage: storage}).Get(c.ctx, &st)
	if err != nil {
		return "", false, nil, core.Fail(step, err)
	}
	return storage, st.Shared, tmplCfg, nil
}

// place chooses the node of a proxy whose create names no zone, among the configured nodes with
// a template of its image: one that is online, not in HA maintenance mode, and has the ISO
// storage, that has its template or can be cloned to (the clone's storage is shared), with the
// most memory free after this proxy. The facts it reads are in the history, the choice and why
// in the status. A node named by the zone (or the one configured node) in maintenance is
// refused Transient: the maintenance ends.
func (c *create) place(h holdings) error {
	var a *activities.Activities
	var ha pve.HAManagerStatus
	step := "read the HA manager's status"
	if err := core.Call(c.ctx, c.s.CallOptions(step), a.HAManagerStatus).Get(c.ctx, &ha); err != nil {
		return core.Fail(step, err)
	}
	if c.p.Node != "" {
		if ha.InMaintenance(c.p.Node) {
			return core.Transientf("create proxy %s: node %s is in HA maintenance mode: the HA manager is moving guests off it for its maintenance; "+
				"create the proxy on another node, or again once the node is out of maintenance (ha-manager crm-command node-maintenance disable %s)",
				c.in.Name, c.p.Node, c.p.Node)
		}
		return nil
	}
	c.t.Phase(core.PhasePlacing, fmt.Sprintf("choose a node among %v", c.p.Candidates))
	probe := func(step string, activity any, arg any, out any) error {
		err := core.Call(c.ctx, c.s.ProbeOptions(step), activity, arg).Get(c.ctx, out)
		if core.IsType(err, activities.ErrPermanent) {
			return core.Fail(step, err) // a privilege missing: every node would say so
		}
		return err
	}
	facts := make([]config.NodeFacts, 0, len(c.p.Candidates))
	anyDown := false
	for _, node := range c.p.Candidates {
		f := config.NodeFacts{Node: node, InMaintenance: ha.InMaintenance(node)}
		var ns pve.NodeStatus
		err := probe("read status of node "+node, a.NodeStatus, node, &ns)
		if core.IsType(err, core.FailPermanent) {
			return err
		}
		f.Online, f.MemTotal, f.MemUsed = err == nil, ns.Memory.Total, ns.Memory.Used
		anyDown = anyDown || !f.Online
		if f.Online {
			var iso pve.StorageStatus
			err := probe(fmt.Sprintf("read status of storage %s on node %s", c.s.ISOStorage, node), a.StorageStatus, activities.StorageRef{Node: node, Storage: c.s.ISOStorage}, &iso)
			if core.IsType(err, core.FailPermanent) {
				return err
			}
			f.ISOStorage = err == nil && iso.Active
			tmplNode, ok := h.template(c.p.TemplateOn[node])
			f.TemplateHere = ok && tmplNode == node
			if ok && !f.TemplateHere && c.s.Storage != "" {
				var target pve.StorageStatus
				err := probe(fmt.Sprintf("read status of storage %s on node %s", c.s.Storage, node), a.StorageStatus, activities.StorageRef{Node: node, Storage: c.s.Storage}, &target)
				if core.IsType(err, core.FailPermanent) {
					return err
				}
				f.CloneableTo = err == nil && target.Shared && target.Active
			}
		}
		facts = append(facts, f)
	}
	choice, err := config.ChooseNode(facts, c.p.MemoryMiB)
	if err != nil {
		if anyDown {
			return core.Transientf("create proxy %s: %v", c.in.Name, err)
		}
		return core.Permanentf("create proxy %s: %v", c.in.Name, err)
	}
	if c.p, err = c.p.WithNode(choice.Node); err != nil {
		return core.Permanentf("create proxy %s: %v", c.in.Name, err)
	}
	c.t.Status.Placement = choice.Reason
	c.t.Step("placed on " + choice.Reason)
	return nil
}

// cloneOnto clones the template onto vmid and waits for the clone. It returns the activity's own
// error, for a caller that acts on how the clone failed, and the step that failed.
// The lease l covers the clone from before the call, whose answer may be lost after PVE took
// it, until the wait sees its task end.
func (c *create) cloneOnto(tmplNode string, vmid, attempt int, l *admission.Lease) (step string, err error) {
	var a *activities.Activities
	c.t.Status.Attempt = attempt + 1
	c.t.Phase(core.PhaseCloning, fmt.Sprintf("clone template %d to VM %d", c.p.TemplateVMID, vmid))
	c.t.VM(c.p.Node, vmid)
	req := activities.CloneRequest{Node: tmplNode, TemplateVMID: c.p.TemplateVMID, Params: pve.CloneParams{
		NewID:       vmid,
		Name:        c.in.Name,
		Description: proxy.FormatDescription(proxy.Mark{UID: c.in.UID, CreatedAt: c.createdAt}),
		Full:        true,
		Storage:     c.s.Storage,
		Pool:        c.s.Pool,
	}}
	if c.p.Node != tmplNode {
		req.Params.Target = c.p.Node
	}
	step = fmt.Sprintf("clone template %d on %s to VM %d on %s", c.p.TemplateVMID, tmplNode, vmid, c.p.Node)
	var upid pve.UPID
	l.Covers(&admission.CloneInFlight{Node: tmplNode, VMID: vmid})
	if err := core.Call(c.ctx, c.s.CallOptions(step), a.Clone, req).Get(c.ctx, &upid); err != nil {
		return step, err
	}
	l.Covers(&admission.CloneInFlight{Node: tmplNode, UPID: upid})
	step = fmt.Sprintf("wait for clone of %d to %d on %s", c.p.TemplateVMID, vmid, c.p.Node)
	wait := activities.TaskStatusRequest{UPID: upid, Pace: c.s.Pace(c.ctx)}
	if l != nil {
		wait.Pace.Expected = l.ExpectedClone
	}
	if wait.Then, err = l.GiveBack(); err != nil {
		return step, core.Permanentf("create proxy %s: give the clone lease back: %v", c.in.Name, err)
	}
	res, err := core.WaitFor(c.ctx, c.s, c.t, core.ActivityFirst, wait, c.s.Budgets.Clone, step)
	switch {
	case err == nil:
		l.CloneEnded(res)
	case core.IsType(err, activities.ErrTaskFailed):
		l.Covers(nil)
	}
	return step, err
}

// vmidTaken reports whether a clone onto vmid failed because the VMID is taken: PVE found its
// config on this node or pmxcfs found it on another, or a clone racing for it holds its flock.
func vmidTaken(err error, vmid int) bool {
	if core.IsType(err, activities.ErrAlreadyExists) || core.IsTaskFailedWith(err, activities.ErrAlreadyExists) {
		return true
	}
	var appErr *temporal.ApplicationError
	return core.IsTaskFailedWith(err, activities.ErrLocked) && errors.As(err, &appErr) && pve.ConfigFlockTimeout(appErr.Message(), vmid)
}

// provision gives the VM its machine type's NICs, puts the seed ISO on the VM's node, configures
// the VM, grows its disk and starts it. The seed's network-config names the NICs by MAC, so the
// config is read (and NICs PVE gives a MAC added) before the seed is made. NICs beyond the
// machine type's are removed, as a change removes them.
func (c *create) provision() error {
	var a *activities.Activities
	ref := c.vm.ref()

	// The seed's network-config names the NICs by MAC, so the seeding starts from the config.
	c.t.Phase(core.PhaseSeeding, "read config")
	cfg, err := c.readConfig(ref)
	if err != nil {
		return err
	}
	nics := c.s.NICs(c.in.NICs, c.in.MachineType)
	cfg, netParams, err := c.addNICs(ref, cfg, nics)
	if err != nil {
		return err
	}

	c.t.Step("upload seed ISO")
	mark := markFor(cfg["description"], c.in.Image, cmp.Or(c.in.InstanceID, c.in.UID),
		proxy.Spec{MachineType: c.in.MachineType, Zone: c.in.Zone, Addresses: c.in.Addresses, AddressPool: c.in.AddressPool, NICs: c.in.NICs}, userDataSHA256(c.in.UserData))
	mark.Op = &proxy.Op{Run: c.runID(), Provisioned: true}
	seed, err := c.uploadSeed(c.vm.Node, mark.InstanceID, c.in.UserData, proxy.SeedNetwork(cfg, c.in.Addresses, nics, c.s.Nameservers))
	if err != nil {
		return err
	}

	params := pve.VMConfig{
		"cores":  fmt.Sprint(c.p.Cores),
		"memory": fmt.Sprint(c.p.MemoryMiB),
		"agent":  "1",
		// The template's tags stay, beside the configured ones and pveflow's own.
		"tags": proxy.MergeTags(cfg["tags"], append(slices.Clone(c.s.Tags), proxy.Tag)...),
		"ide2": seed.VolID + ",media=cdrom",
		// The mark says which image and seed the VM has, so a later run, or a check, tells
		// whether it is the spec's without the entity's memory of what it made.
		"description": proxy.WithMark(cfg["description"], mark),
		"onboot":      boolParam(c.s.OnBoot),
	}
	for _, key := range workflow.DeterministicKeys(netParams) {
		params[key] = netParams[key]
	}
	c.t.Phase(core.PhaseConfiguring, "set config")
	summary := "configure " + ref.String()
	if err := core.Call(c.ctx, c.s.CallOptions(summary), a.SetVMConfig,
		activities.SetVMConfigRequest{VMRef: ref, Params: params}).Get(c.ctx, nil); err != nil {
		return core.Fail(summary, err)
	}
	c.vm.Config = cfg
	if err := c.resize(); err != nil {
		return err
	}

	c.t.Phase(core.PhaseStarting, "start VM")
	return c.start(ref)
}

// resize grows the boot disk to the machine type's size; a disk already that large is left
// alone, since PVE cannot shrink one.
func (c *create) resize() error {
	if c.p.DiskGiB == 0 {
		return nil
	}
	disk, err := proxy.BootDisk(c.vm.Config)
	if err != nil {
		return core.Permanentf("create proxy %s: VM %d: %v", c.in.Name, c.vm.VMID, err)
	}
	grow, err := proxy.NeedsResize(c.vm.Config[disk], c.p.DiskGiB)
	if err != nil {
		return core.Permanentf("create proxy %s: VM %d disk %s: %v", c.in.Name, c.vm.VMID, disk, err)
	}
	if !grow {
		return nil
	}
	return c.resizeDisk(c.vm.ref(), disk, c.p.DiskGiB)
}

// waitReady waits until the VM runs and its guest agent reports every address net0 is to have.
func (c *create) waitReady() (CreateProxyResult, error) {
	agent, err := c.awaitReady(&c.vm, c.in.Addresses, c.in.MachineType)
	if err != nil {
		return CreateProxyResult{}, err
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
		IPv6:       agent.IPv6,
		Addresses:  agent.Addresses,
		Warnings:   c.t.Status.Warnings,
	}, nil
}
