package pvesim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestClone_newVMLockedUntilTaskEnds(t *testing.T) {
	c, clk := newCluster(t)
	upid := startClone(t, c, newID)

	cfg, err := c.VMConfig(t.Context(), "pve1", newID)
	require.NoError(t, err)
	want := fixtureData(t, "vm_config_cloning")
	assert.Equal(t, want["lock"], cfg["lock"])
	assert.Equal(t, want["description"], cfg["description"])
	assert.ElementsMatch(t, slices.Collect(maps.Keys(want)), slices.Collect(maps.Keys(cfg)))

	finish(t, c, clk, upid)
	cfg, err = c.VMConfig(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.NotContains(t, cfg, "lock")
	assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", cfg["name"])
}

// cloneConfigAt is the new VM's config when the clock has moved d since the clone started at t0.
func cloneConfigAt(t *testing.T, c *Cluster, clk *ManualClock, d time.Duration) pve.VMConfig {
	t.Helper()
	clk.Advance(t0.Add(d).Sub(clk.Now()))
	cfg, err := c.VMConfig(t.Context(), "pve1", newID)
	require.NoError(t, err)
	return cfg
}

func TestClone_markAppearsOnlyWhenSingleDiskCloneEnds(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.VMs = []VM{Template(tmplID, "pve1", 1)} })
	startClone(t, c, newID)
	end := defaultTaskDurations["qmclone"]

	before := cloneConfigAt(t, c, clk, end-time.Nanosecond)
	assert.Equal(t, " qmclone temporary file\n", before["description"])
	assert.NotContains(t, before, "name")
	assert.Equal(t, "clone", before["lock"])

	after := cloneConfigAt(t, c, clk, end)
	assert.Equal(t, cloneParams(newID).Description+"\n", after["description"])
	assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", after["name"])
	assert.NotContains(t, after, "lock", "the mark and the unlock come at the same instant")
}

func TestClone_markAppearsWhenSmallFirstDiskIsDone(t *testing.T) {
	c, clk := newCluster(t)
	startClone(t, c, newID)
	// efidisk0 (4 MiB) is cloned before scsi0 (3 GiB): its share of 60 ms is about 78 µs.
	cfg := cloneConfigAt(t, c, clk, 100*time.Microsecond)

	assert.Equal(t, cloneParams(newID).Description+"\n", cfg["description"])
	assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", cfg["name"])
	assert.Regexp(t, `^virtio=BC:24:11:`, cfg["net0"])
	assert.Equal(t, "local-lvm:vm-123456-disk-0,efitype=4m,pre-enrolled-keys=0,size=4M", cfg["efidisk0"])
	assert.NotContains(t, cfg, "scsi0", "scsi0 is still being cloned")
	assert.Equal(t, "clone", cfg["lock"])
}

func TestClone_configRewrittenAfterEachDiskInDriveKeyOrder(t *testing.T) {
	// Disks of 0 (unknown: a small share), 1 and 3 GiB share a 4 s clone: scsi0 ends just
	// after 1 s, scsi1 with the task.
	c, clk := newCluster(t, func(o *Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second}
		o.VMs = []VM{{Node: "pve1", VMID: tmplID, Config: pve.VMConfig{
			"name":     "three-disks",
			"template": "1",
			"scsi1":    "local-lvm:base-9000-disk-2,size=3G",
			"efidisk0": "local-lvm:base-9000-disk-0,efitype=4m",
			"scsi0":    "local-lvm:base-9000-disk-1,size=1G",
		}}}
	})
	startClone(t, c, newID)

	tests := []struct {
		at    time.Duration
		disks []string
		lock  string
	}{
		{0, nil, "clone"},
		{10 * time.Millisecond, []string{"efidisk0"}, "clone"},
		{990 * time.Millisecond, []string{"efidisk0"}, "clone"},
		{1010 * time.Millisecond, []string{"efidisk0", "scsi0"}, "clone"},
		{4*time.Second - time.Nanosecond, []string{"efidisk0", "scsi0"}, "clone"},
		{4 * time.Second, []string{"efidisk0", "scsi0", "scsi1"}, ""},
	}
	for _, tt := range tests {
		cfg := cloneConfigAt(t, c, clk, tt.at)
		var disks []string
		for _, key := range slices.Sorted(maps.Keys(cfg)) {
			if isDiskKey(key) {
				disks = append(disks, key)
			}
		}
		assert.Equal(t, tt.disks, disks, tt.at)
		assert.Equal(t, tt.lock, cfg["lock"], tt.at)
		assert.Equal(t, tt.disks != nil, cfg["name"] != "", "the name comes with the first disk, at %v", tt.at)
	}
}

func TestClone_stalledNeverWritesFullConfig(t *testing.T) {
	c, clk := newCluster(t)
	c.StallClone(newID)
	startClone(t, c, newID)

	cfg := cloneConfigAt(t, c, clk, 24*time.Hour)
	delete(cfg, "digest")
	assert.Equal(t, pve.VMConfig{"description": " qmclone temporary file\n", "lock": "clone"}, cfg)
}

func TestClone_configMatchesFixture(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	cfg, err := c.VMConfig(t.Context(), "pve1", newID)
	require.NoError(t, err)
	want := fixtureData(t, "vm_config_clone")
	assert.ElementsMatch(t, slices.Collect(maps.Keys(want)), slices.Collect(maps.Keys(cfg)))
	for _, key := range []string{"name", "description", "efidisk0", "scsi0", "boot", "agent", "memory"} {
		assert.Equal(t, want[key], cfg[key], key)
	}
}

func TestClone_regeneratesIdentity(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	tmpl, _ := vmByID(c, tmplID)
	clone, _ := vmByID(c, newID)
	for _, key := range []string{"net0", "smbios1", "vmgenid"} {
		assert.NotEqual(t, tmpl.Config[key], clone.Config[key], key)
	}
	assert.Regexp(t, `^virtio=BC:24:11:[0-9A-F:]{8},bridge=vmbr0$`, clone.Config["net0"])
	_, err := uuid.Parse(clone.Config["vmgenid"])
	assert.NoError(t, err, "vmgenid")
	assert.NotContains(t, clone.Config, "template")
}

func TestClone_upidIdIsSourceVMID(t *testing.T) {
	c, _ := newCluster(t)
	info, err := pve.ParseUPID(startClone(t, c, newID))
	require.NoError(t, err)
	assert.Equal(t, pve.UPIDInfo{
		Node: "pve1", PID: info.PID, PStart: info.PStart, StartTime: t0.Unix(),
		Type: "qmclone", ID: "9000", User: "pveflow@pve!sim",
	}, info)
}

func TestClone_usedVMIDSameNodeIsSyncAlreadyExists(t *testing.T) {
	c, _ := newCluster(t)
	require.NoError(t, c.AddVM(VM{Node: "pve1", VMID: newID, Config: pve.VMConfig{"name": "foreign"}}))

	_, err := c.Clone(t.Context(), "pve1", tmplID, cloneParams(newID))
	requireFixtureError(t, "err_newid_in_use", err)
	assert.Equal(t, pve.AlreadyExists, pve.Classify(err))
}

func TestClone_usedVMIDOtherNodeIsTaskFileExists(t *testing.T) {
	c, clk := newCluster(t)
	require.NoError(t, c.AddVM(VM{Node: "pve2", VMID: newID, Config: pve.VMConfig{"name": "foreign"}}))

	upid := startClone(t, c, newID)
	st := finish(t, c, clk, upid)
	assert.Equal(t, fixtureExit(t, "task_status_clone_file_exists"), st.ExitStatus)
	_, err := st.Result()
	assert.Equal(t, pve.AlreadyExists, pve.Classify(err))
	foreign, _ := vmByID(c, newID)
	assert.Equal(t, VM{Node: "pve2", VMID: newID, Config: pve.VMConfig{"name": "foreign"}}, foreign)
}

// loserParams is a second clone racing pveflow's clone for the same VMID.
func loserParams(newid int) pve.CloneParams {
	return pve.CloneParams{NewID: newid, Name: "proxy-loser", Description: "loser", Full: true}
}

// requireTaskEnds requires upid to run until the clock is at t0+end and to be stopped then, and
// returns its exit status.
func requireTaskEnds(t *testing.T, c *Cluster, clk *ManualClock, upid pve.UPID, end time.Duration) string {
	t.Helper()
	clk.Advance(t0.Add(end - time.Nanosecond).Sub(clk.Now()))
	st, err := c.TaskStatus(t.Context(), upid.Node(), upid)
	require.NoError(t, err)
	require.Equal(t, pve.TaskRunning, st.Status, "before %v", end)
	clk.Advance(time.Nanosecond)
	st, err = c.TaskStatus(t.Context(), upid.Node(), upid)
	require.NoError(t, err)
	require.Equal(t, pve.TaskStopped, st.Status, "at %v", end)
	return st.ExitStatus
}

func TestClone_raceLoserFailsAndLeavesWinnerIntact(t *testing.T) {
	tests := []struct {
		name      string
		cloneTime time.Duration // the winner's
		after     time.Duration // when the loser asks
		node      string        // the loser's
		template  int
		ends      time.Duration // when the loser's task ends
		exit      func(*testing.T) string
	}{
		{
			name: "winner still cloning when the flock wait times out", cloneTime: 45 * time.Second,
			after: 500 * time.Millisecond, node: "pve1", template: tmplID, ends: 1500 * time.Millisecond,
			exit: func(t *testing.T) string { return fixtureExit(t, "task_status_lock_timeout") },
		},
		{
			name: "winner done within the flock wait", cloneTime: 60 * time.Millisecond,
			after: 10 * time.Millisecond, node: "pve1", template: tmplID, ends: 60 * time.Millisecond,
			exit: func(t *testing.T) string { return fixtureExit(t, "task_status_clone_config_exists") },
		},
		{
			// The winner knows its end only once it has its last disk's storage lock, about
			// 78 µs in: the loser waits for an end not known yet.
			name: "loser asks before the winner's end is known", cloneTime: 60 * time.Millisecond,
			after: 10 * time.Microsecond, node: "pve1", template: tmplID, ends: 60 * time.Millisecond,
			exit: func(t *testing.T) string { return fixtureExit(t, "task_status_clone_config_exists") },
		},
		{
			name: "loser on another node", cloneTime: 45 * time.Second,
			after: 500 * time.Millisecond, node: "pve2", template: 9001, ends: 45500 * time.Millisecond,
			exit: func(*testing.T) string {
				return "close (rename) atomic file '/etc/pve/nodes/pve2/qemu-server/123456.conf' failed: File exists"
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newCluster(t, func(o *Options) {
				o.TaskDurations = map[string]time.Duration{"qmclone": tt.cloneTime}
				o.VMs = append(o.VMs, Template(9001, "pve2", 2))
			})
			winner := startClone(t, c, newID)
			clk.Advance(tt.after)
			loser, err := c.Clone(t.Context(), tt.node, tt.template, loserParams(newID))
			require.NoError(t, err, "both requests pass the early check")

			assert.Equal(t, tt.exit(t), requireTaskEnds(t, c, clk, loser, tt.ends))
			clk.Advance(max(t0.Add(tt.cloneTime).Sub(clk.Now()), 0))
			st, err := c.TaskStatus(t.Context(), "pve1", winner)
			require.NoError(t, err)
			assert.Equal(t, "OK", st.ExitStatus)
			vm, _ := vmByID(c, newID)
			assert.Equal(t, "pve1", vm.Node)
			assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", vm.Config["name"])
			assert.Equal(t, cloneParams(newID).Description+"\n", vm.Config["description"])
			assert.Equal(t, []string{"local-lvm:vm-123456-disk-0", "local-lvm:vm-123456-disk-1"}, volumesOf(c, newID))
		})
	}
}

func TestClone_cloneOntoCloningVMIDAfterOneSecondIsSyncAlreadyExists(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 45 * time.Second} })
	startClone(t, c, newID)
	clk.Advance(cloneFlockTimeout)

	_, err := c.Clone(t.Context(), "pve1", tmplID, loserParams(newID))
	requireFixtureError(t, "err_newid_in_use", err)
}

func TestClone_raceLoserClonesWhenWinnerFailedFirst(t *testing.T) {
	c, clk := newCluster(t)
	c.FailTask("qmclone", fixtureExit(t, "task_status_stopped_error"))
	winner := startClone(t, c, newID)
	clk.Advance(10 * time.Millisecond)
	loser, err := c.Clone(t.Context(), "pve1", tmplID, loserParams(newID))
	require.NoError(t, err)

	assert.NotEqual(t, "OK", requireTaskEnds(t, c, clk, winner, 60*time.Millisecond))
	vm, exists := vmByID(c, newID)
	require.True(t, exists, "the loser took the flock and wrote its temporary config")
	assert.Equal(t, "clone", vm.Config["lock"])
	assert.Equal(t, "OK", requireTaskEnds(t, c, clk, loser, 120*time.Millisecond))
	vm, _ = vmByID(c, newID)
	assert.Equal(t, "proxy-loser", vm.Config["name"])
	assert.Equal(t, 1, c.MaxConcurrentClones("pve1", "local-lvm"), "the loser counts against the storage from when it took the flock")
}

func TestClone_raceLoserHoldsSourceFlockWhileWaiting(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": 45 * time.Second}
		o.VMs = append(o.VMs, Template(9001, "pve1", 2))
	})
	_, err := c.Clone(t.Context(), "pve1", 9001, cloneParams(newID))
	require.NoError(t, err)
	clk.Advance(100 * time.Millisecond)
	_, err = c.Clone(t.Context(), "pve1", tmplID, loserParams(newID))
	require.NoError(t, err)

	err = c.SetVMConfig(t.Context(), "pve1", tmplID, pve.VMConfig{"cores": "4"})
	assert.Equal(t, serverErr(flockText(tmplID)), err)
	clk.Advance(cloneFlockTimeout)
	assert.NoError(t, c.SetVMConfig(t.Context(), "pve1", tmplID, pve.VMConfig{"cores": "4"}))
}

func TestClone_failedCloneRemovesVM(t *testing.T) {
	c, clk := newCluster(t)
	exit := fixtureExit(t, "task_status_stopped_error")
	c.FailTask("qmclone", exit)

	upid := startClone(t, c, newID)
	_, exists := vmByID(c, newID)
	require.True(t, exists, "the VM exists while the clone runs")
	assert.Equal(t, exit, finish(t, c, clk, upid).ExitStatus)

	_, exists = vmByID(c, newID)
	assert.False(t, exists)
	assert.Empty(t, volumesOf(c, newID))
}

func TestClone_noSpaceFailsTask(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) {
		o.Nodes[0].Storages = []Storage{
			{ID: "local", Type: "dir", Content: "iso", Total: 1 << 40},
			// The template's 3 GiB and 4 MiB leave 2 GiB: the 4 MiB EFI disk fits, scsi0 does not.
			{ID: "local-lvm", Type: "lvm", Content: "images", Total: 5<<30 + 4<<20},
		}
	})
	st := finish(t, c, clk, startClone(t, c, newID))

	assert.Equal(t, fixtureExit(t, "task_status_no_space_lvm"), st.ExitStatus)
	_, err := st.Result()
	assert.Equal(t, pve.QuotaExceeded, pve.Classify(err))
	_, exists := vmByID(c, newID)
	assert.False(t, exists)
}

func TestClone_stalledNeverFinishes(t *testing.T) {
	c, clk := newCluster(t)
	c.StallClone(newID)
	upid := startClone(t, c, newID)

	clk.Advance(24 * time.Hour)
	st, err := c.TaskStatus(t.Context(), "pve1", upid)
	require.NoError(t, err)
	assert.Equal(t, pve.TaskRunning, st.Status)
	vm, _ := vmByID(c, newID)
	assert.Equal(t, "clone", vm.Config["lock"])
}

func TestClone_stallClonesOptionStallsEveryClone(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.StallClones = true })
	first, second := startClone(t, c, newID), startClone(t, c, newID+1)

	clk.Advance(24 * time.Hour)
	for _, upid := range []pve.UPID{first, second} {
		st, err := c.TaskStatus(t.Context(), "pve1", upid)
		require.NoError(t, err)
		assert.Equal(t, pve.TaskRunning, st.Status)
	}
}

func TestClone_crashedHostLeavesLock(t *testing.T) {
	c, clk := newCluster(t)
	c.CrashClone(newID)

	st := finish(t, c, clk, startClone(t, c, newID))
	assert.Equal(t, "unexpected status", st.ExitStatus)
	vm, _ := vmByID(c, newID)
	assert.Equal(t, "clone", vm.Config["lock"])
	assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", vm.Config["name"])

	err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4"})
	requireFixtureError(t, "err_locked", err)
	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, fixtureExit(t, "task_status_vm_locked"), finish(t, c, clk, upid).ExitStatus)
}

func TestClone_sourceFlockBlocksConfigWritesAndWorkers(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	_, err := c.Clone(t.Context(), "pve1", newID, cloneParams(newID+1))
	require.NoError(t, err)

	err = c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4"})
	requireFixtureError(t, "err_lock_timeout", err)
	upid, err := c.Destroy(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, fixtureExit(t, "task_status_lock_timeout"), finish(t, c, clk, upid).ExitStatus)
}

func TestClone_defaultNameIsCopyOfSource(t *testing.T) {
	c, clk := newCluster(t)
	p := cloneParams(newID)
	p.Name = ""
	upid, err := c.Clone(t.Context(), "pve1", tmplID, p)
	require.NoError(t, err)
	finish(t, c, clk, upid)

	vm, _ := vmByID(c, newID)
	assert.Equal(t, "Copy-of-VM-debian-13-template", vm.Config["name"])
}

func TestClone_linkedCloneUsesBaseVolumes(t *testing.T) {
	c, clk := newCluster(t)
	p := cloneParams(newID)
	p.Full, p.Storage = false, ""
	upid, err := c.Clone(t.Context(), "pve1", tmplID, p)
	require.NoError(t, err)
	finish(t, c, clk, upid)

	vm, _ := vmByID(c, newID)
	assert.Equal(t, "local-lvm:base-9000-disk-1/vm-123456-disk-1,size=3G", vm.Config["scsi0"])
}

func TestClone_syncRefusals(t *testing.T) {
	tests := []struct {
		name string
		edit func(*pve.CloneParams)
		want error
	}{
		{"unknown storage", func(p *pve.CloneParams) { p.Storage = "nope" }, serverErr("storage 'nope' does not exist")},
		{"storage without images", func(p *pve.CloneParams) { p.Storage = "local" },
			paramErr(map[string]string{"storage": "storage 'local' does not support vm images"})},
		{"name not a DNS name", func(p *pve.CloneParams) { p.Name = "proxy_1" },
			paramErr(map[string]string{"name": "invalid format - value does not look like a valid DNS name\n"})},
		{"newid below range", func(p *pve.CloneParams) { p.NewID = 99 },
			paramErr(map[string]string{"newid": "value must have a minimum value of 100"})},
		{"local storage to another node", func(p *pve.CloneParams) { p.Target = "pve2" },
			serverErr("can't clone VM to node 'pve2' (VM uses local storage)")},
		{"unknown target", func(p *pve.CloneParams) { p.Target = "pve9" }, serverErr("no such cluster node 'pve9'")},
		{"storage on a linked clone", func(p *pve.CloneParams) { p.Full = false },
			serverErr("parameter 'storage' not allowed for linked clones")},
		// qemu-server API2/Qemu.pm clone_vm $load_and_check -> RPCEnvironment::check_pool_exist
		// (raise_perm_exc), checked before the target node and the storage.
		{"unknown pool", func(p *pve.CloneParams) { p.Pool = "proxies" },
			apiErr(403, "Permission check failed (pool 'proxies' does not exist)")},
		{"unknown pool before unknown target", func(p *pve.CloneParams) { p.Pool = "proxies"; p.Target = "pve9" },
			apiErr(403, "Permission check failed (pool 'proxies' does not exist)")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newCluster(t)
			p := cloneParams(newID)
			tt.edit(&p)
			_, err := c.Clone(t.Context(), "pve1", tmplID, p)
			assert.Equal(t, tt.want, err)
			_, exists := vmByID(c, p.NewID)
			assert.False(t, exists)
		})
	}
}

func TestClone_unknownStorageMatchesFixture(t *testing.T) {
	c, _ := newCluster(t)
	p := cloneParams(newID)
	p.Storage = "nope"
	_, err := c.Clone(t.Context(), "pve1", tmplID, p)
	requireFixtureError(t, "err_storage_missing", err)
}

func TestClone_toOtherNodeOnSharedStorageMovesVMAtEnd(t *testing.T) {
	shared := Storage{ID: "ceph-vm", Type: "rbd", Content: "images", Shared: true, Total: 1 << 40}
	c, clk := newCluster(t, func(o *Options) {
		for i := range o.Nodes {
			o.Nodes[i].Storages = append(slices.Clone(o.Nodes[i].Storages), shared)
		}
		o.VMs[0].Config["efidisk0"] = "ceph-vm:base-9000-disk-0,efitype=4m,pre-enrolled-keys=0,size=4M"
		o.VMs[0].Config["scsi0"] = "ceph-vm:base-9000-disk-1,size=3G"
	})
	p := cloneParams(newID)
	p.Target, p.Storage = "pve2", "ceph-vm"
	upid, err := c.Clone(t.Context(), "pve1", tmplID, p)
	require.NoError(t, err)

	during, _ := vmByID(c, newID)
	assert.Equal(t, "pve1", during.Node, "the clone writes its config on the source node")
	finish(t, c, clk, upid)
	after, _ := vmByID(c, newID)
	assert.Equal(t, "pve2", after.Node)
	_, err = c.VMConfig(t.Context(), "pve2", newID)
	assert.NoError(t, err)
}

func TestClone_leftoverDiskTakesNextName(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	c.FailTask("qmdestroy", "WARNINGS: 2")
	upid, err := c.Destroy(t.Context(), "pve1", newID)
	require.NoError(t, err)
	finish(t, c, clk, upid)

	createVM(t, c, clk, newID)
	vm, _ := vmByID(c, newID)
	assert.Equal(t, "local-lvm:vm-123456-disk-3,size=3G", vm.Config["scsi0"])
}

func TestClone_concurrentClonesIntoOneRangeNeverShareVMID(t *testing.T) {
	const (
		clones = 200
		lo     = 200000
		size   = 250
	)
	c, clk := newCluster(t)
	require.NoError(t, c.AddVM(VM{Node: "pve1", VMID: lo + 3, Config: pve.VMConfig{"name": "foreign"}}))
	params := func(i, id int) pve.CloneParams {
		p := cloneParams(id)
		p.Description = fmt.Sprintf("clone %d", i)
		return p
	}

	upids, ids := make([]pve.UPID, clones), make([]int, clones)
	var wg sync.WaitGroup
	for i := range clones {
		wg.Go(func() {
			for probe := range size {
				id := lo + (i*7+probe)%size
				upid, err := c.Clone(t.Context(), "pve1", tmplID, params(i, id))
				if pve.IsClass(err, pve.AlreadyExists) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				upids[i], ids[i] = upid, id
				return
			}
		})
	}
	wg.Wait()
	clk.Advance(cloneFlockTimeout)

	// Clones that raced for a VMID within a second all got a UPID; only one of them may own it.
	owner := make(map[int]int)
	for i, upid := range upids {
		require.NotEmpty(t, upid, "clone %d found no VMID", i)
		require.NotEqual(t, lo+3, ids[i], "the foreign VM's VMID was taken")
		st, err := c.TaskStatus(t.Context(), "pve1", upid)
		require.NoError(t, err)
		require.Equal(t, pve.TaskStopped, st.Status)
		if st.ExitStatus != "OK" {
			assert.Equal(t, configExistsText(ids[i]), st.ExitStatus, "clone %d lost the race for %d", i, ids[i])
			continue
		}
		prev, taken := owner[ids[i]]
		require.False(t, taken, "VMID %d handed out to clones %d and %d", ids[i], prev, i)
		owner[ids[i]] = i
	}
	assert.Len(t, c.VMs(), len(owner)+2)
	for id, i := range owner {
		vm, _ := vmByID(c, id)
		assert.Equal(t, params(i, id).Description+"\n", vm.Config["description"], "VM %d is its winner's", id)
	}
}

func TestClone_disksNamedAfterNewVMID(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	assert.Equal(t, []string{"local-lvm:vm-123456-disk-0", "local-lvm:vm-123456-disk-1"}, volumesOf(c, newID))
	for _, v := range c.Volumes() {
		if strings.HasSuffix(v.VolID, "vm-123456-disk-1") {
			assert.Equal(t, int64(3<<30), v.Size, fmt.Sprint(v))
		}
	}
}

// withCloudInit gives Default's template a cloud-init drive on local-lvm.
func withCloudInit(o *Options) {
	o.VMs[0].Config["ide2"] = "local-lvm:vm-9000-cloudinit,media=cdrom"
}

func TestClone_cloudInitDiskTakesItsFixedName(t *testing.T) {
	tests := []struct {
		name string
		full bool
	}{
		{"full clone", true},
		{"linked clone", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newCluster(t, withCloudInit)
			p := cloneParams(newID)
			if !tt.full {
				p.Full, p.Storage = false, ""
			}
			upid, err := c.Clone(t.Context(), "pve1", tmplID, p)
			require.NoError(t, err)
			require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)

			vm, _ := vmByID(c, newID)
			assert.Equal(t, "local-lvm:vm-123456-cloudinit,media=cdrom,size=4M", vm.Config["ide2"])
			assert.Contains(t, volumesOf(c, newID), "local-lvm:vm-123456-cloudinit")
		})
	}
}

func TestClone_leftoverCloudInitDiskBlocksTheVMID(t *testing.T) {
	c, clk := newCluster(t, withCloudInit)
	createVM(t, c, clk, newID)
	c.FailTask("qmdestroy", "WARNINGS: 3")
	upid, err := c.Destroy(t.Context(), "pve1", newID)
	require.NoError(t, err)
	finish(t, c, clk, upid)
	leftovers := volumesOf(c, newID)
	require.Contains(t, leftovers, "local-lvm:vm-123456-cloudinit")

	st := finish(t, c, clk, startClone(t, c, newID))

	assert.Equal(t, fixtureExit(t, "task_status_clone_disk_exists_lvm"), st.ExitStatus)
	_, err = st.Result()
	assert.Equal(t, pve.AlreadyExists, pve.Classify(err))
	_, exists := vmByID(c, newID)
	assert.False(t, exists)
	assert.Equal(t, leftovers, volumesOf(c, newID), "the EFI disk it allocated first is freed again")
}

func TestClone_ontoISCSIStorageAllocatesNothing(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) {
		o.Nodes[0].Storages = append(slices.Clone(o.Nodes[0].Storages),
			Storage{ID: "san", Type: "iscsi", Content: "images", Total: 1 << 40})
	})
	p := cloneParams(newID)
	p.Storage = "san"
	upid, err := c.Clone(t.Context(), "pve1", tmplID, p)
	require.NoError(t, err)

	st := finish(t, c, clk, upid)
	assert.Equal(t, fixtureExit(t, "task_status_clone_no_alloc_iscsi"), st.ExitStatus)
	_, err = st.Result()
	assert.Equal(t, pve.Permanent, pve.Classify(err))
	_, exists := vmByID(c, newID)
	assert.False(t, exists)
	assert.Empty(t, volumesOf(c, newID))
}

func TestClone_joinsItsPoolWhenItEnds(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.Pools = []string{"proxies"} })
	p := cloneParams(newID)
	p.Pool = "proxies"

	_, err := c.Clone(t.Context(), "pve1", tmplID, p)
	require.NoError(t, err)
	copying, _ := vmByID(c, newID)
	clk.Advance(time.Minute)
	done, _ := vmByID(c, newID)

	assert.Empty(t, copying.Pool, "PVE adds the clone to its pool once it has finished")
	assert.Equal(t, "proxies", done.Pool)
}
