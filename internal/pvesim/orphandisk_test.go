package pvesim

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

// storageOnly grants the token's user Datastore.Audit and Datastore.AllocateSpace on every
// storage, without Datastore.Allocate, VM.Config.Disk on the template, VM.Allocate (to
// destroy it) on VM 150000, and Sys.Audit on /.
func storageOnly(o *Options) {
	o.Access = &Access{
		Roles: map[string][]string{"Everything": everything, "Store": {"Datastore.Audit", "Datastore.AllocateSpace"}, "Disk": {"VM.Config.Disk"}, "Destroy": {"VM.Allocate"}},
		ACL: []ACE{
			{Path: "/storage", User: simUser, Role: "Store", Propagate: true},
			{Path: "/vms/9000", User: simUser, Role: "Disk"},
			{Path: "/vms/150000", User: simUser, Role: "Destroy"},
			{Path: "/", User: simUser, Role: "Everything"},
		},
	}
}

// orphanDisk leaves the disk of VM vmid on local-lvm with no VM, as a destroy that could not
// remove it does, and returns its volume ID.
func orphanDisk(t *testing.T, c *Cluster, clk *ManualClock, vmid int) string {
	t.Helper()
	volid := "local-lvm:vm-" + strconv.Itoa(vmid) + "-disk-0"
	require.NoError(t, c.AddVM(VM{Node: "pve1", VMID: vmid, Config: pve.VMConfig{"scsi0": volid + ",size=4G"}}))
	c.BusyVolume(volid)
	upid, err := c.Destroy(t.Context(), "pve1", vmid)
	require.NoError(t, err)
	require.Equal(t, "WARNINGS: 1", finish(t, c, clk, upid).ExitStatus)
	return volid
}

func volIDs(vols []pve.StorageVolume) []string {
	var out []string
	for _, v := range vols {
		out = append(out, v.VolID)
	}
	return out
}

func TestStorageContent_leavesOutADiskOfAVMIDTheTokenHoldsNothingOnWithoutDatastoreAllocate(t *testing.T) {
	c, clk := newCluster(t, storageOnly)
	orphan := orphanDisk(t, c, clk, 150000)

	vols, err := c.StorageContent(t.Context(), "pve1", "local-lvm", "images")

	require.NoError(t, err)
	assert.Equal(t, []string{"local-lvm:base-9000-disk-0", "local-lvm:base-9000-disk-1"}, volIDs(vols), "the template's disks, by VM.Config.Disk on /vms/9000; not %s", orphan)
}

func TestStorageContent_listsEveryDiskWithDatastoreAllocate(t *testing.T) {
	c, clk := newCluster(t)
	orphan := orphanDisk(t, c, clk, 150000)

	vols, err := c.StorageContent(t.Context(), "pve1", "local-lvm", "images")

	require.NoError(t, err)
	assert.Equal(t, []string{"local-lvm:base-9000-disk-0", "local-lvm:base-9000-disk-1", orphan}, volIDs(vols))
}

func TestDeleteVolume_aDiskOfAVMIDWithNoVMNeedsDatastoreAllocateOnItsStorage(t *testing.T) {
	c, clk := newCluster(t, storageOnly)
	orphan := orphanDisk(t, c, clk, 150000)

	_, err := c.DeleteVolume(t.Context(), "pve1", "local-lvm", orphan)

	assert.Equal(t, apiErr(403, "Permission check failed (/storage/local-lvm, Datastore.Allocate)"), err)
}

func TestDeleteVolume_removesAnOrphanDiskAndTakesItsDeleteTwice(t *testing.T) {
	c, clk := newCluster(t)
	orphan := orphanDisk(t, c, clk, 150000)

	for range 2 {
		upid, err := c.DeleteVolume(t.Context(), "pve1", "local-lvm", orphan)
		require.NoError(t, err)
		assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
	}
	vols, err := c.StorageContent(t.Context(), "pve1", "local-lvm", "images")
	require.NoError(t, err)
	assert.Equal(t, []string{"local-lvm:base-9000-disk-0", "local-lvm:base-9000-disk-1"}, volIDs(vols))
}

func TestNodeTasks_listsARunningCloneUnderItsSourceVMIDAndACrashedOneAsEnded(t *testing.T) {
	c, clk := newCluster(t)
	c.CrashClone(newID + 1)
	crashed := startClone(t, c, newID+1)
	finish(t, c, clk, crashed)
	running := startClone(t, c, newID)

	active, err := c.NodeTasks(t.Context(), "pve1", pve.TaskListParams{Source: "active", TypeFilter: "qmclone", VMID: tmplID})
	require.NoError(t, err)
	all, err := c.NodeTasks(t.Context(), "pve1", pve.TaskListParams{Source: "all", TypeFilter: "qmclone"})
	require.NoError(t, err)
	byNewVM, err := c.NodeTasks(t.Context(), "pve1", pve.TaskListParams{Source: "all", VMID: newID})
	require.NoError(t, err)

	require.Len(t, active, 1)
	assert.Equal(t, running, active[0].UPID)
	assert.True(t, active[0].Running())
	require.Len(t, all, 2)
	assert.Equal(t, []pve.UPID{running, crashed}, []pve.UPID{all[0].UPID, all[1].UPID}, "newest first")
	assert.Equal(t, "unexpected status", all[1].Status)
	assert.NotZero(t, all[1].EndTime)
	assert.Empty(t, byNewVM, "a clone's task carries its source's VMID")
}

func TestLeakClone_failsAfterItsDisksAndLeavesThemWithNoVM(t *testing.T) {
	c, clk := newCluster(t)
	c.LeakClone(newID)

	st := finish(t, c, clk, startClone(t, c, newID))

	assert.Equal(t, "clone failed: interrupted by signal", st.ExitStatus)
	_, err := c.VMConfig(t.Context(), "pve1", newID)
	assert.Error(t, err, "the failed clone removed its VM")
	vols, err := c.StorageContent(t.Context(), "pve1", "local-lvm", "images")
	require.NoError(t, err)
	assert.Contains(t, volIDs(vols), "local-lvm:vm-123456-disk-0")
}

func TestUnlock_clearsTheLockACrashedCloneLeft(t *testing.T) {
	c, clk := newCluster(t)
	c.CrashClone(newID)
	finish(t, c, clk, startClone(t, c, newID))

	require.NoError(t, c.Unlock(newID))

	cfg, err := c.VMConfig(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Empty(t, cfg["lock"])
}
