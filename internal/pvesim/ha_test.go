package pvesim

import (
	"testing"

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
