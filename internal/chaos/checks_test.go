package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/addresspool"
	"github.com/pveflow/pveflow/workflows/admission"
	"github.com/pveflow/pveflow/workflows/callshares"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// settle waits, up to the scenario's settle time, until the only open workflows are the
// long-lived ones, idle: Proxy entities that run no operation and queue no request, clone
// admissions in which nobody holds a lease or waits for one, and no clone whose lease was given
// back still counts, address pools, the call cap's shares, and the observer between its listings. What is still open then is stuck,
// and each is a failure with what it was doing.
func (r *run) settle() {
	deadline := time.Now().Add(r.sc.settle)
	for {
		busy := r.busy()
		if len(busy) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, b := range busy {
				r.fail("stuck %s after %s of settling", b, r.sc.settle)
			}
			return
		}
		time.Sleep(5 * time.Second)
	}
}

// busy lists the open workflows that are not idle long-lived ones, each with why.
func (r *run) busy() []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var busy []string
	var token []byte
	for {
		resp, err := r.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: "ExecutionStatus = 'Running'", NextPageToken: token})
		if err != nil {
			return []string{fmt.Sprintf("(listing open workflows failed: %v)", err)}
		}
		for _, info := range resp.Executions {
			id, typ := info.Execution.WorkflowId, info.Type.Name
			if why := r.whyBusy(ctx, id, typ); why != "" {
				busy = append(busy, fmt.Sprintf("%s %s (run %s): %s", typ, id, info.Execution.RunId, why))
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return busy
		}
	}
}

// whyBusy says why an open workflow is not an idle long-lived one; empty when it is.
func (r *run) whyBusy(ctx context.Context, id, typ string) string {
	switch typ {
	case core.ProxyName:
		val, err := r.temporal.QueryWorkflow(ctx, id, "", core.StatusQuery)
		if err != nil {
			return fmt.Sprintf("status query failed: %v", err)
		}
		var st proxyvm.ProxyStatus
		if err := val.Get(&st); err != nil {
			return err.Error()
		}
		if st.Operation != nil || len(st.Requests) > 0 {
			return fmt.Sprintf("entity in phase %s runs %+v with requests %+v unanswered", st.Phase, st.Operation, st.Requests)
		}
		return ""
	case core.CloneAdmissionName:
		val, err := r.temporal.QueryWorkflow(ctx, id, "", admission.AdmissionQuery)
		if err != nil {
			return fmt.Sprintf("admission query failed: %v", err)
		}
		var st admission.AdmissionState
		if err := val.Get(&st); err != nil {
			return err.Error()
		}
		if len(st.Holders) > 0 || len(st.Waiting) > 0 || len(st.Covered) > 0 {
			return fmt.Sprintf("leases held by %v, waiting %v, clones covered after their lease %v", st.Holders, st.Waiting, st.Covered)
		}
		return ""
	case addresspool.AddressPoolName:
		return "" // it answers its Updates at once, and lives as long as its allocations
	case callshares.CallSharesName:
		return "" // it answers its Updates at once, and lives as long as workers renew their shares
	case core.ObserverName:
		// It lists the cluster on a timer for as long as the cluster has proxies: idle when it
		// answers between listings.
		if _, err := r.temporal.QueryWorkflow(ctx, id, "", core.ObserverQuery); err != nil {
			return fmt.Sprintf("observer query failed: %v", err)
		}
		return ""
	}
	desc, err := r.temporal.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return "open"
	}
	var pending []string
	for _, a := range desc.PendingActivities {
		last := ""
		if a.LastFailure != nil {
			last = ", last failure " + a.LastFailure.Message
		}
		pending = append(pending, fmt.Sprintf("%s attempt %d%s", a.ActivityType.GetName(), a.Attempt, last))
	}
	return fmt.Sprintf("open, pending activities %v", pending)
}

// checkState checks the invariants the simulator's state must meet after the run: no more
// than perStorage clones at once onto a storage, each kept proxy one VM with its seed released
// or attached, nothing left of a deleted proxy, and no disk or seed ISO without its VM.
func (r *run) checkState(st pvesim.State) {
	for _, key := range slices.Sorted(maps.Keys(st.MaxConcurrentClones)) {
		if n := st.MaxConcurrentClones[key]; n > perStorage {
			r.fail("%d clones ran at once onto %s, clones.perStorage is %d: %s", n, key, perStorage, peak(st.Clones, key))
		}
	}

	byUID := vmsByUID(st)
	names := map[string]bool{}
	vmids := map[int]bool{}
	for _, vm := range st.VMs {
		vmids[vm.VMID] = true
		names[vm.Config["name"]] = true
	}
	isos := map[string]bool{}
	for _, v := range st.Volumes {
		if _, ok := proxy.SeedISOOwner(v.VolID); ok {
			isos[v.VolID] = true
		}
	}

	for _, uid := range r.kept {
		vms := byUID[uid]
		if len(vms) != 1 {
			r.fail("kept proxy %s has %d VMs: %s", uid, len(vms), vmList(vms))
			continue
		}
		vm := vms[0]
		if lock := vm.Config["lock"]; lock != "" {
			r.fail("kept proxy %s: VM %d is locked (%s)", uid, vm.VMID, lock)
		}
		// The create released the seed once the guest consumed it, unless it found the VM
		// running already (a retried create): then the seed stays attached.
		seed := proxy.SeedVolID("local", vm.Config["name"])
		switch volid, _, _ := strings.Cut(vm.Config["ide2"], ","); {
		case volid == "none":
		case volid != seed:
			r.fail("kept proxy %s: VM %d has ide2 %q, neither ejected nor its seed ISO %s", uid, vm.VMID, vm.Config["ide2"], seed)
		case !isos[seed]:
			r.fail("kept proxy %s: its seed ISO %s is gone (VM %d)", uid, seed, vm.VMID)
		}
	}
	for _, uid := range r.deleted {
		if vms := byUID[uid]; len(vms) > 0 {
			r.fail("deleted proxy %s still has VMs: %s", uid, vmList(vms))
		}
		if seed := proxy.SeedVolID("local", proxy.NameFromUID(uid)); isos[seed] {
			r.fail("deleted proxy %s still has its seed ISO %s", uid, seed)
		}
	}
	for _, v := range st.Volumes {
		if name, ok := proxy.SeedISOOwner(v.VolID); ok && !names[name] {
			r.fail("seed ISO %s has no VM named %s", v.VolID, name)
		}
		if m := vmDiskRE.FindStringSubmatch(v.VolID); m != nil {
			if id, _ := strconv.Atoi(m[1]); !vmids[id] {
				r.fail("disk %s on %s has no VM %d", v.VolID, v.Node, id)
			}
		}
	}
}

// vmsByUID are the state's VMs by the UID their mark names.
func vmsByUID(st pvesim.State) map[string][]pvesim.VM {
	byUID := map[string][]pvesim.VM{}
	for _, vm := range st.VMs {
		if m, managed := proxy.ParseDescription(vm.Config["description"]); managed {
			byUID[m.UID] = append(byUID[m.UID], vm)
		}
	}
	return byUID
}

// checkKept checks that every kept proxy's one VM is what the last requests accepted for it
// asked, in its config and in what its guest runs: the machine type of the last change of it
// (the rollout's for a proxy the rollout changed), cores and memory in the config and in
// effect, and the instance-id of its last user-data in its mark and in its guest's cloud-init.
// The entity's status ties the two: it wants what the driver last asked, and gives the
// user-data the instance-id the VM must carry.
func (r *run) checkKept(st pvesim.State) {
	byUID := vmsByUID(st)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, uid := range r.kept {
		vms := byUID[uid]
		if len(vms) != 1 {
			continue // checkState reports it
		}
		vm, g := vms[0], st.Guests[vms[0].VMID]
		r.mu.Lock()
		w := *r.wants[uid]
		r.mu.Unlock()
		status, err := r.starter.ProxyStatus(ctx, uid)
		if err != nil {
			r.fail("kept proxy %s: %v", uid, err)
			continue
		}
		why := func(format string, args ...any) {
			r.fail("kept proxy %s: VM %d: %s; %s", uid, vm.VMID, fmt.Sprintf(format, args...), r.evidence(uid, status))
		}
		if status.Desired.MachineType != w.machineType {
			why("its entity wants machine type %q, the last change accepted asked %q", status.Desired.MachineType, w.machineType)
		}
		if sum := sha256.Sum256([]byte(w.userData)); status.Desired.UserDataSHA256 != hex.EncodeToString(sum[:]) {
			why("its entity wants other user-data than the last accepted: %q", w.userData)
		}
		mt := machineTypes[w.machineType]
		if vm.Config["cores"] != strconv.Itoa(mt.Cores) || vm.Config["memory"] != strconv.FormatInt(mt.MemoryMiB, 10) {
			why("its config has cores %q and memory %q, machine type %s's are %d and %d", vm.Config["cores"], vm.Config["memory"], w.machineType, mt.Cores, mt.MemoryMiB)
		}
		switch {
		case !g.Running:
			why("it is not running")
		case g.Cores != mt.Cores || g.MemoryMiB != mt.MemoryMiB:
			why("it runs with %d cores and %d MiB, machine type %s's are %d and %d: its config is not in effect", g.Cores, g.MemoryMiB, w.machineType, mt.Cores, mt.MemoryMiB)
		}
		mark, _ := proxy.ParseDescription(vm.Config["description"])
		r.mu.Lock()
		if vm.Config["cores"] == strconv.Itoa(machineTypes[rolloutMachineType].Cores) {
			r.finalLarge++
		}
		if mark.InstanceID != uid {
			r.finalReseeded++
		}
		r.mu.Unlock()
		if mark.InstanceID != status.Desired.InstanceID {
			why("its mark has instance-id %q, its last user-data's is %q", mark.InstanceID, status.Desired.InstanceID)
		}
		if g.Running && g.InstanceID != status.Desired.InstanceID {
			why("its guest's cloud-init runs instance %q, its last user-data's is %q", g.InstanceID, status.Desired.InstanceID)
		}
	}
}

// checkRollout checks the rollout's outcome: it changed every proxy it was given, and says so
// truthfully. Its proxies were created with another machine type and nothing but the rollout
// changes it, so a proxy it says it changed nothing of ("-") was changed by it all the same
// (issue 31, case 10: an answer lost with its worker, sent again under its request ID, and
// answered as a second request), unless a change of it failed before and was made again on
// the resume, after the failed one had changed the VM. checkKept checks their final VMs.
func (r *run) checkRollout() {
	st := r.rolloutStatus
	if st == nil {
		return // the run failed already: never started, or not done in time
	}
	done := map[string]bool{}
	for _, d := range st.Done {
		done[d.UID] = true
		if len(d.Changed) == 0 && !d.Rebuilt && len(r.rolloutFailed[d.UID]) == 0 {
			r.fail("rollout %s says it changed nothing of proxy %s, which was created %s and which nothing else changes to %s; %s",
				r.rolloutID, d.UID, "small", rolloutMachineType, r.evidence(d.UID, r.statusOf(d.UID)))
		}
	}
	for _, uid := range r.rolloutUIDs {
		if !done[uid] {
			r.fail("rollout %s did not change proxy %s: %+v", r.rolloutID, uid, *st)
		}
	}
}

// checkPool checks that the address pool's allocations are the addresses of the VMs of the
// proxies created from it: each allocation's UID has one VM, whose guest has those addresses,
// and each address of the pool's range a guest has is allocated to that guest's proxy.
func (r *run) checkPool(st pvesim.State) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ps, err := r.starter.AddressPool(ctx, poolName)
	if err != nil {
		if len(r.pooled) > 0 {
			r.fail("address pool %s: %v", poolName, err)
		}
		return
	}
	r.mu.Lock()
	r.allocations = len(ps.Allocations)
	r.mu.Unlock()
	allocated := map[netip.Addr]string{}
	for _, a := range ps.Allocations {
		if !r.pooled[a.UID] {
			r.fail("address pool %s: %s holds %s and %s, and was never created from the pool", poolName, a.UID, a.IPv4, a.IPv6)
		}
		for _, s := range []string{a.IPv4, a.IPv6} {
			if p, err := netip.ParsePrefix(s); err == nil {
				allocated[p.Addr()] = a.UID
			}
		}
	}
	ranges := []netip.Prefix{netip.MustParsePrefix(pool.IPv4.Subnet), netip.MustParsePrefix(pool.IPv6.Subnet)}
	held := map[netip.Addr][]string{} // the pool's addresses the guests have, with their VMs' UIDs
	for _, vm := range st.VMs {
		m, managed := proxy.ParseDescription(vm.Config["description"])
		owner := m.UID
		if !managed {
			owner = fmt.Sprintf("(VM %d, no mark)", vm.VMID)
		}
		for _, s := range st.Guests[vm.VMID].Addresses {
			p, err := netip.ParsePrefix(s)
			if err == nil && slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return r.Contains(p.Addr()) }) {
				held[p.Addr()] = append(held[p.Addr()], owner)
			}
		}
	}
	for _, addr := range slices.SortedFunc(maps.Keys(allocated), netip.Addr.Compare) {
		if uid := allocated[addr]; !slices.Equal(held[addr], []string{uid}) {
			r.fail("address pool %s: %s is allocated to %s, and the VMs with it are of %v; %s", poolName, addr, uid, held[addr], r.evidence(uid, r.statusOf(uid)))
		}
	}
	for _, addr := range slices.SortedFunc(maps.Keys(held), netip.Addr.Compare) {
		if _, ok := allocated[addr]; !ok {
			r.fail("address pool %s: the VM of %v has %s, which is not allocated", poolName, held[addr], addr)
		}
	}
	byUID := vmsByUID(st)
	for _, uid := range r.kept {
		vms := byUID[uid]
		if r.pooled[uid] && len(vms) == 1 && len(st.Guests[vms[0].VMID].Addresses) == 2 {
			r.mu.Lock()
			r.finalPooled++
			r.mu.Unlock()
		}
		if r.pooled[uid] && len(vms) == 1 && len(st.Guests[vms[0].VMID].Addresses) != 2 {
			r.fail("kept proxy %s, created from address pool %s: VM %d has the static addresses %v, not one of each family", uid, poolName, vms[0].VMID, st.Guests[vms[0].VMID].Addresses)
		}
	}
}

// statusOf is the status of uid's entity, empty when it does not answer.
func (r *run) statusOf(uid string) proxyvm.ProxyStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, _ := r.starter.ProxyStatus(ctx, uid)
	return st
}

// evidence is what the driver and the entity know of uid's requests: the requests sent and how
// each ended, and the entity's latest operations, when status has them.
func (r *run) evidence(uid string, status proxyvm.ProxyStatus) string {
	r.mu.Lock()
	asked := slices.Clone(r.asked[uid])
	r.mu.Unlock()
	var ops []string
	for _, o := range status.Operations {
		ops = append(ops, fmt.Sprintf("#%d %s (%s) %s run %s %s..%s %s", o.Seq, o.Kind, o.Reason, o.WorkflowID, o.RunID,
			o.StartedAt.Format("15:04:05.000"), o.ClosedAt.Format("15:04:05.000"), strings.TrimSpace(o.Outcome+" "+o.Error)))
	}
	return fmt.Sprintf("requests [%s]; operations [%s]", strings.Join(asked, "; "), strings.Join(ops, "; "))
}

// vmDiskRE matches a VM's own disk volume, capturing its VMID.
var vmDiskRE = regexp.MustCompile(`:vm-(\d+)-`)

func vmList(vms []pvesim.VM) string {
	var out []string
	for _, vm := range vms {
		out = append(out, fmt.Sprintf("VM %d on %s (name %s, lock %q)", vm.VMID, vm.Node, vm.Config["name"], vm.Config["lock"]))
	}
	return "[" + strings.Join(out, "; ") + "]"
}

// peak lists the clone tasks onto storage key ("<node>/<storage>") that ran at once when the
// most did: the evidence of a broken bound.
func peak(clones []pvesim.CloneRun, key string) string {
	node, storage, _ := strings.Cut(key, "/")
	onto := slices.DeleteFunc(slices.Clone(clones), func(c pvesim.CloneRun) bool {
		return c.Node != node || !slices.Contains(c.Storages, storage)
	})
	var best []pvesim.CloneRun
	for _, at := range onto {
		var running []pvesim.CloneRun
		for _, c := range onto {
			if !c.Start.After(at.Start) && (c.End.IsZero() || c.End.After(at.Start)) {
				running = append(running, c)
			}
		}
		if len(running) > len(best) {
			best = running
		}
	}
	var out []string
	for _, c := range best {
		out = append(out, fmt.Sprintf("clone to %d from %s to %s (%s) %s", c.NewID,
			c.Start.Format("15:04:05.000"), c.End.Format("15:04:05.000"), c.ExitStatus, c.UPID))
	}
	return strings.Join(out, "; ")
}
