package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/workflows"
)

// The tests of a create at fleet scale: locks waited out, clones made again after a lock, and
// (in admission_test.go) clones admitted per storage.

func TestFleet_templateLockedByABackupIsWaitedOut(t *testing.T) {
	w := newWorld(t)
	require.NoError(t, w.cluster.HoldLock(9000, "backup", 3*time.Minute))

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, firstVMID(w), res.VMID)
	assert.Greater(t, w.cluster.CallCount("Clone"), 1, "the clone was refused while the backup ran")
	assert.Len(t, w.vms(), 1)
}

func TestFleet_templateLockedLongerThanTheBudgetSaysSo(t *testing.T) {
	w := newWorld(t)
	require.NoError(t, w.cluster.HoldLock(9000, "backup", time.Hour))

	_, err := w.create(createInput())

	assert.Equal(t, workflows.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "still locked when its budget ran out")
	assert.Contains(t, err.Error(), "VM is locked (backup)")
	assert.Empty(t, w.vms())
}

func TestFleet_cloneFailingOnceOnTheStorageLockIsClonedAgain(t *testing.T) {
	w := newWorld(t)
	w.cluster.FailTask("qmclone", "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout")

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, firstVMID(w), res.VMID, "the same VMID, which PVE freed")
	assert.Equal(t, 2, w.cluster.CallCount("Clone"))
	assert.Len(t, w.vms(), 1)
}

func TestFleet_cloneFailingOnTheStorageLockForTheWholeBudgetIsTransient(t *testing.T) {
	w := newWorld(t)
	w.cfg.Budgets.Clone = 2 * time.Minute
	for range 100 {
		w.cluster.FailTask("qmclone", "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout")
	}

	_, err := w.create(createInput())

	assert.Equal(t, workflows.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "pve-storage-local-lvm")
	assert.Empty(t, w.vms())
}
