package proxyvm

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
)

// ChangeProxyResult is what ChangeProxy returns, and what the entity's change Update answers.
type ChangeProxyResult struct {
	VMID int    `json:"vmid"`
	Node string `json:"node"`
	Name string `json:"name"`
	// Changed says what changed, one entry each, such as "cores 2 -> 4"; empty when the VM
	// already matched.
	Changed []string `json:"changed"`
	// Restarted reports whether the guest was rebooted or started to apply the change.
	Restarted bool `json:"restarted"`
	// Rebuilt reports that the VM was destroyed and created again (a new image or zone).
	Rebuilt bool   `json:"rebuilt,omitempty"`
	IPv4    string `json:"ipv4"`
	// Warnings are the warnings of the Proxmox tasks the change ran that ended "WARNINGS: N",
	// read from their logs, each naming its task and node.
	Warnings []string `json:"warnings,omitempty"`
	IPv6     string   `json:"ipv6,omitempty"`
}

// ChangeProxy makes the VM of a present proxy match its spec, in place, and returns what it
// changed. Its VM is found as a create finds it (by the UID's mark); a proxy without one fails
// NotFound: create it first.
//
//   - Cores and memory that differ from the machine type's are written to the config. PVE keeps
//     them pending on a running VM: cores never hot-plug (PVE hot-plugs vcpus, and only with
//     "cpu" in the VM's hotplug option) and memory only with "memory" there and NUMA on, which
//     PVE's default hotplug (network,disk,usb) leaves out. So ChangeProxy reboots the guest,
//     which applies them.
//   - A boot disk smaller than the machine type's is grown, online, with no reboot; a larger one
//     stays as it is, since PVE cannot shrink a disk.
//   - The VM's NICs are made the proxy's own, else its machine type's (proxy.NICChanges): one on
//     another bridge or VLAN is moved there, its MAC kept, and one beyond them removed; either
//     reboots the guest, which asks DHCP on its NICs' networks as it comes up. A NIC the VM
//     lacks is added, which needs a reseed: the guest configures a NIC from the seed's
//     network-config, which names it by the MAC PVE gives it when it is written, and cloud-init
//     applies a network-config only to a new instance. Without a new instance-id such a change
//     fails Permanent before it writes anything.
//   - When the VM's mark names another instance-id than the input's, the seed ISO is written
//     anew with the input's user-data and instance-id, the mark says so, and the guest rebooted: cloud-init runs user-data again when it sees a new instance-id (the
//     seed's reseed hook cleans the cache cloud-init otherwise trusts). Once the guest is
//     ready, the seed is released again (releaseSeed).
//   - A stopped VM is started, whether anything changed or not.
//
// A VM that matches and runs is left alone: no write, no reboot. Every step is idempotent, so
// running it again, or resuming it after any partial step, ends with the same VM. The reboot a
// change needs is owed in the VM's mark by the write of the change itself (proxy.RebootOwed),
// and forgotten once the reboot ended: PVE's config shows pending values as in effect, so a
// run resumed between the two would otherwise find nothing to do.
func (w *Workflows) ChangeProxy(ctx workflow.Context, in ProxySpec) (_ ChangeProxyResult, err error) {
	var t *core.Tracker
	defer func() { recordOutcome(ctx, changeMetrics, in.UID, t, err) }()
	if err := checkOperation(ctx, "change", in.UID, in.check); err != nil {
		return ChangeProxyResult{}, err
	}
	c, err := newChange(ctx, w.Config, in)
	if err != nil {
		return ChangeProxyResult{}, err
	}
	t = c.t
	res, err := c.run()
	c.t.Closed(err, core.PhaseChanged)
	return res, err
}

type change struct {
	proxyOps
	in ProxySpec
	p  config.Placement
	vm vm
}

func newChange(ctx workflow.Context, cfg config.Config, in ProxySpec) (*change, error) {
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
	if r.PlacementError != "" {
		err := core.Permanentf("change proxy %s: invalid placement: %s", in.Name, r.PlacementError)
		t.Closed(err, core.PhaseChanged)
		return nil, err
	}
	return &change{
		proxyOps: proxyOps{ctx: t.Ctx, s: r.Settings, t: t, uid: in.UID, name: in.Name},
		in:       in,
		p:        r.Placement,
	}, nil
}

func (c *change) run() (ChangeProxyResult, error) {
	if c.in.AddressPool != "" {
		addrs, err := c.poolAddresses("change", c.in.AddressPool)
		if err != nil {
			return ChangeProxyResult{}, err
		}
		c.in.Addresses = addrs
	}
	if err := c.find(); err != nil {
		return ChangeProxyResult{}, err
	}
	// The config is read once no lock (a backup, a clone) holds the VM, and the status after it:
	// what changes is decided from them.
	var cfg pve.VMConfig
	if err := c.readOurVM("change", &c.vm, readConfig, activities.WaitUnlocked, c.s.Budgets.Unlock, &cfg); err != nil {
		return ChangeProxyResult{}, err
	}
	var st pve.VMStatus
	if err := c.readOurVM("change", &c.vm, readStatus, activities.WaitNone, 0, &st); err != nil {
		return ChangeProxyResult{}, err
	}
	res := ChangeProxyResult{Name: c.name}
	reseeded, err := c.converge(cfg, st.Status == "running", &res)
	if err != nil {
		return ChangeProxyResult{}, err
	}
	agent, err := c.awaitReady(&c.vm, c.in.Addresses, c.in.MachineType)
	if err != nil {
		return ChangeProxyResult{}, err
	}
	if reseeded {
		if err := c.releaseSeed(&c.vm); err != nil {
			return ChangeProxyResult{}, err
		}
	}
	res.VMID, res.Node, res.IPv4, res.IPv6, res.Warnings = c.vm.VMID, c.vm.Node, agent.IPv4, agent.IPv6, c.t.Status.Warnings
	return res, nil
}

// converge makes the proxy's VM, of config cfg, match the spec (ChangeProxy says how), and
// starts or reboots it as that needs; res gets what changed and whether it restarted. It reports
// whether it gave the VM a new seed, which the caller releases once the guest is ready. A
// create that finds its VM running converges it too: an earlier run made it, for a spec that may
// not be this one.
func (c *change) converge(cfg pve.VMConfig, running bool, res *ChangeProxyResult) (reseeded bool, err error) {
	m, err := proxy.MachineOf(cfg)
	if err != nil {
		return false, core.Permanentf("change proxy %s: VM %d: %v", c.name, c.vm.VMID, err)
	}
	c.t.Phase(core.PhaseChanging, "compare VM with machine type "+c.p.MachineType)
	// The mark says which image and seed the VM has; a VM marked before marks said so has the
	// create's seed.
	mark, _ := proxy.ParseDescription(cfg["description"])
	if mark.Image != "" && mark.Image != c.in.Image {
		return false, core.Permanentf("change proxy %s: VM %d was cloned from image %q, not the spec's %q: a new image is a rebuild, which the proxy's entity runs",
			c.name, c.vm.VMID, mark.Image, c.in.Image)
	}
	instanceID := cmp.Or(c.in.InstanceID, c.uid)
	reseed := cmp.Or(mark.InstanceID, c.uid) != instanceID
	nics := c.s.NICs(c.in.NICs, c.in.MachineType)
	nicChanges := proxy.NICChanges(cfg, c.s.Bridge, nics)
	if err := c.refuseNICsWithoutReseed(nicChanges, reseed); err != nil {
		return false, err
	}
	// What this run did before its worker died (its calls are made again, on the VM they left)
	// is this run's to answer; a change another run wrote and whose reboot it did not see end is
	// this run's to finish, and to answer. PVE shows the pending values in the config as if they
	// were in effect, so only the mark tells either.
	last, run := mark.Op, c.runID()
	inherited := last.By(run) || last.OwesReboot()
	res.Changed = []string{}
	if inherited {
		res.Changed = slices.Clone(last.Changed)
	}
	ref := c.vm.ref()
	cfg, params, err := c.addNICs(ref, cfg, nics)
	if err != nil {
		return false, err
	}
	c.vm.Config = cfg
	var grow int64
	for _, d := range m.Drift(c.p) {
		switch d.What {
		case proxy.DiffCores:
			params["cores"] = fmt.Sprint(d.Want)
		case proxy.DiffMemory:
			params["memory"] = fmt.Sprint(d.Want)
		case proxy.DiffDisk:
			grow = d.Want
		}
		res.Changed = appendNew(res.Changed, d.Change())
	}
	for _, n := range nicChanges {
		res.Changed = appendNew(res.Changed, n.Change())
	}
	// Cores and memory need a reboot to apply, and NICs one to reach the guest; ide2, which a
	// reseed may point anew, and the mark do not.
	pending := len(params) > 0
	// The seed's user-data changes with the seed alone: the input's is not known to an entity
	// that rebuilt its spec from this mark.
	digest := userDataSHA256(c.in.UserData)
	if !reseed && mark.Spec != nil {
		digest = mark.Spec.UserDataSHA256
	}
	want := markFor(cfg["description"], c.in.Image, instanceID, proxy.Spec{MachineType: c.in.MachineType, Zone: c.in.Zone, Addresses: c.in.Addresses,
		AddressPool: c.in.AddressPool, NICs: c.in.NICs}, digest)
	if reseed {
		seed, err := c.reseed(instanceID)
		if err != nil {
			return false, err
		}
		// The same volume as before, unless the ISO storage changed since the create.
		if ide2 := seed.VolID + ",media=cdrom"; cfg["ide2"] != ide2 {
			params["ide2"] = ide2
		}
		res.Changed = appendNew(res.Changed, fmt.Sprintf("user-data (instance-id %s)", instanceID))
	}
	// What the change did, and the reboot it owes, are recorded in the same write as the change,
	// so that a run made again or resumed after a worker died answers it, and still reboots the
	// VM. A VM found matching keeps the record it has.
	reseeded = reseed || (inherited && last.Reseeded)
	rebootOwed := pending || reseed || last.OwesReboot()
	want.Op = last
	if len(res.Changed) > 0 || rebootOwed {
		want.Op = &proxy.Op{Run: run, Changed: res.Changed, Reseeded: reseeded, RebootOwed: rebootOwed, Restarted: last.By(run) && last.Restarted}
	}
	if have, _ := proxy.ParseDescription(cfg["description"]); proxy.FormatDescription(have) != proxy.FormatDescription(want) {
		params["description"] = proxy.WithMark(cfg["description"], want)
	}
	var a *activities.Activities
	if len(params) > 0 {
		c.t.Phase(core.PhaseChanging, "set config")
		summary := "configure " + ref.String()
		if err := core.Call(c.ctx, c.s.CallOptions(summary), a.SetVMConfig,
			activities.SetVMConfigRequest{VMRef: ref, Params: params}).Get(c.ctx, nil); err != nil {
			return false, core.Fail(summary, err)
		}
	}
	if grow > 0 {
		c.t.Phase(core.PhaseChanging, "grow disk "+m.BootDisk)
		if err := c.resizeDisk(ref, m.BootDisk, grow); err != nil {
			return false, err
		}
	}
	if res.Restarted, err = c.restart(running, rebootOwed); err != nil {
		return false, err
	}
	if rebootOwed {
		want.Op.RebootOwed, want.Op.Restarted = false, true
		if err := c.setMark(ref, proxy.WithMark(cfg["description"], want), "record that the reboot of "+ref.String()+" ended"); err != nil {
			return false, err
		}
	}
	res.Restarted = res.Restarted || want.Op.By(run) && want.Op.Restarted
	return reseeded, nil
}

// setMark writes the VM's description, its mark in it, as step.
func (c *change) setMark(ref activities.VMRef, description, step string) error {
	var a *activities.Activities
	c.t.Step(step)
	if err := core.Call(c.ctx, c.s.CallOptions(step), a.SetVMConfig,
		activities.SetVMConfigRequest{VMRef: ref, Params: pve.VMConfig{"description": description}}).Get(c.ctx, nil); err != nil {
		return core.Fail(step, err)
	}
	return nil
}

// appendNew appends change to changes unless it is there: a run that finishes an earlier one's
// change may find part of it still to do.
func appendNew(changes []string, change string) []string {
	if slices.Contains(changes, change) {
		return changes
	}
	return append(changes, change)
}

// find finds the proxy's one VM, as a create would: it refuses VMs with the proxy's name that
// are not its own, and more than one of its own.
func (c *change) find() error {
	c.t.Phase(core.PhaseLookingUp, "look up the proxy's VMs")
	h, err := c.lookup()
	if err != nil {
		return err
	}
	if err := c.refuseForeign("change", h.Foreign); err != nil {
		return err
	}
	if err := c.settle(&h); err != nil {
		return err
	}
	if err := c.refuseMany("change", h.Ours); err != nil {
		return err
	}
	if len(h.Ours) == 0 {
		return core.NotFoundf("change proxy %s: no VM carries its mark (uid %s): create the proxy first", c.name, c.uid)
	}
	c.vm = h.Ours[0]
	c.t.VM(c.vm.Node, c.vm.VMID)
	return nil
}

// refuseNICsWithoutReseed fails Permanent when changes add a NIC and the change has no reseed:
// the guest would not configure the NIC (ChangeProxy). It is the entity that hands out
// instance-ids, with the user-data a new seed carries.
func (c *change) refuseNICsWithoutReseed(changes []proxy.NICChange, reseed bool) error {
	var added []string
	for _, n := range changes {
		if n.Added() {
			added = append(added, n.Key)
		}
	}
	if len(added) == 0 || reseed {
		return nil
	}
	return core.Permanentf("change proxy %s: NIC(s) %s are to be added, and the guest configures a NIC only from the network-config of a seed with a new instance-id: "+
		"the change needs a reseed with the user-data and a new instance-id; nothing was changed", c.name, strings.Join(added, ", "))
}

// reseed replaces the proxy's seed ISO on its VM's node with one of the input's user-data and
// instance-id. The old one is deleted first, so that the upload writes a new file and never
// overwrites the one a running QEMU has open: the guest sees the new ISO once it restarts.
func (c *change) reseed(instanceID string) (activities.UploadISOResult, error) {
	c.t.Phase(core.PhaseReseeding, "delete the old seed ISO")
	volid := proxy.SeedVolID(c.s.ISOStorage, proxy.NameFromUID(c.uid))
	if err := c.deleteSeedISO(c.vm.Node, volid); err != nil {
		return activities.UploadISOResult{}, err
	}
	c.t.Step("upload the new seed ISO")
	return c.uploadSeed(c.vm.Node, instanceID, c.in.UserData, proxy.SeedNetwork(c.vm.Config, c.in.Addresses, c.s.NICs(c.in.NICs, c.in.MachineType), c.s.Nameservers))
}

// restart starts the VM if it is stopped, or reboots it if it runs and the change needs a reboot
// to reach the guest, and reports whether it did either.
func (c *change) restart(running, needsReboot bool) (bool, error) {
	ref := c.vm.ref()
	switch {
	case !running:
		c.t.Phase(core.PhaseStarting, "start VM")
		return true, c.start(ref)
	case needsReboot:
		return true, c.reboot(ref)
	}
	return false, nil
}

// reboot reboots the VM and waits for the reboot task: the guest shuts down and PVE starts it
// again (awaitReady waits for that). A VM that stopped since its status was read is started
// instead. PVE checks the VM's lock inside the reboot task, as inside a start's: a reboot task
// that fails on a lock (a backup's, or the config lock another task holds) rebooted nothing,
// and is made again within the unlock budget (redoOnLock).
func (c *change) reboot(ref activities.VMRef) error {
	var a *activities.Activities
	c.t.Phase(core.PhaseRebooting, "reboot "+ref.String())
	step, err := c.redoOnLock("the reboot of "+ref.String(), func() (string, error) {
		summary := "reboot " + ref.String()
		var upid pve.UPID
		if err := core.Call(c.ctx, c.s.CallOptions(summary), a.Reboot, ref).Get(c.ctx, &upid); err != nil {
			return summary, err
		}
		summary = "wait for reboot of " + ref.String()
		return summary, core.WaitTask(c.ctx, c.s, c.t, core.LocalLooksFirst, upid, c.s.Budgets.Stop+c.s.Budgets.Start, summary)
	})
	if core.IsType(err, activities.ErrNotRunning) {
		c.t.Phase(core.PhaseStarting, "start VM, which stopped since its status was read")
		return c.start(ref)
	}
	if err != nil {
		return core.Fail(step, err)
	}
	return nil
}
