package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// DefaultGrace is how old a VM or seed ISO must be before garbage collection takes it, unless a
// run says otherwise.
const DefaultGrace = time.Hour

// CollectGarbageInput is the input of CollectGarbage.
type CollectGarbageInput struct {
	// Keep are the UIDs of the proxies the operator keeps: every other UID's VMs are garbage.
	Keep []string `json:"keep"`
	// KeepNone says that an empty Keep is meant, and every proxy is garbage. Without it an empty
	// Keep is refused: a caller that lost its list must not delete every proxy.
	KeepNone bool `json:"keepNone,omitempty"`
	// DryRun finds the garbage and deletes nothing.
	DryRun bool `json:"dryRun,omitempty"`
	// Grace is how old a VM (by the creation time in its mark) or a seed ISO (by its ctime)
	// must be to be collected; zero is DefaultGrace. For ISOs it covers the moments in which a
	// create's VM and seed ISO do not yet show together; for VMs, a create that ends between the
	// operator reading its kept set and this run listing the cluster.
	Grace time.Duration `json:"grace,omitempty"`
}

// What became of a piece of garbage, in GarbageVM.Outcome and GarbageISO.Outcome.
const (
	// GarbageFound: a dry run found it, and would delete it.
	GarbageFound = "found"
	// GarbageDeleted: it is gone.
	GarbageDeleted = "deleted"
	// GarbageSkipped: it is left alone; Detail says why.
	GarbageSkipped = "skipped"
	// GarbageFailed: deleting it failed; Detail holds the error.
	GarbageFailed = "failed"
)

// GarbageVM is a VM with pveflow's mark whose UID the operator does not keep.
type GarbageVM struct {
	UID     string `json:"uid"`
	VMID    int    `json:"vmid"`
	Node    string `json:"node"`
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	// Age is how old the VM was by its mark when the run looked; it is set on the young ones.
	Age time.Duration `json:"age,omitempty"`
}

// GarbageISO is a seed ISO of a name no VM has.
type GarbageISO struct {
	VolID     string    `json:"volid"`
	Node      string    `json:"node"`
	Storage   string    `json:"storage"`
	CreatedAt time.Time `json:"createdAt"`
	Outcome   string    `json:"outcome"`
	Detail    string    `json:"detail,omitempty"`
	// Age is how old the ISO was when the run looked; it is set on the young ones.
	Age time.Duration `json:"age,omitempty"`
}

// CollectGarbageResult is what CollectGarbage returns.
type CollectGarbageResult struct {
	DryRun bool         `json:"dryRun"`
	VMs    []GarbageVM  `json:"vms"`
	ISOs   []GarbageISO `json:"isos"`
	// Unreadable are the VMIDs of candidates whose config could not be read: they may be
	// proxies, and are left alone.
	Unreadable []int `json:"unreadable,omitempty"`
	// Grace is the grace period the run applied.
	Grace time.Duration `json:"grace"`
	// YoungVMs and YoungISOs would be garbage but are younger than the grace period, and are
	// left alone (GarbageSkipped), each with its age: the VMs of a UID with a young VM, and
	// young seed ISOs of a name no VM has.
	YoungVMs  []GarbageVM  `json:"youngVMs,omitempty"`
	YoungISOs []GarbageISO `json:"youngISOs,omitempty"`
}

// Failed reports whether deleting any piece of garbage failed.
func (r CollectGarbageResult) Failed() bool {
	return slices.ContainsFunc(r.VMs, func(v GarbageVM) bool { return v.Outcome == GarbageFailed }) ||
		slices.ContainsFunc(r.ISOs, func(i GarbageISO) bool { return i.Outcome == GarbageFailed })
}

// CollectGarbage finds, and unless DryRun deletes, what pveflow left on the cluster that nothing
// needs any more:
//   - VMs with pveflow's mark whose UID is not in Keep, through the Proxy entity of that UID:
//     RequestDelete asks it for the proxy to be absent, and it runs its DeleteProxy one
//     operation at a time with the proxy's other requests, so only VMs with the UID's mark go.
//     A UID whose create runs is skipped: it is not garbage yet: DescribeRun asks Temporal.
//   - seed ISOs named after a UID (proxy.SeedISOOwner) of a name that no VM has, with the
//     DeleteVolume call, after the VMs and only if a fresh look still finds no VM of the name.
//
// Nothing younger than the grace period is taken. Everything is listed before anything is
// deleted: a list call failing fails the run, and deletes nothing. A deletion that fails is
// reported in the result, and the run goes on with the others.
func (w *Workflows) CollectGarbage(ctx workflow.Context, in CollectGarbageInput) (res CollectGarbageResult, err error) {
	defer func() { logCollection(ctx, res, err) }()
	switch {
	case len(in.Keep) == 0 && !in.KeepNone:
		return CollectGarbageResult{}, permanentf("collect garbage: the kept set is empty; set KeepNone to collect every proxy")
	case in.Grace < 0:
		return CollectGarbageResult{}, permanentf("collect garbage: grace period %s is negative", in.Grace)
	case in.Grace == 0:
		in.Grace = DefaultGrace
	}
	var s settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return settingsOf(w.Config) }).Get(&s); err != nil {
		return CollectGarbageResult{}, err
	}
	g := &collector{ctx: ctx, s: s, t: &tracker{ctx: ctx}, in: in, cutoff: workflow.Now(ctx).Add(-in.Grace)}
	res, err = g.find()
	if err != nil || in.DryRun {
		return res, err
	}
	if err := g.deleteVMs(res.VMs); err != nil {
		return CollectGarbageResult{}, err
	}
	if err := g.deleteISOs(res.ISOs); err != nil {
		return CollectGarbageResult{}, err
	}
	return res, nil
}

// logCollection logs at info how a collection ended: the one info line of a run, with how many
// VMs and ISOs it found and deleted, and how long it took.
func logCollection(ctx workflow.Context, res CollectGarbageResult, err error) {
	took := workflow.Now(ctx).Sub(workflow.GetInfo(ctx).WorkflowStartTime)
	if err != nil {
		workflow.GetLogger(ctx).Info("gc failed", "duration", took, "error", err)
		return
	}
	count := func(outcome string) (vms, isos int) {
		for _, v := range res.VMs {
			if v.Outcome == outcome {
				vms++
			}
		}
		for _, i := range res.ISOs {
			if i.Outcome == outcome {
				isos++
			}
		}
		return vms, isos
	}
	foundVMs, foundISOs := count(GarbageFound)
	deletedVMs, deletedISOs := count(GarbageDeleted)
	failedVMs, failedISOs := count(GarbageFailed)
	workflow.GetLogger(ctx).Info("gc completed", "dryRun", res.DryRun, "duration", took,
		"vmsFound", foundVMs, "isosFound", foundISOs, "vmsDeleted", deletedVMs, "isosDeleted", deletedISOs,
		"vmsFailed", failedVMs, "isosFailed", failedISOs)
}

type collector struct {
	ctx workflow.Context
	s   settings
	t   *tracker
	in  CollectGarbageInput
	// cutoff is the time before which a VM or ISO must have been made to be collected.
	cutoff time.Time
}

// find lists the garbage, each piece GarbageFound, or GarbageSkipped with the reason.
func (g *collector) find() (CollectGarbageResult, error) {
	res := CollectGarbageResult{DryRun: g.in.DryRun, Grace: g.in.Grace, VMs: []GarbageVM{}, ISOs: []GarbageISO{}}
	marked, resources, err := listMarked(g.ctx, g.s)
	if err != nil {
		return res, err
	}
	res.Unreadable = marked.Unreadable
	isos, err := g.seedISOs()
	if err != nil {
		return res, err
	}
	// A UID with a VM younger than the grace period was created again lately: none of its VMs
	// is taken.
	young := make(map[string]bool)
	for _, p := range marked.Proxies {
		if p.CreatedAt.After(g.cutoff) {
			young[p.UID] = true
		}
	}
	now := workflow.Now(g.ctx)
	creating := make(map[string]bool)
	for _, p := range marked.Proxies {
		if slices.Contains(g.in.Keep, p.UID) {
			continue
		}
		v := GarbageVM{UID: p.UID, VMID: p.VMID, Node: p.Node, Name: p.Name, Outcome: GarbageFound}
		if young[p.UID] {
			v.Outcome, v.Detail, v.Age = GarbageSkipped, "younger than the grace period", now.Sub(p.CreatedAt)
			if !p.CreatedAt.After(g.cutoff) {
				v.Detail = "its UID has a VM younger than the grace period"
			}
			res.YoungVMs = append(res.YoungVMs, v)
			continue
		}
		if p.UID == "" {
			v.Outcome, v.Detail = GarbageSkipped, "its mark carries no UID: delete it by hand"
			res.VMs = append(res.VMs, v)
			continue
		}
		runs, asked := creating[p.UID]
		if !asked {
			if runs, err = g.createRuns(p.UID); err != nil {
				return res, err
			}
			creating[p.UID] = runs
		}
		if runs {
			v.Outcome, v.Detail = GarbageSkipped, CreateWorkflowID(p.UID)+" runs"
		}
		res.VMs = append(res.VMs, v)
	}
	owners := seedOwners(marked, resources)
	for _, iso := range isos {
		switch name, _ := proxy.SeedISOOwner(iso.VolID); {
		case owners[name]:
		case iso.CreatedAt.After(g.cutoff):
			iso.Outcome, iso.Detail, iso.Age = GarbageSkipped, "younger than the grace period", now.Sub(iso.CreatedAt)
			res.YoungISOs = append(res.YoungISOs, iso)
		default:
			res.ISOs = append(res.ISOs, iso)
		}
	}
	return res, nil
}

// seedISOs lists the seed ISOs on every configured node.
func (g *collector) seedISOs() ([]GarbageISO, error) {
	var a *activities.Activities
	var out []GarbageISO
	for _, node := range g.s.Nodes {
		summary := fmt.Sprintf("list ISOs on storage %s on node %s", g.s.ISOStorage, node)
		g.t.step(summary)
		var vols []pve.StorageVolume
		err := execute(g.ctx, g.s.readOptions(summary), a.StorageContent,
			activities.StorageContentRequest{StorageRef: activities.StorageRef{Node: node, Storage: g.s.ISOStorage}, Content: "iso"}).Get(g.ctx, &vols)
		if err != nil {
			return nil, fail(summary, err)
		}
		for _, v := range vols {
			created := time.Unix(v.CTime, 0).UTC()
			if _, seed := proxy.SeedISOOwner(v.VolID); !seed {
				continue
			}
			out = append(out, GarbageISO{VolID: v.VolID, Node: node, Storage: g.s.ISOStorage, CreatedAt: created, Outcome: GarbageFound})
		}
	}
	return out, nil
}

// seedOwners are the names whose seed ISOs have a VM: every VM's name in cluster resources, and
// for each marked VM the name in its config (which cluster resources may not show yet) and its
// UID's default name (a proxy renamed since).
func seedOwners(marked ListProxiesResult, resources []pve.VMResource) map[string]bool {
	owners := make(map[string]bool)
	for _, r := range resources {
		owners[r.Name] = true
	}
	for _, p := range marked.Proxies {
		owners[p.Name] = true
		if p.UID != "" {
			owners[proxy.NameFromUID(p.UID)] = true
		}
	}
	return owners
}

// createRuns reports whether the CreateProxy of uid runs, as Temporal describes it.
func (g *collector) createRuns(uid string) (bool, error) {
	var a *activities.Activities
	step := "describe workflow " + CreateWorkflowID(uid)
	g.t.step(step)
	var run activities.RunInfo
	if err := execute(g.ctx, g.s.readOptions(step), a.DescribeRun, activities.DescribeRunRequest{WorkflowID: CreateWorkflowID(uid)}).Get(g.ctx, &run); err != nil {
		return false, fail(step, err)
	}
	return run.Running, nil
}

// deleteVMs deletes the VMs found, through the Proxy entities of their UIDs, listConcurrency
// UIDs at a time. A delete goes on in its entity when the collection is stopped: a half-done
// delete would be garbage of its own.
func (g *collector) deleteVMs(vms []GarbageVM) error {
	var uids []string
	for _, v := range vms {
		if v.Outcome == GarbageFound && !slices.Contains(uids, v.UID) {
			uids = append(uids, v.UID)
		}
	}
	var a *activities.Activities
	for start := 0; start < len(uids); start += listConcurrency {
		batch := uids[start:min(start+listConcurrency, len(uids))]
		g.t.step(fmt.Sprintf("delete the VMs of %d proxies", len(batch)))
		deletes := make([]workflow.Future, len(batch))
		for i, uid := range batch {
			req := activities.ProxyDelete{UID: uid, ProviderID: providerIDOf(vms, uid), RequestID: workflow.GetInfo(g.ctx).WorkflowExecution.ID + "/" + uid}
			deletes[i] = execute(g.ctx, g.s.requestOptions(g.s.deleteBudget(), "delete proxy "+uid), a.RequestDelete, req)
		}
		for i, uid := range batch {
			var out activities.ProxyDeleteOutcome
			err := deletes[i].Get(g.ctx, &out)
			if temporal.IsCanceledError(err) {
				return err
			}
			for j := range vms {
				if vms[j].UID == uid {
					vms[j].Outcome, vms[j].Detail = vmOutcome(vms[j], out, err)
				}
			}
		}
	}
	return nil
}

// providerIDOf is the provider ID of the first VM of uid, which names the proxy's VM for its
// delete.
func providerIDOf(vms []GarbageVM, uid string) string {
	i := slices.IndexFunc(vms, func(v GarbageVM) bool { return v.UID == uid })
	return proxy.FormatProviderID(vms[i].VMID, vms[i].Name)
}

// vmOutcome is what became of VM v, given the delete of its UID: the entity refused it, or its
// delete failed or left v alone.
func vmOutcome(v GarbageVM, out activities.ProxyDeleteOutcome, err error) (outcome, detail string) {
	switch {
	case err != nil:
		return GarbageFailed, failureText("delete of proxy "+v.UID, err)
	case slices.ContainsFunc(out.Destroyed, func(r activities.VMRef) bool { return r.VMID == v.VMID }):
		return GarbageDeleted, ""
	}
	return GarbageSkipped, "the delete of " + ProxyWorkflowID(v.UID) + " left it alone: it no longer carries the mark of " + v.UID
}

// deleteISOs deletes the seed ISOs found, once a fresh look finds still no VM of their names:
// a create of the name may have cloned its VM since they were listed.
func (g *collector) deleteISOs(isos []GarbageISO) error {
	if len(isos) == 0 {
		return nil
	}
	marked, resources, err := listMarked(g.ctx, g.s)
	if err != nil {
		return err
	}
	owners := seedOwners(marked, resources)
	var a *activities.Activities
	for i := range isos {
		iso := &isos[i]
		if name, _ := proxy.SeedISOOwner(iso.VolID); owners[name] {
			iso.Outcome, iso.Detail = GarbageSkipped, "VM "+name+" appeared since the ISO was listed"
			continue
		}
		summary := fmt.Sprintf("delete seed ISO %s on %s", iso.VolID, iso.Node)
		var upid pve.UPID
		err := execute(g.ctx, g.s.callOptions(summary), a.DeleteVolume,
			activities.DeleteVolumeRequest{StorageRef: activities.StorageRef{Node: iso.Node, Storage: iso.Storage}, VolID: iso.VolID}).Get(g.ctx, &upid)
		switch {
		case isType(err, activities.ErrNotFound):
			err = nil
		case err != nil:
			err = fail(summary, err)
		case upid != "":
			if err = waitTask(g.ctx, g.s, g.t, upid, g.s.Budgets.Request, "wait for "+summary); err != nil {
				err = fail("wait for "+summary, err)
			}
		}
		switch {
		case temporal.IsCanceledError(err):
			return err
		case err != nil:
			iso.Outcome, iso.Detail = GarbageFailed, err.Error()
		default:
			iso.Outcome = GarbageDeleted
		}
	}
	return nil
}
