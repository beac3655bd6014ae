package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestCreate_proxyMigratesOnlineBetweenTwoNodes(t *testing.T) {
	w := newWorld(t)
	res, err := w.create(createInput())
	require.NoError(t, err)
	require.Equal(t, "pve1", res.Node)

	// The default cluster's disks are on local-lvm, which each node has its own of.
	upid, err := w.cluster.Migrate(t.Context(), res.Node, res.VMID, pve.MigrateParams{Target: "pve2", Online: true, WithLocalDisks: true})
	require.NoError(t, err)
	w.advance(time.Second)

	st, err := w.cluster.TaskStatus(t.Context(), res.Node, upid)
	require.NoError(t, err)
	assert.Equal(t, "OK", st.ExitStatus)
	vms := w.vms()
	require.Len(t, vms, 1)
	assert.Equal(t, "pve2", vms[0].Node)
	assert.True(t, vms[0].Running)
}
