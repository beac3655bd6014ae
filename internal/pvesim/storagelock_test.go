package pvesim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

// contended is Default's cluster where allocating a disk holds the storage's lock for hold and
// a clone copies for 4 s.
func contended(hold time.Duration) func(*Options) {
	return func(o *Options) {
		o.StorageLockHold = hold
		o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second}
	}
}

// fleetID is the first VMID runClones clones into.
const fleetID = 200000

// runClones clones the template into n VMs from fleetID on, starting a clone whenever fewer
// than limit run, as a caller with a semaphore does, and polling every 250 ms of the manual
// clock. It returns each clone's exit status.
func runClones(t *testing.T, c *Cluster, clk *ManualClock, n, limit int) []string {
	t.Helper()
	exits := make([]string, n)
	running := make(map[int]pve.UPID)
	next := 0
	for next < n || len(running) > 0 {
		for next < n && len(running) < limit {
			running[next] = startClone(t, c, fleetID+next)
			next++
		}
		clk.Advance(250 * time.Millisecond)
		for i, upid := range running {
			st, err := c.TaskStatus(t.Context(), "pve1", upid)
			require.NoError(t, err)
			if st.Status == pve.TaskStopped {
				exits[i] = st.ExitStatus
				delete(running, i)
			}
		}
		require.Less(t, clk.Now().Sub(t0), time.Hour, "the clones never finished")
	}
	return exits
}

// count tallies exit statuses.
func count(exits []string) map[string]int {
	out := make(map[string]int)
	for _, e := range exits {
		out[e]++
	}
	return out
}

func TestStorageLock_fiftySimultaneousClonesMostlyTimeOut(t *testing.T) {
	c, clk := newCluster(t, contended(3*time.Second))

	exits := runClones(t, c, clk, 50, 50)

	// The lock grants the first disks at 0, 3, 6 and 9 s; the fifth clone would get it at
	// 12 s, more than 10 s after it asked. The four that got it wait up to 9 s for their
	// second disk, behind the others' first.
	lockTimeout := fixtureExit(t, "task_status_clone_storage_lock_timeout")
	assert.Equal(t, map[string]int{"OK": 4, lockTimeout: 46}, count(exits))
	assert.Equal(t, 50, c.MaxConcurrentClones("pve1", "local-lvm"))
	assert.Len(t, c.VMs(), 1+4, "a clone that timed out removed its temporary config")
	assert.Len(t, c.Volumes(), 2+4*2, "a clone that timed out allocated nothing")
}

func TestStorageLock_fourAtATimeAllSucceed(t *testing.T) {
	c, clk := newCluster(t, contended(3*time.Second))

	exits := runClones(t, c, clk, 50, 4)

	assert.Equal(t, map[string]int{"OK": 50}, count(exits))
	assert.Equal(t, 4, c.MaxConcurrentClones("pve1", "local-lvm"))
	assert.Len(t, c.VMs(), 51)
}

func TestStorageLock_timedOutCloneLeavesNothing(t *testing.T) {
	c, clk := newCluster(t, contended(6*time.Second))
	first, second := startClone(t, c, newID), startClone(t, c, newID+1)
	third := startClone(t, c, newID+2)

	clk.Advance(5 * time.Second)
	waiting, exists := vmByID(c, newID+2)
	require.True(t, exists, "a clone waiting for the storage has written its temporary config")
	assert.Equal(t, "clone", waiting.Config["lock"])

	assert.Equal(t, fixtureExit(t, "task_status_clone_storage_lock_timeout"), requireTaskEnds(t, c, clk, third, 10*time.Second))
	_, exists = vmByID(c, newID+2)
	assert.False(t, exists)
	assert.Empty(t, volumesOf(c, newID+2))
	for _, upid := range []pve.UPID{first, second} {
		st, err := c.TaskStatus(t.Context(), "pve1", upid)
		require.NoError(t, err)
		assert.Equal(t, pve.TaskRunning, st.Status, "the clones that got the lock go on")
	}
}

func TestStorageLock_timeoutOnALaterDiskFreesTheDisksBeforeIt(t *testing.T) {
	const gib = 1 << 30
	c, clk := newCluster(t, func(o *Options) {
		o.StorageLockHold = 6 * time.Second
		o.Nodes[0].Storages = append(slices.Clone(o.Nodes[0].Storages),
			Storage{ID: "fast", Type: "lvmthin", Content: "images", Total: 100 * gib})
		o.VMs = append(o.VMs,
			VM{Node: "pve1", VMID: 9001, Config: pve.VMConfig{"name": "two-storages", "template": "1",
				"scsi0": "fast:base-9001-disk-0,size=1G", "scsi1": "local-lvm:base-9001-disk-1,size=1G"}})
	})
	// Two clones of 9000 hold local-lvm's lock for their first disks from 0 to 12 s; the one
	// asking at 5 s is granted it from 12 s to 18 s.
	startClone(t, c, 200000)
	startClone(t, c, 200001)
	p := cloneParams(newID)
	p.Storage = ""
	upid, err := c.Clone(t.Context(), "pve1", 9001, p)
	require.NoError(t, err)
	clk.Advance(5 * time.Second)
	startClone(t, c, 200002)

	// 9001's first disk, on fast, is allocated at once and copied in 30 ms; at 6.03 s its
	// second disk asks for local-lvm, free only at 18 s.
	clk.Advance(5 * time.Second)
	assert.Equal(t, []string{"fast:vm-123456-disk-0"}, volumesOf(c, newID))
	exit := requireTaskEnds(t, c, clk, upid, 6*time.Second+30*time.Millisecond+10*time.Second)
	assert.Equal(t, fixtureExit(t, "task_status_clone_storage_lock_timeout"), exit)
	assert.Empty(t, volumesOf(c, newID))
	_, exists := vmByID(c, newID)
	assert.False(t, exists)
}

func TestStorageLock_holdLengthensTheClone(t *testing.T) {
	// Default's template has two disks: each holds local-lvm's lock for 1 s before its copy.
	c, clk := newCluster(t, func(o *Options) { o.StorageLockHold = time.Second })
	upid := startClone(t, c, newID)

	assert.Equal(t, "OK", requireTaskEnds(t, c, clk, upid, 2*time.Second+defaultTaskDurations["qmclone"]))
	vm, _ := vmByID(c, newID)
	assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", vm.Config["name"])
	assert.NotContains(t, vm.Config, "lock")
}

func TestStorageLock_sharedStorageLockIsTheClusters(t *testing.T) {
	shared := Storage{ID: "ceph-vm", Type: "rbd", Content: "images", Shared: true, Total: 1 << 40}
	onCeph := func(v VM) VM {
		v.Config["efidisk0"] = strings.Replace(v.Config["efidisk0"], "local-lvm:", "ceph-vm:", 1)
		v.Config["scsi0"] = strings.Replace(v.Config["scsi0"], "local-lvm:", "ceph-vm:", 1)
		return v
	}
	c, clk := newCluster(t, func(o *Options) {
		o.StorageLockHold = 11 * time.Second
		for i := range o.Nodes {
			o.Nodes[i].Storages = append(slices.Clone(o.Nodes[i].Storages), shared)
		}
		o.VMs = []VM{onCeph(Template(tmplID, "pve1", 2)), onCeph(Template(9001, "pve2", 2))}
	})
	p := cloneParams(newID)
	p.Storage = "ceph-vm"
	_, err := c.Clone(t.Context(), "pve1", tmplID, p)
	require.NoError(t, err)
	p = cloneParams(newID + 1)
	p.Storage = "ceph-vm"
	upid, err := c.Clone(t.Context(), "pve2", 9001, p)
	require.NoError(t, err)

	clk.Advance(10 * time.Second)
	st, err := c.TaskStatus(t.Context(), "pve2", upid)
	require.NoError(t, err)
	assert.Equal(t, fixtureExit(t, "task_status_clone_cfs_lock_timeout"), st.ExitStatus,
		"a clone on another node queues for the same cluster lock")
	assert.Equal(t, 2, c.MaxConcurrentClones("pve2", "ceph-vm"))
}

func TestStorageLock_nodesLocalStoragesHaveTheirOwnLocks(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) {
		o.StorageLockHold = 11 * time.Second
		o.VMs = append(o.VMs, Template(9001, "pve2", 2))
	})
	first := startClone(t, c, newID)
	second, err := c.Clone(t.Context(), "pve2", 9001, cloneParams(newID+1))
	require.NoError(t, err)

	end := 22*time.Second + defaultTaskDurations["qmclone"]
	clk.Advance(end)
	for _, upid := range []pve.UPID{first, second} {
		st, err := c.TaskStatus(t.Context(), upid.Node(), upid)
		require.NoError(t, err)
		assert.Equal(t, "OK", st.ExitStatus, upid.Node())
	}
	assert.Equal(t, 1, c.MaxConcurrentClones("pve1", "local-lvm"))
	assert.Equal(t, 1, c.MaxConcurrentClones("pve2", "local-lvm"))
}

func TestStorageLock_zeroHoldLetsEveryCloneOfATemplateRunAtOnce(t *testing.T) {
	c, clk := newCluster(t)

	var upids []pve.UPID
	for i := range 50 {
		upids = append(upids, startClone(t, c, fleetID+i))
	}
	clk.Advance(defaultTaskDurations["qmclone"])
	for _, upid := range upids {
		st, err := c.TaskStatus(t.Context(), "pve1", upid)
		require.NoError(t, err)
		assert.Equal(t, "OK", st.ExitStatus)
	}
	assert.Equal(t, 50, c.MaxConcurrentClones("pve1", "local-lvm"))
}

func TestCloneRuns_recordsEachCloneTask(t *testing.T) {
	c, clk := newCluster(t, contended(3*time.Second))
	ok := startClone(t, c, newID)
	_, err := c.Clone(t.Context(), "pve1", tmplID, loserParams(newID))
	require.NoError(t, err, "the loser of a race for a VMID starts a task too")
	clk.Advance(time.Minute)
	refused := cloneParams(newID + 1)
	refused.Storage = "nope"
	_, err = c.Clone(t.Context(), "pve1", tmplID, refused)
	require.Error(t, err)

	runs := c.CloneRuns()
	require.Len(t, runs, 2)
	// Its two disks hold local-lvm's lock for 3 s each, on top of the 4 s copy.
	assert.Equal(t, CloneRun{UPID: ok, Node: "pve1", VMID: tmplID, NewID: newID, Storages: []string{"local-lvm"},
		Start: t0, End: t0.Add(10 * time.Second), ExitStatus: "OK"}, runs[0])
	assert.Equal(t, t0, runs[1].Start)
	assert.Equal(t, t0.Add(cloneFlockTimeout), runs[1].End)
	assert.Equal(t, flockText(newID), runs[1].ExitStatus)
}

func TestMaxConcurrentClones_unknownStoragePanics(t *testing.T) {
	c, _ := newCluster(t)
	assert.Panics(t, func() { c.MaxConcurrentClones("pve1", "local-lmv") })
}

func TestMaxConcurrentClones_aCloneWaitingForItsVMIDsFlockDoesNotCount(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 45 * time.Second} })
	startClone(t, c, newID)
	clk.Advance(500 * time.Millisecond)
	_, err := c.Clone(t.Context(), "pve1", tmplID, loserParams(newID))
	require.NoError(t, err)

	clk.Advance(cloneFlockTimeout)
	assert.Equal(t, 1, c.MaxConcurrentClones("pve1", "local-lvm"), "the second clone failed on the flock before touching the storage")
	assert.Len(t, c.CloneRuns(), 2, "the clone log still lists it")
}
