package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/addresspool"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/reads"
)

// CollectGarbageInput is the input of CollectGarbage.
type CollectGarbageInput struct {
	// Keep are the UIDs of the proxies the operator keeps: every other UID's VMs are garbage.
	Keep []string `json:"keep"`
	// KeepNone says that an empty Keep is meant, and every proxy is garbage. Without it an empty
	// Keep is refused: a caller that lost its list must not delete every proxy.
	KeepNone bool `json:"keepNone,omitempty"`
	// DryRun finds the garbage and deletes nothing, and reports what it would restore and free
	// in the address pools without changing them.
	DryRun bool `json:"dryRun,omitempty"`
	// Grace is how old a VM (by the creation time in its mark), a seed ISO (by its ctime) or
	// an address pool's allocation (by when it was made or last asked for) must be to be
	// collected; zero is DefaultGrace. For ISOs it covers the moments in which a create's VM
	// and seed ISO do not yet show together; for VMs, a create that ends between the operator
	// reading its kept set and this run listing the cluster; for allocations, a create that
	// allocated before its clone showed.
	Grace time.Duration `json:"grace,omitempty"`
}

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

// GarbageISO is a seed ISO that no VM refers to, of a UID no VM carries and the operator does
// not keep.
type GarbageISO = reads.GarbageVolume

// GarbagePool is what a collection did to the allocations of one configured address pool,
// or in a dry run would do: restored from the VMs' marks, freed, or left as conflicts.
type GarbagePool struct {
	Pool string `json:"pool"`
	// Restored are the addresses VMs hold by their marks that the pool had no allocation for,
	// allocated to their UIDs again.
	Restored []activities.AddressHolding `json:"restored,omitempty"`
	// Freed are allocations older than the grace of UIDs with no VM and no running entity.
	Freed []activities.AddressHolding `json:"freed,omitempty"`
	// Conflicts are addresses VMs hold by their marks that the pool gives to another UID, or
	// whose UIDs hold others in the pool: left as they are, for a person.
	Conflicts []activities.AddressConflict `json:"conflicts,omitempty"`
	// Kept are allocations older than the grace of UIDs with no VM, left: Detail says why.
	Kept []KeptAddresses `json:"kept,omitempty"`
	// Error is why the pool could not be reconciled, or not wholly.
	Error string `json:"error,omitempty"`
}

// KeptAddresses is an allocation no VM holds that a collection left, and why.
type KeptAddresses struct {
	activities.AddressHolding
	Detail string `json:"detail"`
}

// CollectGarbageResult is what CollectGarbage returns.
type CollectGarbageResult struct {
	DryRun bool         `json:"dryRun"`
	VMs    []GarbageVM  `json:"vms"`
	ISOs   []GarbageISO `json:"isos"`
	// Unreadable are the VMIDs of VMs whose config could not be read: they may be proxies,
	// and are left alone, and as they may use any seed ISO, no ISO is taken (each is
	// GarbageSkipped, saying so).
	Unreadable []int `json:"unreadable,omitempty"`
	// Grace is the grace period the run applied.
	Grace time.Duration `json:"grace"`
	// YoungVMs and YoungISOs would be garbage but are younger than the grace period, and are
	// left alone (GarbageSkipped), each with its age: the VMs of a UID with a young VM, and
	// young seed ISOs that would be orphans.
	YoungVMs  []GarbageVM  `json:"youngVMs,omitempty"`
	YoungISOs []GarbageISO `json:"youngISOs,omitempty"`
	// Pools are the configured address pools, each reconciled with the VMs' marks.
	Pools []GarbagePool `json:"pools,omitempty"`
	// Disks are the orphan disks of VMIDs in pveflow's range, older than the grace; YoungDisks
	// would be, but are younger (GarbageSkipped, each with its age).
	Disks      []reads.GarbageDisk `json:"disks,omitempty"`
	YoungDisks []reads.GarbageDisk `json:"youngDisks,omitempty"`
	// UnlistedStorages are the storages whose disks could not be listed, each with why.
	UnlistedStorages []string `json:"unlistedStorages,omitempty"`
	// CloneLocks are pveflow's VMs that PVE shows with "lock: clone": the stale ones, with the
	// command that clears them, are for the operator (an API token cannot clear a lock).
	CloneLocks []reads.CloneLock `json:"cloneLocks,omitempty"`
}

// Failed reports whether deleting any piece of garbage, or reconciling any address pool,
// failed.
func (r CollectGarbageResult) Failed() bool {
	return slices.ContainsFunc(r.VMs, func(v GarbageVM) bool { return v.Outcome == reads.GarbageFailed }) ||
		slices.ContainsFunc(r.ISOs, func(i GarbageISO) bool { return i.Outcome == reads.GarbageFailed }) ||
		slices.ContainsFunc(r.Disks, func(d reads.GarbageDisk) bool { return d.Outcome == reads.GarbageFailed }) ||
		slices.ContainsFunc(r.Pools, func(p GarbagePool) bool { return p.Error != "" })
}

// CollectGarbage finds, and unless DryRun deletes, what pveflow left on the cluster that nothing
// needs any more:
//   - VMs with pveflow's mark whose UID is not in Keep, through the Proxy entity of that UID:
//     RequestDelete asks it for the proxy to be absent, and it runs its DeleteProxy one
//     operation at a time with the proxy's other requests, so only VMs with the UID's mark go,
//     with the UID's seed ISO. A UID whose create runs is skipped: it is not garbage yet:
//     DescribeRun asks Temporal. The request carries the run's start: the entity refuses it
//     when a create or change of the UID was accepted since, as the proxy is wanted again.
//   - orphan seed ISOs (proxy.SeedISOOwner): ones that no VM's config refers to, named after
//     no UID that a VM carries or Keep holds, and no VM's name; none while a VM's config
//     cannot be read. They go with the DeleteVolume call, after the VMs, each only if a fresh
//     listing shows it as it was listed: a create of its proxy uploads it anew.
//   - address pools' allocations (reconcilePools): each configured pool is sent the addresses
//     the marked VMs hold in it, and restores those it lost; an allocation of a UID with no VM,
//     older than the grace, is freed when the UID is not kept, its entity does not run, and
//     every VM's config could be read. This comes before the deletes, on the same reading of
//     the cluster: the deletes free their proxies' addresses themselves.
//   - orphan disks (leftoverFinder.find): disk images of a VMID in proxmox.vmidRange that no VM
//     has, older than the grace; each goes with DeleteVolume, after the ISOs, only if a fresh
//     listing shows it as it was listed and its VMID still has no VM.
//   - VMs of pveflow's with "lock: clone" are reported in CloneLocks; a stale one (no clone
//     task, past the grace) with the command that clears it. The token cannot clear it, and its
//     VM is left until then (GarbageSkipped): its destroy would meet the lock.
//
// Every VM's config is read for the mark, whatever its name and tags. Nothing younger than the
// grace period is taken. Everything is listed before anything is deleted: a list call failing
// fails the run, and deletes nothing. A deletion that fails is reported in the result, and the
// run goes on with the others.
func (w *Workflows) CollectGarbage(ctx workflow.Context, in CollectGarbageInput) (res CollectGarbageResult, err error) {
	defer func() { logCollection(ctx, res, err) }()
	switch {
	case len(in.Keep) == 0 && !in.KeepNone:
		return CollectGarbageResult{}, core.Permanentf("collect garbage: the kept set is empty; set KeepNone to collect every proxy")
	case in.Grace < 0:
		return CollectGarbageResult{}, core.Permanentf("collect garbage: grace period %s is negative", in.Grace)
	case in.Grace == 0:
		in.Grace = reads.DefaultGrace
	}
	var s core.Settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return core.SettingsOf(w.Config) }).Get(&s); err != nil {
		return CollectGarbageResult{}, err
	}
	g := &collector{ctx: ctx, s: s, t: &core.Tracker{Ctx: ctx}, in: in, cutoff: workflow.Now(ctx).Add(-in.Grace)}
	var c reads.Cluster
	res, c, err = g.find()
	if err != nil {
		return res, err
	}
	if res.Pools, err = g.reconcilePools(c); err != nil || in.DryRun {
		return res, err
	}
	if err := g.deleteVMs(res.VMs); err != nil {
		return CollectGarbageResult{}, err
	}
	if err := g.deleteISOs(res.ISOs); err != nil {
		return CollectGarbageResult{}, err
	}
	if err := g.deleteDisks(res.Disks); err != nil {
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
	count := func(outcome string) (vms, isos, disks int) {
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
		for _, d := range res.Disks {
			if d.Outcome == outcome {
				disks++
			}
		}
		return vms, isos, disks
	}
	foundVMs, foundISOs, foundDisks := count(reads.GarbageFound)
	deletedVMs, deletedISOs, deletedDisks := count(reads.GarbageDeleted)
	failedVMs, failedISOs, failedDisks := count(reads.GarbageFailed)
	staleLocks := 0
	for _, l := range res.CloneLocks {
		if l.Stale {
			staleLocks++
		}
	}
	var restored, freed, conflicts int
	for _, p := range res.Pools {
		restored, freed, conflicts = restored+len(p.Restored), freed+len(p.Freed), conflicts+len(p.Conflicts)
	}
	workflow.GetLogger(ctx).Info("gc completed", "dryRun", res.DryRun, "duration", took,
		"vmsFound", foundVMs, "isosFound", foundISOs, "vmsDeleted", deletedVMs, "isosDeleted", deletedISOs,
		"vmsFailed", failedVMs, "isosFailed", failedISOs,
		"disksFound", foundDisks, "disksDeleted", deletedDisks, "disksFailed", failedDisks, "staleCloneLocks", staleLocks,
		"addressesRestored", restored, "addressesFreed", freed, "addressConflicts", conflicts)
}

// lockedDetail starts the Detail of a VM left for its stale clone lock.
const lockedDetail = "locked by a clone no task runs: "

type collector struct {
	ctx workflow.Context
	s   core.Settings
	t   *core.Tracker
	in  CollectGarbageInput
	// cutoff is the time before which a VM, ISO or allocation must have been made to be
	// collected.
	cutoff time.Time
}

// find lists the garbage, each piece GarbageFound, or GarbageSkipped with the reason, and
// returns the reading of the cluster it was found in.
func (g *collector) find() (CollectGarbageResult, reads.Cluster, error) {
	res := CollectGarbageResult{DryRun: g.in.DryRun, Grace: g.in.Grace, VMs: []GarbageVM{}, ISOs: []GarbageISO{}}
	c, err := reads.ReadCluster(g.ctx, g.s)
	if err != nil {
		return res, c, err
	}
	res.Unreadable = c.Unreadable
	isos, err := g.seedISOs(g.s.Nodes...)
	if err != nil {
		return res, c, err
	}
	// A UID with a VM younger than the grace period was created again lately: none of its VMs
	// is taken.
	young := make(map[string]bool)
	for _, p := range c.Proxies {
		if p.CreatedAt.After(g.cutoff) {
			young[p.UID] = true
		}
	}
	lf := reads.LeftoverFinder{Ctx: g.ctx, Settings: g.s, Resources: c.Resources, Cutoff: g.cutoff, Step: g.t.Step}
	left, err := lf.Find()
	if err != nil {
		return res, c, err
	}
	res.Disks, res.YoungDisks, res.UnlistedStorages, res.CloneLocks = left.Disks, left.YoungDisks, left.Unlisted, left.CloneLocks
	now := workflow.Now(g.ctx)
	creating := make(map[string]bool)
	for _, p := range c.Proxies {
		if slices.Contains(g.in.Keep, p.UID) {
			continue
		}
		v := GarbageVM{UID: p.UID, VMID: p.VMID, Node: p.Node, Name: p.Name, Outcome: reads.GarbageFound}
		if i := slices.IndexFunc(res.CloneLocks, func(l reads.CloneLock) bool { return l.VMID == p.VMID }); i >= 0 && res.CloneLocks[i].Stale {
			v.Outcome, v.Detail = reads.GarbageSkipped, lockedDetail+res.CloneLocks[i].Detail
			res.VMs = append(res.VMs, v)
			continue
		}
		if young[p.UID] {
			v.Outcome, v.Detail, v.Age = reads.GarbageSkipped, "younger than the grace period", now.Sub(p.CreatedAt)
			if !p.CreatedAt.After(g.cutoff) {
				v.Detail = "its UID has a VM younger than the grace period"
			}
			res.YoungVMs = append(res.YoungVMs, v)
			continue
		}
		if p.UID == "" {
			v.Outcome, v.Detail = reads.GarbageSkipped, "its mark carries no UID: delete it by hand"
			res.VMs = append(res.VMs, v)
			continue
		}
		runs, asked := creating[p.UID]
		if !asked {
			if runs, err = g.runs(core.CreateWorkflowID(p.UID)); err != nil {
				return res, c, err
			}
			creating[p.UID] = runs
		}
		if runs {
			v.Outcome, v.Detail = reads.GarbageSkipped, core.CreateWorkflowID(p.UID)+" runs"
		}
		res.VMs = append(res.VMs, v)
	}
	// The delete of a UID destroys every VM with its mark: one that a stale clone lock holds
	// would fail it, so the UID's other VMs wait for the unlock too.
	for _, locked := range res.VMs {
		if !strings.HasPrefix(locked.Detail, lockedDetail) {
			continue
		}
		for i := range res.VMs {
			if v := &res.VMs[i]; v.UID == locked.UID && v.Outcome == reads.GarbageFound {
				v.Outcome, v.Detail = reads.GarbageSkipped, fmt.Sprintf("VM %d of its UID is %s", locked.VMID, locked.Detail)
			}
		}
	}
	owners := g.seedOwners(c)
	for _, iso := range isos {
		switch name, _ := proxy.SeedISOOwner(iso.VolID); {
		case owners[name] || c.ISOs[iso.VolID]:
		case iso.CreatedAt.After(g.cutoff):
			iso.SkipYoung(now)
			res.YoungISOs = append(res.YoungISOs, iso)
		case len(c.Unreadable) > 0:
			// An unreadable VM may refer to it, or carry its UID: failing safe keeps it.
			iso.Outcome, iso.Detail = reads.GarbageSkipped, fmt.Sprintf("the config of VM(s) %v could not be read: they may use it", c.Unreadable)
			res.ISOs = append(res.ISOs, iso)
		default:
			res.ISOs = append(res.ISOs, iso)
		}
	}
	return res, c, nil
}

// seedISOs lists the seed ISOs on nodes.
func (g *collector) seedISOs(nodes ...string) ([]GarbageISO, error) {
	var a *activities.Activities
	var out []GarbageISO
	for _, node := range nodes {
		summary := fmt.Sprintf("list ISOs on storage %s on node %s", g.s.ISOStorage, node)
		g.t.Step(summary)
		var vols []pve.StorageVolume
		err := core.Execute(g.ctx, g.s.ReadOptions(summary), a.StorageContent,
			activities.StorageContentRequest{StorageRef: activities.StorageRef{Node: node, Storage: g.s.ISOStorage}, Content: "iso"}).Get(g.ctx, &vols)
		if err != nil {
			return nil, core.Fail(summary, err)
		}
		for _, v := range vols {
			if _, seed := proxy.SeedISOOwner(v.VolID); seed {
				out = append(out, reads.FoundVolume(v, node, g.s.ISOStorage))
			}
		}
	}
	return out, nil
}

// seedOwners are the names whose seed ISOs are not orphans: the default name of every UID that
// a VM carries (a proxy with a name of its own too) or that the operator keeps (its VM may be
// one this run could not read, or gone for a moment: its entity makes it again, with this
// ISO), and every VM's name.
func (g *collector) seedOwners(c reads.Cluster) map[string]bool {
	owners := maps.Clone(c.Names)
	for _, p := range c.Proxies {
		if p.UID != "" {
			owners[proxy.NameFromUID(p.UID)] = true
		}
	}
	for _, uid := range g.in.Keep {
		owners[proxy.NameFromUID(uid)] = true
	}
	return owners
}

// runs reports whether workflowID runs, as Temporal describes it.
func (g *collector) runs(workflowID string) (bool, error) {
	var a *activities.Activities
	step := "describe workflow " + workflowID
	g.t.Step(step)
	var run activities.RunInfo
	if err := core.Execute(g.ctx, g.s.ReadOptions(step), a.DescribeRun, activities.DescribeRunRequest{WorkflowID: workflowID}).Get(g.ctx, &run); err != nil {
		return false, core.Fail(step, err)
	}
	return run.Running, nil
}

// reconcilePools brings each configured address pool's allocations back to what the VMs hold
// by their marks (c), through its reconcile Update, in two steps. The first sends the pool the
// addresses the VMs hold in it (heldAddresses): it restores the allocations it lost and
// reports conflicts, and answers the allocations older than the grace that no VM in it holds.
// Of those, the ones of a UID with no VM at all, not kept, and whose entity does not run (an
// entity runs while its proxy is present, or being made) are freed by the second, which frees
// only what is still older than the grace: a create that allocated or asked again since this
// run began keeps its addresses. Nothing is freed while a VM's config cannot be read: it may
// hold them. A dry run makes the first step as a dry run, and reports what the second would
// free without making it.
//
// A pool that fails to answer is reported in its GarbagePool, and the others go on.
func (g *collector) reconcilePools(c reads.Cluster) ([]GarbagePool, error) {
	held := heldAddresses(g.s, c)
	withVM := make(map[string]bool, len(c.Proxies))
	for _, p := range c.Proxies {
		withVM[p.UID] = true
	}
	entityRuns := make(map[string]error) // by UID, as runningEntity answers: nil when it does not run
	var out []GarbagePool
	for _, pool := range g.s.AddressPoolNames {
		gp := GarbagePool{Pool: pool}
		rng := g.s.AddressPools[pool]
		found, err := g.reconcile(pool, activities.AddressReconcile{Range: rng, Held: held[pool], Before: g.cutoff, DryRun: g.in.DryRun})
		if temporal.IsCanceledError(err) {
			return nil, err
		}
		if err != nil {
			gp.Error = err.Error()
			out = append(out, gp)
			continue
		}
		gp.Restored, gp.Conflicts = found.Restored, found.Conflicts
		var free []string
		var freeable []activities.AddressHolding
		for _, a := range found.Unheld {
			if withVM[a.UID] {
				continue // its VM's mark records no addresses of this pool: made before marks did, or not yet seeded
			}
			detail := ""
			switch {
			case len(c.Unreadable) > 0:
				detail = fmt.Sprintf("the config of VM(s) %v could not be read: they may hold it", c.Unreadable)
			case slices.Contains(g.in.Keep, a.UID):
				detail = "its proxy is kept"
			default:
				err, asked := entityRuns[a.UID]
				if !asked {
					err = g.runningEntity(a.UID)
					entityRuns[a.UID] = err
				}
				if temporal.IsCanceledError(err) {
					return nil, err
				}
				if err != nil {
					detail = err.Error()
				}
			}
			if detail != "" {
				gp.Kept = append(gp.Kept, KeptAddresses{AddressHolding: a, Detail: detail})
				continue
			}
			free, freeable = append(free, a.UID), append(freeable, a)
		}
		switch {
		case len(free) == 0:
		case g.in.DryRun:
			gp.Freed = freeable
		default:
			freed, err := g.reconcile(pool, activities.AddressReconcile{Range: rng, Free: free, Before: g.cutoff})
			if temporal.IsCanceledError(err) {
				return nil, err
			}
			if err != nil {
				gp.Error = err.Error()
			}
			gp.Freed = freed.Freed
		}
		out = append(out, gp)
	}
	return out, nil
}

// runningEntity is why the entity of uid keeps its addresses: it runs, or Temporal could not
// say; nil when it does not run.
func (g *collector) runningEntity(uid string) error {
	runs, err := g.runs(core.ProxyWorkflowID(uid))
	switch {
	case err != nil:
		return err
	case runs:
		return errors.New(core.ProxyWorkflowID(uid) + " runs")
	}
	return nil
}

// reconcile sends pool the reconcile Update req. A pool whose workflow does not run, which the
// Update is not sent to when it has nothing to restore (req is a dry run, or holds nothing),
// answers what an empty pool would.
func (g *collector) reconcile(pool string, req activities.AddressReconcile) (activities.Reconciled, error) {
	var a *activities.Activities
	step := "reconcile address pool " + pool
	g.t.Step(step)
	var res activities.Reconciled
	err := core.Execute(g.ctx, g.s.CallOptions(step), a.ReconcileAddresses,
		activities.ReconcileRequest{TaskQueue: workflow.GetInfo(g.ctx).TaskQueueName, Pool: pool, AddressReconcile: req}).Get(g.ctx, &res)
	if core.IsType(err, activities.ErrNotFound) {
		_, res = addresspool.Reconciled(addresspool.AddressPoolState{Pool: pool}, workflow.Now(g.ctx), req)
		return res, nil
	}
	if err != nil {
		return res, core.Fail(step, err)
	}
	return res, nil
}

// heldAddresses are the addresses the marked VMs of c hold in each configured pool, by pool:
// the addresses each mark's spec records, in the pool it names, or, when the config has no
// pool of that name (the pool was renamed), in the one whose range holds them. A mark without
// a spec, without a pool, or with a UID that is not one holds none.
func heldAddresses(s core.Settings, c reads.Cluster) map[string][]activities.AddressHolding {
	pools := config.Proxmox{AddressPools: s.AddressPools}
	held := make(map[string][]activities.AddressHolding)
	for _, p := range c.Proxies {
		spec, ok := c.Specs[p.VMID]
		if !ok || spec.AddressPool == "" || proxy.ValidateUID(p.UID) != nil || spec.Addresses.IPv4 == "" && spec.Addresses.IPv6 == "" {
			continue
		}
		pool := spec.AddressPool
		if _, configured := s.AddressPools[pool]; !configured {
			pool = cmp.Or(pools.AddressPoolHolding(spec.Addresses.IPv4), pools.AddressPoolHolding(spec.Addresses.IPv6))
		}
		if pool != "" {
			held[pool] = append(held[pool], activities.AddressHolding{UID: p.UID, IPv4: spec.Addresses.IPv4, IPv6: spec.Addresses.IPv6})
		}
	}
	return held
}

// deleteVMs deletes the VMs found, through the Proxy entities of their UIDs, listConcurrency
// UIDs at a time. A delete runs in its entity, not in this run: once the entity has accepted
// it, it goes on when the collection is cancelled or terminated (RequestDelete's attempt is
// cancelled, the Update it sent is not), so no delete is left half-done.
//
// Each request carries the run's start as UnlessWantedSince: the kept set was read just before
// it. A create or change of the UID the entity accepted after that (the UID was created again
// since this run looked) makes the entity refuse the delete, and one it accepts after the
// delete waits for it (or supersedes it, if the delete has not begun): either way, nothing the
// operator asked for since is destroyed.
func (g *collector) deleteVMs(vms []GarbageVM) error {
	var uids []string
	for _, v := range vms {
		if v.Outcome == reads.GarbageFound && !slices.Contains(uids, v.UID) {
			uids = append(uids, v.UID)
		}
	}
	var a *activities.Activities
	for start := 0; start < len(uids); start += reads.ListConcurrency {
		batch := uids[start:min(start+reads.ListConcurrency, len(uids))]
		g.t.Step(fmt.Sprintf("delete the VMs of %d proxies", len(batch)))
		deletes := make([]workflow.Future, len(batch))
		for i, uid := range batch {
			info := workflow.GetInfo(g.ctx)
			req := activities.ProxyDelete{UID: uid, RequestID: info.WorkflowExecution.ID + "/" + uid,
				UnlessWantedSince: info.WorkflowStartTime}
			opts := requestOptions(g.s, deleteBudget(g.s), "delete proxy "+uid)
			// A cancelled collection ends at once: the delete it asked for goes on in the entity.
			opts.WaitForCancellation = false
			deletes[i] = core.Execute(g.ctx, opts, a.RequestDelete, req)
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

// vmOutcome is what became of VM v, given the delete of its UID: the entity refused it, or its
// delete failed or left v alone. A delete superseded or refused because the UID is wanted
// again (a create of it since this run looked) leaves v to its proxy: skipped, not failed.
func vmOutcome(v GarbageVM, out activities.ProxyDeleteOutcome, err error) (outcome, detail string) {
	switch {
	case core.IsType(err, activities.ErrSuperseded):
		return reads.GarbageSkipped, core.FailureText("delete of proxy "+v.UID, err)
	case err != nil:
		return reads.GarbageFailed, core.FailureText("delete of proxy "+v.UID, err)
	case slices.ContainsFunc(out.Destroyed, func(r activities.VMRef) bool { return r.VMID == v.VMID }):
		return reads.GarbageDeleted, ""
	}
	return reads.GarbageSkipped, "the delete of " + core.ProxyWorkflowID(v.UID) + " left it alone: it no longer carries the mark of " + v.UID
}

// deleteISOs deletes the seed ISOs found. The UID of an orphan ISO cannot be read back from
// its name (a hash of it), so its delete cannot go through the UID's entity as a VM's does:
// instead each is deleted only while a fresh listing of its storage shows it with the ctime it
// was listed with. A create of its proxy since would have uploaded it anew (PVE overwrites the
// file, with a new ctime), and before that cloned the VM: an ISO deleted before that upload is
// made again by it. What remains is the moment between the fresh listing and the delete.
func (g *collector) deleteISOs(isos []GarbageISO) error {
	for i := range isos {
		iso := &isos[i]
		if iso.Outcome != reads.GarbageFound {
			continue
		}
		there, err := g.stillThere(iso, "iso", fmt.Sprintf("list ISOs on storage %s on node %s", iso.Storage, iso.Node), func(at time.Time) string {
			return fmt.Sprintf("uploaded again at %s, since it was listed: its proxy was created again", at.Format(time.RFC3339))
		})
		if !there {
			if err != nil {
				return err
			}
			continue
		}
		summary := fmt.Sprintf("delete seed ISO %s on %s", iso.VolID, iso.Node)
		if iso.Outcome, iso.Detail, err = g.deleteVolume(activities.StorageRef{Node: iso.Node, Storage: iso.Storage}, iso.VolID, summary); err != nil {
			return err
		}
	}
	return nil
}

// stillThere says whether v may still be deleted: a fresh listing of the content of its storage
// (summary) shows it with the ctime it was listed with. When not, v's outcome says why: the
// listing failed, v is gone, or it was made again since, which madeAgain says given its new
// ctime. Only a cancel is returned as an error.
func (g *collector) stillThere(v *reads.GarbageVolume, content, summary string, madeAgain func(time.Time) string) (bool, error) {
	var a *activities.Activities
	g.t.Step(summary)
	var vols []pve.StorageVolume
	err := core.Execute(g.ctx, g.s.ReadOptions(summary), a.StorageContent,
		activities.StorageContentRequest{StorageRef: activities.StorageRef{Node: v.Node, Storage: v.Storage}, Content: content}).Get(g.ctx, &vols)
	j := slices.IndexFunc(vols, func(x pve.StorageVolume) bool { return x.VolID == v.VolID })
	switch {
	case temporal.IsCanceledError(err):
		return false, err
	case err != nil:
		v.Outcome, v.Detail = reads.GarbageFailed, core.FailureText(summary, err)
	case j < 0:
		v.Outcome, v.Detail = reads.GarbageSkipped, "gone since it was listed"
	case !time.Unix(vols[j].CTime, 0).UTC().Equal(v.CreatedAt):
		v.Outcome, v.Detail = reads.GarbageSkipped, madeAgain(time.Unix(vols[j].CTime, 0).UTC())
	default:
		return true, nil
	}
	return false, nil
}

// deleteVolume deletes the volume volID of ref and waits for its task, and says what became of
// it: a volume already gone counts as deleted. Only a cancel is returned as an error.
func (g *collector) deleteVolume(ref activities.StorageRef, volID, summary string) (outcome, detail string, err error) {
	var a *activities.Activities
	var upid pve.UPID
	err = core.Call(g.ctx, g.s.CallOptions(summary), a.DeleteVolume,
		activities.DeleteVolumeRequest{StorageRef: ref, VolID: volID}).Get(g.ctx, &upid)
	switch {
	case core.IsType(err, activities.ErrNotFound):
		err = nil
	case err != nil:
		err = core.Fail(summary, err)
	case upid != "":
		if err = core.WaitTask(g.ctx, g.s, g.t, core.LocalLooksFirst, upid, g.s.Budgets.Request, "wait for "+summary); err != nil {
			err = core.Fail("wait for "+summary, err)
		}
	}
	switch {
	case temporal.IsCanceledError(err):
		return "", "", err
	case err != nil:
		return reads.GarbageFailed, err.Error(), nil
	}
	return reads.GarbageDeleted, "", nil
}

// deleteDisks deletes the orphan disks found. Each goes only while a fresh listing of its
// storage shows it with the ctime it was listed with, and the config of its VMID still reads
// as absent on every configured node: a clone onto that VMID since would have written its
// config first. A disk already gone is no failure.
func (g *collector) deleteDisks(disks []reads.GarbageDisk) error {
	lf := reads.LeftoverFinder{Ctx: g.ctx, Settings: g.s, Cutoff: g.cutoff, Step: g.t.Step}
	for i := range disks {
		d := &disks[i]
		if d.Outcome != reads.GarbageFound {
			continue
		}
		there, err := g.stillThere(&d.GarbageVolume, "images", fmt.Sprintf("list disk images on storage %s on node %s", d.Storage, d.Node), func(time.Time) string {
			return "made again since it was listed: a clone onto VM " + fmt.Sprint(d.VMID) + " allocated it"
		})
		if !there {
			if err != nil {
				return err
			}
			continue
		}
		why, err := lf.NoVM(d.VMID)
		switch {
		case err != nil:
			return err
		case why != "":
			d.Outcome, d.Detail = reads.GarbageSkipped, why
			continue
		}
		summary := fmt.Sprintf("delete orphan disk %s of VM %d on node %s", d.VolID, d.VMID, d.Node)
		g.t.Step(summary)
		if d.Outcome, d.Detail, err = g.deleteVolume(activities.StorageRef{Node: d.Node, Storage: d.Storage}, d.VolID, summary); err != nil {
			return err
		}
	}
	return nil
}
