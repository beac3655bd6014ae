package chaos

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows"
)

// settle waits, up to the scenario's settle time, until the only open workflows are the
// long-lived ones, idle: Proxy entities that run no operation and queue no request, and clone
// admissions in which nobody holds a lease or waits for one, and no clone whose lease was given
// back still counts. What is still open then is stuck,
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
	case workflows.ProxyName:
		val, err := r.temporal.QueryWorkflow(ctx, id, "", workflows.StatusQuery)
		if err != nil {
			return fmt.Sprintf("status query failed: %v", err)
		}
		var st workflows.ProxyStatus
		if err := val.Get(&st); err != nil {
			return err.Error()
		}
		if st.Operation != nil || st.Queued > 0 {
			return fmt.Sprintf("entity in phase %s runs %+v with %d queued", st.Phase, *st.Operation, st.Queued)
		}
		return ""
	case workflows.CloneAdmissionName:
		val, err := r.temporal.QueryWorkflow(ctx, id, "", workflows.AdmissionQuery)
		if err != nil {
			return fmt.Sprintf("admission query failed: %v", err)
		}
		var st workflows.AdmissionState
		if err := val.Get(&st); err != nil {
			return err.Error()
		}
		if len(st.Holders) > 0 || len(st.Waiting) > 0 || len(st.Covered) > 0 {
			return fmt.Sprintf("leases held by %v, waiting %v, clones covered after their lease %v", st.Holders, st.Waiting, st.Covered)
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

	byUID := map[string][]pvesim.VM{}
	names := map[string]bool{}
	vmids := map[int]bool{}
	for _, vm := range st.VMs {
		vmids[vm.VMID] = true
		names[vm.Config["name"]] = true
		if m, managed := proxy.ParseDescription(vm.Config["description"]); managed {
			byUID[m.UID] = append(byUID[m.UID], vm)
		}
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
