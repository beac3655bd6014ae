package pvesim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestHAManagerStatus_showsANodeInMaintenance(t *testing.T) {
	c, _ := newCluster(t)
	c.SetNodeMaintenance("pve2", true)

	st, err := c.HAManagerStatus(t.Context())

	require.NoError(t, err)
	assert.Equal(t, "maintenance", st.ManagerStatus.NodeStatus["pve2"])
	assert.Equal(t, "maintenance", st.LRMStatus["pve2"].Mode)
	assert.True(t, st.InMaintenance("pve2"))
	assert.False(t, st.InMaintenance("pve1"))
}

func TestHAManagerStatus_isEmptyWhereHAWasNeverUsed(t *testing.T) {
	c, _ := newCluster(t)

	st, err := c.HAManagerStatus(t.Context())

	require.NoError(t, err)
	assert.Equal(t, pve.HAManagerStatus{}, st)
	assert.False(t, st.InMaintenance("pve1"))
}

func TestHAResource_addedOnceAndRemovedOnce(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	sid := "vm:123456"

	require.NoError(t, c.AddHAResource(t.Context(), pve.HAResourceParams{SID: sid, State: "started"}))
	var apiErr *pve.APIError
	require.ErrorAs(t, c.AddHAResource(t.Context(), pve.HAResourceParams{SID: sid}), &apiErr)
	assert.Equal(t, "resource ID 'vm:123456' already defined", apiErr.Message)
	assert.Equal(t, []string{sid}, c.HAResources())

	require.NoError(t, c.DeleteHAResource(t.Context(), sid))
	require.ErrorAs(t, c.DeleteHAResource(t.Context(), sid), &apiErr)
	assert.Equal(t, "cannot delete service 'vm:123456', not HA managed!", apiErr.Message)
}

func TestHAResource_ofAVMThatDoesNotExistIsRefused(t *testing.T) {
	c, _ := newCluster(t)

	err := c.AddHAResource(t.Context(), pve.HAResourceParams{SID: "vm:123456"})

	var apiErr *pve.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "resource 'vm:123456' does not exist in cluster", apiErr.Message)
}

func TestDestroy_withPurgeRemovesTheVMsHAResource(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	require.NoError(t, c.AddHAResource(t.Context(), pve.HAResourceParams{SID: "vm:123456"}))

	upid, err := c.Destroy(t.Context(), "pve1", newID)
	require.NoError(t, err)
	require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)

	assert.Empty(t, c.HAResources())
}

// running reports whether vmid runs, as VMs reports it.
func running(t *testing.T, c *Cluster, vmid int) bool {
	t.Helper()
	v, ok := vmByID(c, vmid)
	require.True(t, ok)
	return v.Running
}

// register makes newID an HA resource with state.
func register(t *testing.T, c *Cluster, state string) {
	t.Helper()
	require.NoError(t, c.AddHAResource(t.Context(), pve.HAResourceParams{SID: "vm:123456", State: state}))
}

func TestHAStart_isAHastartTaskThatEndsBeforeTheManagerStartsTheVM(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	register(t, c, "stopped")

	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	st := finish(t, c, clk, upid)

	assert.Equal(t, "hastart", st.Type)
	assert.Equal(t, "OK", st.ExitStatus)
	assert.False(t, running(t, c, newID), "the task only requested the start")
	state, _ := c.HAState("vm:123456")
	assert.Equal(t, "started", state)
	clk.Advance(defaultHARound)
	assert.True(t, running(t, c, newID))
}

func TestHAStop_isAHastopTaskThatEndsBeforeTheManagerStopsTheVM(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	register(t, c, "started")

	upid, err := c.Stop(t.Context(), "pve1", newID)
	require.NoError(t, err)
	st := finish(t, c, clk, upid)

	assert.Equal(t, "hastop", st.Type)
	assert.Equal(t, "OK", st.ExitStatus)
	assert.True(t, running(t, c, newID), "the task only requested the stop")
	state, _ := c.HAState("vm:123456")
	assert.Equal(t, "stopped", state, "the CRM turns the stop command into the state stopped")
	clk.Advance(defaultHARound)
	assert.False(t, running(t, c, newID))
}

func TestHAStart_logsItsRequest(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	register(t, c, "stopped")
	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	finish(t, c, clk, upid)

	lines, err := c.TaskLog(t.Context(), "pve1", upid)

	require.NoError(t, err)
	assert.Equal(t, []pve.TaskLogLine{{N: 1, T: "Requesting HA start for VM 123456"}, {N: 2, T: "TASK OK"}}, lines)
}

func TestHAStart_endsOKOnALockedVMThatTheManagerThenLeavesStopped(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	require.NoError(t, c.HoldLock(newID, "backup", time.Minute))
	register(t, c, "stopped")

	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)

	assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
	clk.Advance(defaultHARound)
	assert.False(t, running(t, c, newID))
}

func TestHAManager_startsAStoppedVMRegisteredAsStarted(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	register(t, c, "started")

	assert.False(t, running(t, c, newID))
	clk.Advance(defaultHARound)
	assert.True(t, running(t, c, newID))
}

func TestHAManager_stopsARunningVMRegisteredAsStoppedOrDisabled(t *testing.T) {
	for _, state := range []string{"stopped", "disabled"} {
		t.Run(state, func(t *testing.T) {
			c, clk := newCluster(t)
			createVM(t, c, clk, newID)
			startVM(t, c, clk, newID)

			register(t, c, state)

			assert.True(t, running(t, c, newID))
			clk.Advance(defaultHARound)
			assert.False(t, running(t, c, newID))
		})
	}
}

func TestHAManager_actsAfterTheRoundTheOptionsSet(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.HARound = 10 * time.Second })
	createVM(t, c, clk, newID)
	register(t, c, "started")

	clk.Advance(10*time.Second - time.Millisecond)
	assert.False(t, running(t, c, newID))
	clk.Advance(time.Millisecond)
	assert.True(t, running(t, c, newID))
}

func TestHAManager_leavesAnIgnoredResourceToQemuServer(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	register(t, c, "ignored")
	clk.Advance(defaultHARound)
	require.False(t, running(t, c, newID), "the manager does not start an ignored resource")

	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	st := finish(t, c, clk, upid)

	assert.Equal(t, "qmstart", st.Type)
	assert.True(t, running(t, c, newID))
}

func TestDestroy_withoutPurgeIsRefusedForAnHAResourceInAnyState(t *testing.T) {
	for _, state := range []string{"started", "stopped", "ignored"} {
		t.Run(state, func(t *testing.T) {
			c, clk := newCluster(t)
			createVM(t, c, clk, newID)
			register(t, c, state)

			_, err := c.DestroyWith(t.Context(), "pve1", newID, DestroyParams{})

			var apiErr *pve.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 500, apiErr.Status)
			assert.Equal(t, "unable to remove VM 123456 - used in HA resources and purge parameter not set.", apiErr.Message)
			_, ok := vmByID(c, newID)
			assert.True(t, ok)
		})
	}
}

func TestDestroy_withoutPurgeChecksHABeforeRunning(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	register(t, c, "started")

	_, err := c.DestroyWith(t.Context(), "pve1", newID, DestroyParams{})

	assert.ErrorContains(t, err, "used in HA resources and purge parameter not set")
}

func TestDestroy_withoutPurgeOfAVMWithoutHAResourceDestroysIt(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	upid, err := c.DestroyWith(t.Context(), "pve1", newID, DestroyParams{})
	require.NoError(t, err)

	assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
	_, ok := vmByID(c, newID)
	assert.False(t, ok)
}
