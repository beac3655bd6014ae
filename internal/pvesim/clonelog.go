package pvesim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// CloneRun is a clone task as the clone log records it.
type CloneRun struct {
	UPID pve.UPID
	// Node is the node the task runs on.
	Node string
	// VMID is the source, NewID the VM the clone creates.
	VMID, NewID int
	// Storages are the IDs of the storages the clone's disks go to, sorted. One that is not
	// Shared is Node's own.
	Storages []string
	// Start is when the task started, End when it stopped: zero while it runs.
	Start, End time.Time
	// ExitStatus is the task's exit status, empty while it runs.
	ExitStatus string
	// Seen is when a TaskStatus call first found the task stopped; zero until one did.
	Seen time.Time
}

// cloneRecord is a clone task in the clone log.
type cloneRecord struct {
	t     *task
	start time.Time
	// copying is when the worker took the new config's flock, from which on it may allocate and
	// copy: at start, unless it waited for another clone of the same VMID, and zero if it never
	// took it.
	copying     time.Time
	vmid, newid int
	stores      []*storage
}

// logClone records clone task t, started at now, whose disks go where disks say.
func (c *Cluster) logClone(t *task, now time.Time, src *vm, p pve.CloneParams, disks []cloneDisk) *cloneRecord {
	rec := &cloneRecord{t: t, start: now, copying: now, vmid: src.id, newid: p.NewID}
	for _, d := range disks {
		if !slices.Contains(rec.stores, d.st) {
			rec.stores = append(rec.stores, d.st)
		}
	}
	c.clones = append(c.clones, rec)
	return rec
}

// CloneRuns lists every clone task, in the order they started. A clone refused by the checks
// before the worker forks started none.
func (c *Cluster) CloneRuns() []CloneRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.advance(now)
	out := make([]CloneRun, 0, len(c.clones))
	for _, rec := range c.clones {
		run := CloneRun{
			UPID:  rec.t.upid,
			Node:  rec.t.info.Node,
			VMID:  rec.vmid,
			NewID: rec.newid,
			Start: rec.start,
			Seen:  rec.t.seen,
		}
		for _, st := range rec.stores {
			run.Storages = append(run.Storages, st.ID)
		}
		slices.Sort(run.Storages)
		if rec.t.done(now) {
			run.End, run.ExitStatus = rec.t.end, rec.t.exit
		}
		out = append(out, run)
	}
	return out
}

// MaxConcurrentClones is the largest number of clone tasks that ran at one moment with a disk
// going to storage as node sees it; a shared storage is the same on every node, so clones from
// all nodes count. A task runs from the moment it holds its new VM's config flock to its end,
// the end excluded, so a clone started the moment another ended does not overlap it; one still
// running counts until now. A clone counts whether it succeeds or fails, but not while it waits
// for the flock of a VMID another clone holds: PVE takes that flock before it touches a storage,
// so a clone made again after its answer was lost, which fails on the first one's flock within
// a second, never loads the storage.
// It panics on a node or storage the cluster does not have: a typo would make a test's bound
// hold for the wrong reason.
func (c *Cluster) MaxConcurrentClones(node, storage string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.advance(now)
	nd := c.nodes[node]
	if nd == nil || nd.storages[storage] == nil {
		panic(fmt.Sprintf("pvesim: node %q has no storage %q (it has %v)", node, storage, storageIDs(nd)))
	}
	st := nd.storages[storage]
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, rec := range c.clones {
		if !slices.Contains(rec.stores, st) {
			continue
		}
		if rec.copying.IsZero() {
			continue
		}
		edges = append(edges, edge{rec.copying, +1})
		if rec.t.done(now) {
			edges = append(edges, edge{rec.t.end, -1})
		}
	}
	// An end comes before a start at the same instant.
	slices.SortStableFunc(edges, func(a, b edge) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta))
	})
	running, most := 0, 0
	for _, e := range edges {
		running += e.delta
		most = max(most, running)
	}
	return most
}

func storageIDs(nd *node) []string {
	if nd == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(nd.storages))
}
