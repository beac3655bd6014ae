package workflows_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/reads"
)

// leftDisk leaves the disk of VM vmid on pve1's local-lvm with no VM, as a destroy that could
// not remove it does (PVE warns "Could not remove disk ..., check manually"), and returns its
// volume ID.
func (w *world) leftDisk(vmid int) string {
	w.t.Helper()
	volid := fmt.Sprintf("local-lvm:vm-%d-disk-0", vmid)
	w.add(pvesim.VM{Node: "pve1", VMID: vmid, Config: pve.VMConfig{"name": "gone", "scsi0": volid + ",size=4G"}})
	w.cluster.BusyVolume(volid)
	_, err := w.cluster.Destroy(context.Background(), "pve1", vmid)
	require.NoError(w.t, err)
	w.advance(time.Minute)
	require.Contains(w.t, w.disks(), volid)
	require.NotContains(w.t, w.vmids(), vmid)
	return volid
}

// disks are the volume IDs of the cluster's disk images, the template's among them.
func (w *world) disks() []string {
	var out []string
	for _, v := range w.cluster.Volumes() {
		if v.Data == nil {
			out = append(out, v.VolID)
		}
	}
	slices.Sort(out)
	return out
}

// templateVolumes are the disks of the simulator's template 9000.
func templateVolumes() []string {
	return []string{"local-lvm:base-9000-disk-0", "local-lvm:base-9000-disk-1"}
}

// inRange is a VMID in the test config's range that no test proxy uses.
const inRange = 150000

// hiddenFromResources is a cluster resources list that has not caught up with VM vmid yet.
type hiddenFromResources struct {
	pve.API
	vmid int
}

func (h hiddenFromResources) ClusterResources(ctx context.Context) ([]pve.VMResource, error) {
	rs, err := h.API.ClusterResources(ctx)
	return slices.DeleteFunc(rs, func(r pve.VMResource) bool { return r.VMID == h.vmid }), err
}

func TestGC_deletesAnOrphanDiskOfItsRangeOlderThanTheGraceAndLeavesOneOutsideIt(t *testing.T) {
	w := newWorld(t)
	ours, foreign := w.leftDisk(inRange), w.leftDisk(4000)
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.Disks, 1)
	assert.Equal(t, ours, res.Disks[0].VolID)
	assert.Equal(t, inRange, res.Disks[0].VMID)
	assert.Equal(t, reads.GarbageDeleted, res.Disks[0].Outcome, res.Disks[0].Detail)
	assert.Equal(t, append(templateVolumes(), foreign), w.disks())
	assert.False(t, res.Failed())
}

func TestGC_leavesADiskWhoseVMTheResourcesListDoesNotShowYet(t *testing.T) {
	w := newWorld(t)
	volid := fmt.Sprintf("local-lvm:vm-%d-disk-0", inRange)
	w.add(pvesim.VM{Node: "pve1", VMID: inRange, Config: pve.VMConfig{"name": "egress-eu-1", "scsi0": volid + ",size=4G"}})
	w.advance(2 * reads.DefaultGrace)
	w.wrap = func(api pve.API) pve.API { return hiddenFromResources{API: api, vmid: inRange} }

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.Disks, 1)
	assert.Equal(t, reads.GarbageSkipped, res.Disks[0].Outcome)
	assert.Equal(t, fmt.Sprintf("VM %d exists on node pve1 (cluster resources did not list it yet)", inRange), res.Disks[0].Detail)
	assert.Contains(t, w.disks(), volid)
	assert.Zero(t, w.cluster.CallCount("DeleteVolume"))
}

func TestGC_leavesTheDiskOfACloneInProgress(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.TaskDurations["qmclone"] = 3 * time.Hour })
	vmid := proxy.VMIDFor(otherUID, w.cfg.Proxmox.VMIDRange, 0)
	cloneInProgress(t, w, otherUID, vmid, "")
	w.advance(2 * reads.DefaultGrace)
	require.Contains(t, w.disks(), fmt.Sprintf("local-lvm:vm-%d-disk-0", vmid))

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Empty(t, res.Disks)
	assert.Contains(t, w.disks(), fmt.Sprintf("local-lvm:vm-%d-disk-0", vmid))
	assert.Zero(t, w.cluster.CallCount("DeleteVolume"))
}

func TestGC_leavesAnOrphanDiskYoungerThanTheGrace(t *testing.T) {
	w := newWorld(t)
	volid := w.leftDisk(inRange)
	w.advance(10 * time.Minute)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Empty(t, res.Disks)
	require.Len(t, res.YoungDisks, 1)
	assert.Equal(t, volid, res.YoungDisks[0].VolID)
	assert.Equal(t, "younger than the grace period", res.YoungDisks[0].Detail)
	assert.Contains(t, w.disks(), volid)
}

func TestGC_dryRunListsAnOrphanDiskAndDeletesNothing(t *testing.T) {
	w := newWorld(t)
	volid := w.leftDisk(inRange)
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}, DryRun: true})

	require.NoError(t, err)
	require.Len(t, res.Disks, 1)
	assert.Equal(t, volid, res.Disks[0].VolID)
	assert.Equal(t, reads.GarbageFound, res.Disks[0].Outcome)
	assert.Contains(t, w.disks(), volid)
	assert.Zero(t, w.cluster.CallCount("DeleteVolume"))
}

// crashedClone is a clone of proxy otherUID that a crashed host left with "lock: clone" and no
// task, its mark written; it returns the VMID.
func crashedClone(t *testing.T, w *world) int {
	t.Helper()
	vmid := proxy.VMIDFor(otherUID, w.cfg.Proxmox.VMIDRange, 0)
	w.cluster.CrashClone(vmid)
	cloneInProgress(t, w, otherUID, vmid, "")
	w.advance(time.Hour)
	i := slices.IndexFunc(w.vms(), func(v pvesim.VM) bool { return v.VMID == vmid })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, "clone", w.vms()[i].Config["lock"])
	return vmid
}

func TestGC_reportsAStaleCloneLockWithTheCommandThatClearsItAndLeavesItsVM(t *testing.T) {
	w := newWorld(t)
	vmid := crashedClone(t, w)
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.CloneLocks, 1)
	l := res.CloneLocks[0]
	assert.Equal(t, vmid, l.VMID)
	assert.Equal(t, "pve1", l.Node)
	assert.Equal(t, otherUID, l.UID)
	assert.True(t, l.Stale, l.Detail)
	assert.Equal(t, fmt.Sprintf("qm unlock %d", vmid), l.Command)
	assert.Greater(t, l.Age, 2*reads.DefaultGrace)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, reads.GarbageSkipped, res.VMs[0].Outcome)
	assert.Contains(t, res.VMs[0].Detail, "qm unlock")
	assert.Contains(t, w.vmids(), vmid, "an API token cannot destroy a locked VM")
	assert.Zero(t, w.cluster.CallCount("Destroy"))
}

func TestGC_doesNotReportACloneLockWhileACloneTaskRuns(t *testing.T) {
	w := newWorld(t)
	vmid := proxy.VMIDFor(otherUID, w.cfg.Proxmox.VMIDRange, 0)
	w.cluster.StallClone(vmid)
	cloneInProgress(t, w, otherUID, vmid, "")
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}, DryRun: true})

	require.NoError(t, err)
	require.Len(t, res.CloneLocks, 1)
	assert.False(t, res.CloneLocks[0].Stale)
	assert.Empty(t, res.CloneLocks[0].Command)
	assert.Contains(t, res.CloneLocks[0].Detail, "runs on node pve1")
}

func TestGC_doesNotReportACloneLockWhoseCloneEndedWithinTheGrace(t *testing.T) {
	w := newWorld(t)
	crashedClone(t, w)
	w.advance(time.Minute)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}, DryRun: true, Grace: 3 * time.Hour})

	require.NoError(t, err)
	require.Len(t, res.CloneLocks, 1)
	assert.False(t, res.CloneLocks[0].Stale)
	assert.Contains(t, res.CloneLocks[0].Detail, "within the grace period")
}

func TestCheck_reportsAnOrphanDiskAndAStaleCloneLock(t *testing.T) {
	w := newWorld(t)
	volid := w.leftDisk(inRange)
	vmid := crashedClone(t, w)
	w.advance(2 * reads.DefaultGrace)

	res := w.check()

	require.Len(t, res.OrphanDisks, 1)
	assert.Equal(t, volid, res.OrphanDisks[0].VolID)
	assert.Equal(t, reads.GarbageFound, res.OrphanDisks[0].Outcome)
	require.Len(t, res.CloneLocks, 1)
	assert.Equal(t, vmid, res.CloneLocks[0].VMID)
	assert.True(t, res.CloneLocks[0].Stale)
	assert.Contains(t, w.disks(), volid, "a check deletes nothing")
	assert.True(t, res.Healthy(), "leftovers make no node unhealthy")
}

func TestGC_deletesTheDisksAFailedCloneCouldNotFree(t *testing.T) {
	w := newWorld(t)
	vmid := proxy.VMIDFor(otherUID, w.cfg.Proxmox.VMIDRange, 0)
	w.cluster.LeakClone(vmid)
	cloneInProgress(t, w, otherUID, vmid, "")
	w.advance(time.Hour)
	require.NotContains(t, w.vmids(), vmid)
	leaked := slices.DeleteFunc(w.disks(), func(volid string) bool { return slices.Contains(templateVolumes(), volid) })
	require.NotEmpty(t, leaked)
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.Disks, len(leaked))
	for _, d := range res.Disks {
		assert.Equal(t, reads.GarbageDeleted, d.Outcome, d.Detail)
	}
	assert.Equal(t, templateVolumes(), w.disks())
}

func TestGC_collectsTheVMOfAStaleCloneLockOnceTheOperatorUnlockedIt(t *testing.T) {
	w := newWorld(t)
	vmid := crashedClone(t, w)
	// Past the grace for the mark's creation time too, which cloneInProgress takes from the
	// wall clock.
	w.advance(7 * 24 * time.Hour)
	require.NoError(t, w.cluster.Unlock(vmid))

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Empty(t, res.CloneLocks)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, vmid, res.VMs[0].VMID)
	assert.Equal(t, reads.GarbageDeleted, res.VMs[0].Outcome, res.VMs[0].Detail)
	require.Len(t, w.proxies.deleted(), 1)
	assert.Equal(t, otherUID, w.proxies.deleted()[0].UID)
}

func TestGC_reportsAnUnmarkedCloneLockOfItsRangeAsNeverTakenAndLeavesOneOutsideIt(t *testing.T) {
	w := newWorld(t)
	temporary := pve.VMConfig{"description": " qmclone temporary file\n", "lock": "clone"}
	w.add(pvesim.VM{Node: "pve1", VMID: inRange, Config: temporary}, pvesim.VM{Node: "pve1", VMID: 4000, Config: temporary})
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.CloneLocks, 1)
	l := res.CloneLocks[0]
	assert.Equal(t, inRange, l.VMID)
	assert.Empty(t, l.UID)
	assert.True(t, l.Stale)
	assert.Zero(t, l.Age, "no clone task ever ran: how long is not known")
	assert.Contains(t, l.Detail, "it carries no mark, so pveflow never takes it")
	assert.Empty(t, res.VMs)
}
