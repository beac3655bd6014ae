package workflows_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/workflows/core"
)

func TestFleet_aNodeInMaintenanceIsNeverChosen(t *testing.T) {
	w := newWorld(t)
	perNodeTemplates(t, w)
	busy(t, w, "pve1", 32768)
	w.cluster.SetNodeMaintenance("pve2", true) // the emptiest

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, "pve1", res.Node)
}

func TestFleet_aZoneInMaintenanceIsRefusedTransientBeforeAnyClone(t *testing.T) {
	w := newWorld(t)
	perNodeTemplates(t, w)
	w.cluster.SetNodeMaintenance("pve2", true)
	in := createInput()
	in.Zone = "pve2"

	_, err := w.create(in)

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "node pve2 is in HA maintenance mode")
	assert.Zero(t, w.cluster.CallCount("Clone"))
}
