package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// created is a world holding the proxy that CreateProxy made.
func created(t *testing.T) (*world, proxyvm.CreateProxyResult) {
	t.Helper()
	w := newWorld(t)
	res, err := w.create(createInput())
	require.NoError(t, err)
	return w, res
}

func TestDelete_runningVMStoppedFirstThenDestroyed(t *testing.T) {
	w, vm := created(t)

	res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Equal(t, []activities.VMRef{{Node: "pve1", VMID: vm.VMID}}, res.Destroyed)
	assert.Equal(t, 1, w.cluster.CallCount("Stop"))
	assert.Empty(t, w.vms())
}

func TestDelete_removesSeedISOKeptOnSharedStorage(t *testing.T) {
	w := newWorld(t, withSharedISOStorage)
	w.cfg.Proxmox.ISOStorage = "isos"
	_, err := w.create(createInput())
	require.NoError(t, err)
	require.Len(t, w.isos(), 1)

	_, err = w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Empty(t, w.isos())
}

func TestDelete_twiceSucceeds(t *testing.T) {
	w, _ := created(t)
	_, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})
	require.NoError(t, err)

	res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Empty(t, res.Destroyed)
}

func TestDelete_absentIsNoOp(t *testing.T) {
	w := newWorld(t)

	res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Empty(t, res.Destroyed)
	assert.Zero(t, w.cluster.CallCount("Destroy"))
}

func TestDelete_foreignOrUnmarkedVMIsLeftAlone(t *testing.T) {
	tests := map[string]string{
		"unmarked":        "made by hand",
		"other proxy UID": proxy.FormatDescription(proxy.Mark{UID: "another-uid", CreatedAt: time.Now()}),
	}
	for name, description := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			require.NoError(t, w.cluster.AddVM(pvesim.VM{Node: "pve1", VMID: 4242, Running: true, Config: pve.VMConfig{
				"name": proxy.NameFromUID(uid), "description": description,
			}}))

			res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

			require.NoError(t, err)
			assert.Empty(t, res.Destroyed)
			assert.Equal(t, []int{4242}, res.Skipped)
			assert.Len(t, w.vms(), 1)
			assert.Zero(t, w.cluster.CallCount("Stop"))
		})
	}
}

func TestDelete_stoppedVMSkipsStop(t *testing.T) {
	w, vm := created(t)
	_, err := w.cluster.Stop(t.Context(), vm.Node, vm.VMID)
	require.NoError(t, err)
	w.advance(time.Minute)
	stops := w.cluster.CallCount("Stop")

	_, err = w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Equal(t, stops, w.cluster.CallCount("Stop"))
	assert.Empty(t, w.vms())
}

func TestDelete_lockedVMWaitedOnThenDestroyed(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Minute} })
	// A clone of the proxy is half done: its mark is written, its lock not yet cleared.
	_, err := w.cluster.Clone(t.Context(), "pve1", 9000, pve.CloneParams{
		NewID: firstVMID(w), Name: proxy.NameFromUID(uid), Full: true,
		Description: proxy.FormatDescription(proxy.Mark{UID: uid, CreatedAt: time.Now().UTC().Truncate(time.Second)}),
	})
	require.NoError(t, err)
	w.advance(2 * time.Minute)

	res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Len(t, res.Destroyed, 1)
	assert.Empty(t, w.vms())
}

func TestDelete_destroyTaskFailureIsTransient(t *testing.T) {
	w, _ := created(t)
	w.cluster.FailTask("qmdestroy", "storage 'local-lvm' is not online")

	_, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	assert.Equal(t, core.FailTransient, failureType(t, err))
}

func TestDelete_waitsOutADestroyTaskThatFailsOnABackupLock(t *testing.T) {
	w := newWorld(t)
	_, err := w.create(createInput())
	require.NoError(t, err)
	// PVE checks the lock inside the destroy task: the call was taken, its task failed.
	w.cluster.FailTask("qmdestroy", "VM is locked (backup)")

	_, err = w.delete(deleteInput())

	require.NoError(t, err)
	assert.Equal(t, 2, w.cluster.CallCount("Destroy"))
	assert.Empty(t, w.vms())
}

// destroyedBeforeStop is a cluster on which the first stop comes after the VM is gone: what a
// delete replayed on a new worker meets when the worker before it was killed after its stop and
// destroy took effect but before the workflow task that made them completed. The earlier
// worker's stop and destroy are made here, then the stop is passed on, as the replay makes it.
type destroyedBeforeStop struct {
	pve.API
	t    *testing.T
	once sync.Once
}

func (d *destroyedBeforeStop) Stop(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	d.once.Do(func() {
		// The test's stop and destroy tasks end at once: each call sees the one before it done.
		_, err := d.API.Stop(ctx, node, vmid)
		assert.NoError(d.t, err)
		_, err = d.API.Destroy(ctx, node, vmid)
		assert.NoError(d.t, err)
	})
	return d.API.Stop(ctx, node, vmid)
}

func TestDelete_stopMadeAgainOnAVMAlreadyDestroyedCountsItDestroyed(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.TaskDurations["qmstop"], o.TaskDurations["qmdestroy"] = 0, 0 })
	vm, err := w.create(createInput())
	require.NoError(t, err)
	w.wrap = func(api pve.API) pve.API { return &destroyedBeforeStop{API: api, t: t} }

	res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Equal(t, []activities.VMRef{{Node: "pve1", VMID: vm.VMID}}, res.Destroyed, "the run's own destroy, made before its worker was lost")
	assert.Empty(t, w.vms())
	assert.Empty(t, w.isos(), "the delete went on to the seed ISO")
	assert.Equal(t, 1, w.cluster.CallCount("Destroy"), "nothing left to destroy")
}

// A stop made again on replay meets what the lost worker left under way: its destroy holding the
// VM's config lock, then the VM gone. PVE checks both in the stop's task.
func TestDelete_stopTaskThatFailsOnALockOrMissesTheVMIsFollowedUp(t *testing.T) {
	tests := map[string]func(vmid int) string{
		"on the lock": func(vmid int) string {
			return "can't lock file '/var/lock/qemu-server/lock-" + itoa(vmid) + ".conf' - got timeout"
		},
		"not finding the VM": func(vmid int) string {
			return "Configuration file 'nodes/pve1/qemu-server/" + itoa(vmid) + ".conf' does not exist"
		},
	}
	for name, exit := range tests {
		t.Run(name, func(t *testing.T) {
			w, vm := created(t)
			stops := w.cluster.CallCount("Stop")
			// The task fails without its effect: the VM still runs, and the stop is made again.
			w.cluster.FailTask("qmstop", exit(vm.VMID))

			res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

			require.NoError(t, err)
			assert.Equal(t, []activities.VMRef{{Node: "pve1", VMID: vm.VMID}}, res.Destroyed)
			assert.Equal(t, stops+2, w.cluster.CallCount("Stop"))
			assert.Empty(t, w.vms())
		})
	}
}
