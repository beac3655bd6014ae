package proxyvm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
)

// The steps CreateProxy and ChangeProxy both take on the proxy's VM. op names the operation in
// their messages: "create" or "change".

// markFor is the VM's mark, read from its description, made the mark of a VM made to a spec:
// its image, its seed's instance-id, and the rest of the spec that Proxmox can hold
// (proxy.Spec), so that an entity that lost its state rebuilds it from the VM. userDataSHA256 is
// the digest of the user-data of the VM's seed.
func markFor(description, image, instanceID string, spec proxy.Spec, userDataSHA256 string) proxy.Mark {
	mark, _ := proxy.ParseDescription(description)
	spec.UserDataSHA256 = userDataSHA256
	// What the operation did is the caller's to say (proxy.Op).
	mark.Image, mark.InstanceID, mark.Spec, mark.Op = image, instanceID, &spec, nil
	return mark
}

// userDataSHA256 is the hex SHA-256 of user-data: what is shown and recorded of it.
func userDataSHA256(userData string) string {
	sum := sha256.Sum256([]byte(userData))
	return hex.EncodeToString(sum[:])
}

// refuseForeign fails when the proxy's name is taken by VMs that are not this proxy's: a person
// has to resolve that.
func (o *proxyOps) refuseForeign(op string, foreign []int) error {
	if len(foreign) > 0 {
		return core.Permanentf("%s proxy %s: VM(s) %v already carry the name %s without this proxy's mark (uid %s)", op, o.name, foreign, o.name, o.uid)
	}
	return nil
}

// refuseMany fails when more than one VM carries the proxy's mark: a person has to choose.
func (o *proxyOps) refuseMany(op string, ours []vm) error {
	if len(ours) > 1 {
		ids := make([]int, len(ours))
		for i, v := range ours {
			ids[i] = v.VMID
		}
		return core.Permanentf("%s proxy %s: VMs %v all carry this proxy's mark; keep one and destroy the others", op, o.name, ids)
	}
	return nil
}

// readOurVM reads the config or status of the proxy's VM v, following it if it has moved. A VM
// that is gone is Transient: it was there a moment ago, and a new create makes a new one.
func (o *proxyOps) readOurVM(op string, v *vm, what, waitFor string, budget time.Duration, out any) error {
	gone, err := o.readVM(v, what, waitFor, budget, out)
	if gone {
		return core.Transientf("%s proxy %s: VM %d disappeared during the %s", op, o.name, v.VMID, op)
	}
	o.t.VM(v.Node, v.VMID)
	return err
}

// readConfig reads the config of the proxy's VM ref.
func (o *proxyOps) readConfig(ref activities.VMRef) (pve.VMConfig, error) {
	var a *activities.Activities
	var cfg pve.VMConfig
	if err := core.Call(o.ctx, o.s.CallOptions("read config of "+ref.String()), a.VMConfig, activities.VMConfigRequest{VMRef: ref}).Get(o.ctx, &cfg); err != nil {
		return nil, core.Fail("read config of "+ref.String(), err)
	}
	return cfg, nil
}

// addNICs writes to VM ref, of config cfg, the NICs of nics it lacks (proxy.NICChanges), and
// returns its config as PVE has it then, and the parameters of the other NIC changes
// (proxy.NICParams) for the caller's next config write. PVE gives a new NIC its MAC only when it
// is written, and a seed's network-config names the NICs by MAC: the seed is made from the
// config this returns.
func (o *proxyOps) addNICs(ref activities.VMRef, cfg pve.VMConfig, nics []config.NIC) (_, rest pve.VMConfig, err error) {
	var a *activities.Activities
	added := pve.VMConfig{}
	for _, n := range proxy.NICChanges(cfg, o.s.Bridge, nics) {
		if n.Added() {
			added[n.Key] = n.Want
		}
	}
	if len(added) > 0 {
		summary := "add NICs " + strings.Join(workflow.DeterministicKeys(added), ", ") + " to " + ref.String()
		o.t.Step(summary)
		if err := core.Call(o.ctx, o.s.CallOptions(summary), a.SetVMConfig,
			activities.SetVMConfigRequest{VMRef: ref, Params: added}).Get(o.ctx, nil); err != nil {
			return nil, nil, core.Fail(summary, err)
		}
		if cfg, err = o.readConfig(ref); err != nil {
			return nil, nil, err
		}
	}
	return cfg, proxy.NICParams(proxy.NICChanges(cfg, o.s.Bridge, nics)), nil
}

// uploadSeed uploads the proxy's seed ISO to the ISO storage of node, with cloud-init's
// instance-id, userData and the guest's network (proxy.SeedNetwork), and waits for the upload.
// The ISO is named after the UID, not the VM, so that a delete by UID alone finds it.
func (o *proxyOps) uploadSeed(node, instanceID, userData string, network []nocloud.Ethernet) (activities.UploadISOResult, error) {
	var a *activities.Activities
	req := activities.UploadISORequest{
		StorageRef: activities.StorageRef{Node: node, Storage: o.s.ISOStorage},
		Name:       o.name,
		InstanceID: instanceID,
		Seed:       proxy.NameFromUID(o.uid),
		UserData:   userData,
		Network:    network,
	}
	summary := fmt.Sprintf("upload seed ISO %s to %s on %s", proxy.SeedISOName(req.Seed), o.s.ISOStorage, node)
	var seed activities.UploadISOResult
	if err := core.Call(o.ctx, o.s.CallOptions(summary), a.UploadISO, req).Get(o.ctx, &seed); err != nil {
		return seed, core.Fail(summary, err)
	}
	summary = "wait for upload of " + seed.VolID
	if err := core.WaitTask(o.ctx, o.s, o.t, core.LocalLooksFirst, seed.UPID, o.s.Budgets.Upload, summary); err != nil {
		return seed, core.Fail(summary, err)
	}
	return seed, nil
}

// deleteSeedISO deletes seed ISO volid from the ISO storage of node and waits for the deletion.
// PVE ends the deletion of a missing ISO with task OK, so absence costs nothing.
func (o *proxyOps) deleteSeedISO(node, volid string) error {
	var a *activities.Activities
	summary := fmt.Sprintf("delete seed ISO %s on %s", volid, node)
	var upid pve.UPID
	err := core.Call(o.ctx, o.s.CallOptions(summary), a.DeleteVolume,
		activities.DeleteVolumeRequest{StorageRef: activities.StorageRef{Node: node, Storage: o.s.ISOStorage}, VolID: volid}).Get(o.ctx, &upid)
	switch {
	case core.IsType(err, activities.ErrNotFound):
		return nil
	case err != nil:
		return core.Fail(summary, err)
	case upid == "":
		return nil // deleted within the request
	}
	if err := core.WaitTask(o.ctx, o.s, o.t, core.LocalLooksFirst, upid, o.s.Budgets.Request, "wait for "+summary); err != nil {
		return core.Fail("wait for "+summary, err)
	}
	return nil
}

// resizeDisk grows disk of the VM to gib GiB and waits for the resize task. PVE grows a disk
// online: a running guest sees the larger disk at once, without a reboot. A resize to the size
// the disk has is a task that changes nothing, so redoOnLock may make it again.
func (o *proxyOps) resizeDisk(ref activities.VMRef, disk string, gib int64) error {
	var a *activities.Activities
	size := fmt.Sprintf("%dG", gib)
	summary := fmt.Sprintf("resize disk %s of %s to %s", disk, ref, size)
	step, err := o.redoOnLock("the resize of disk "+disk+" of "+ref.String(), func() (string, error) {
		o.t.Step(summary)
		var upid pve.UPID
		if err := core.Call(o.ctx, o.s.CallOptions(summary), a.Resize,
			activities.ResizeRequest{VMRef: ref, Disk: disk, Size: size}).Get(o.ctx, &upid); err != nil {
			return summary, err
		}
		return "wait for " + summary, core.WaitTask(o.ctx, o.s, o.t, core.LocalLooksFirst, upid, o.s.Budgets.Resize, "wait for "+summary)
	})
	if err != nil {
		return core.Fail(step, err)
	}
	return nil
}

// start starts the VM and waits for the start task. A VM that runs already counts as started,
// so redoOnLock may make it again.
func (o *proxyOps) start(ref activities.VMRef) error {
	var a *activities.Activities
	step, err := o.redoOnLock("the start of "+ref.String(), func() (string, error) {
		var upid pve.UPID
		summary := "start " + ref.String()
		if err := core.Call(o.ctx, o.s.CallOptions(summary), a.Start, ref).Get(o.ctx, &upid); err != nil {
			return summary, err
		}
		summary = "wait for start of " + ref.String()
		return summary, core.WaitTask(o.ctx, o.s, o.t, core.LocalLooksFirst, upid, o.s.Budgets.Start, summary)
	})
	if core.IsTaskFailedWith(err, activities.ErrAlreadyRunning) {
		return nil // a start whose first answer was lost, or a VM someone else started
	}
	if err != nil {
		return core.Fail(step, err)
	}
	return nil
}

// redoOnLock runs do, a call that starts a Proxmox task and the wait for the task, and runs it
// again while the task fails on a lock. PVE checks a VM's lock (a backup's, say) inside the task
// of a start or a resize too, so the lock that has a call refused, which callOptions waits out
// within the unlock budget, may as well fail the call's task; it is waited out alike: do runs
// again, spaced as a wait's attempts are, while the unlock budget, counted from the first run,
// has room. A task that failed on a lock changed nothing, so running do again is safe. It
// returns do's last step and error, as they came.
func (o *proxyOps) redoOnLock(what string, do func() (step string, err error)) (string, error) {
	begun := workflow.Now(o.ctx)
	for {
		step, err := do()
		if !core.IsTaskFailedWith(err, activities.ErrLocked) {
			return step, err
		}
		again, sleepErr := o.sleepOutLock(what, begun, o.s.Budgets.Unlock)
		if sleepErr != nil {
			return step, sleepErr
		}
		if !again {
			return step, err
		}
	}
}

// sleepOutLock waits, after what failed on a lock, before it is made again: the poll policy's
// interval after as many retries as the run made so far. again is false, and it does not wait,
// when budget, counted from begun, has no room for that.
func (o *proxyOps) sleepOutLock(what string, begun time.Time, budget time.Duration) (again bool, err error) {
	wait := o.s.Poll.InitialInterval
	for range o.t.Status.LockRetries {
		wait = min(time.Duration(float64(wait)*o.s.Poll.BackoffCoefficient), o.s.Poll.MaximumInterval)
	}
	if workflow.Now(o.ctx).Add(wait).Sub(begun) >= budget {
		return false, nil
	}
	o.t.Status.LockRetries++
	o.t.Step(fmt.Sprintf("%s failed on a lock; making it again in %s (retry %d)", what, wait, o.t.Status.LockRetries))
	o.t.Flush()
	if err := workflow.Sleep(o.ctx, wait); err != nil {
		return false, err
	}
	return true, nil
}

// awaitReady waits until VM v runs and its guest agent reports on net0 every address of a (the
// static ones exactly, a routable IPv4 for DHCP), and, for a machine type whose readiness is
// cloud-init, until cloud-init has finished (awaitCloudInit); it returns what the agent reports
// on net0. It reads v's config for net0's MAC unless v holds it.
func (o *proxyOps) awaitReady(v *vm, addrs proxy.Addresses, machineType string) (activities.AgentResult, error) {
	var a *activities.Activities
	ref := v.ref()
	o.t.Phase(core.PhaseBooting, "wait for the VM to run")
	summary := "wait for " + ref.String() + " to run"
	if err := core.Poll(o.ctx, o.s.WaitOptions(o.s.Budgets.Running, summary), a.VMStatus,
		activities.VMStatusRequest{VMRef: ref, WaitFor: activities.WaitRunning, Pace: o.s.Pace(o.ctx)}).Get(o.ctx, nil); err != nil {
		return activities.AgentResult{}, core.Fail(summary, err)
	}
	if v.Config == nil {
		o.t.Step("read config")
		if err := core.Call(o.ctx, o.s.CallOptions("read config of "+ref.String()), a.VMConfig, activities.VMConfigRequest{VMRef: ref}).Get(o.ctx, &v.Config); err != nil {
			return activities.AgentResult{}, core.Fail("read config of "+ref.String(), err)
		}
	}
	summary = "wait for the guest agent of " + ref.String() + " to report net0's addresses: " + addrs.String()
	o.t.Step(summary)
	var agent activities.AgentResult
	if err := core.Poll(o.ctx, o.s.WaitOptions(o.s.Budgets.Agent, summary), a.AgentNetworkInterfaces,
		activities.AgentRequest{VMRef: ref, WaitReady: true, MAC: proxy.MACFromNet(v.Config["net0"]), Addresses: addrs, Pace: o.s.Pace(o.ctx)}).Get(o.ctx, &agent); err != nil {
		return activities.AgentResult{}, core.Fail(summary, err)
	}
	if o.s.MachineTypes[machineType].WaitsForCloudInit() {
		if err := o.awaitCloudInit(ref); err != nil {
			return activities.AgentResult{}, err
		}
	}
	return agent, nil
}

// awaitCloudInit waits, within budgets.cloudInit, until cloud-init in VM ref has finished all
// its stages, as its result file says, read through the guest agent. An address alone says the
// network is up, not that the user-data's packages and runcmd have run; a proxy is answered
// ready only once they have. A cloud-init that finished with errors fails the operation as
// Permanent, with cloud-init's errors in the message and as the failure's details
// (activities.CloudInitErrors): the guest will not run them again in this boot.
func (o *proxyOps) awaitCloudInit(ref activities.VMRef) error {
	var a *activities.Activities
	summary := "wait for cloud-init of " + ref.String() + " to finish"
	o.t.Step(summary)
	var done activities.CloudInitDone
	err := core.Poll(o.ctx, o.s.WaitOptions(o.s.Budgets.CloudInit, summary), a.CloudInitResult,
		activities.CloudInitRequest{VMRef: ref, Pace: o.s.Pace(o.ctx)}).Get(o.ctx, &done)
	var appErr *temporal.ApplicationError
	var ci activities.CloudInitErrors
	if errors.As(err, &appErr) && appErr.HasDetails() && appErr.Details(&ci) == nil && len(ci.Errors) > 0 {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("proxy %s: %s", o.name, appErr.Message()), core.FailPermanent, nil, ci)
	}
	if err != nil {
		return core.Fail(summary, err)
	}
	return nil
}
