package workflows_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// haRound is how long the HA manager of the tests' clusters takes to act: long beside the
// hastart and hastop tasks, so that a workflow that took a task's end for the VM's start or
// stop would be caught.
const haRound = 10 * time.Second

// haWorld is a world whose creates register their proxies as HA resources in state.
func haWorld(t *testing.T, state string) *world {
	t.Helper()
	w := newWorld(t, func(o *pvesim.Options) { o.HARound = haRound })
	w.cfg.Proxmox.HA = config.HA{Enabled: true, State: state}
	return w
}

// taskTypes are the types of the tasks the cluster ran, in order.
func taskTypes(w *world) []string {
	var out []string
	for _, r := range w.cluster.TaskRuns() {
		out = append(out, r.Type)
	}
	return out
}

func haSID(vmid int) string { return "vm:" + strconv.Itoa(vmid) }

func TestHA_aCreateRegistersTheReadyProxyWhichTheManagerKeepsRunning(t *testing.T) {
	w := haWorld(t, "started")

	res, err := w.create(createInput())

	require.NoError(t, err)
	state, ok := w.cluster.HAState(haSID(res.VMID))
	assert.True(t, ok)
	assert.Equal(t, "started", state)
	w.advance(2 * haRound)
	assert.True(t, w.vms()[0].Running)
}

func TestHA_aCreateStartsAProxyTheManagerStoppedByAHastartAndWaitsForItToRun(t *testing.T) {
	w := haWorld(t, "started")
	res, err := w.create(createInput())
	require.NoError(t, err)
	_, err = w.cluster.Stop(context.Background(), res.Node, res.VMID) // PVE's stop: a hastop
	require.NoError(t, err)
	w.advance(2 * haRound)
	require.False(t, w.vms()[0].Running)

	again, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, res.VMID, again.VMID)
	assert.Contains(t, taskTypes(w), "hastart")
	assert.NotContains(t, taskTypes(w)[slices.Index(taskTypes(w), "hastop"):], "qmstart", "every start after the registration is the HA manager's")
	assert.True(t, w.vms()[0].Running)
	assert.NotEmpty(t, again.IPv4, "the create waited for the VM the manager started, and for its agent")
	state, _ := w.cluster.HAState(haSID(res.VMID))
	assert.Equal(t, "started", state)
}

func TestHA_aDeleteRemovesTheResourceBeforeItStopsTheVM(t *testing.T) {
	w := haWorld(t, "started")
	_, err := w.create(createInput())
	require.NoError(t, err)

	_, err = w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Empty(t, w.vms())
	assert.Empty(t, w.cluster.HAResources())
	assert.NotContains(t, taskTypes(w), "hastop")
}

func TestHA_aDeleteWaitsForTheManagerToStopAProxyRegisteredWhileHAIsOff(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.HARound = haRound })
	res, err := w.create(createInput())
	require.NoError(t, err)
	require.NoError(t, w.cluster.AddHAResource(context.Background(), pve.HAResourceParams{SID: haSID(res.VMID), State: "started"}))

	_, err = w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Contains(t, taskTypes(w), "hastop")
	assert.Equal(t, 1, w.cluster.CallCount("Destroy"), "the destroy waited for the VM to stop")
	assert.Empty(t, w.vms())
	assert.Empty(t, w.cluster.HAResources(), "the destroy's purge removed the resource")
}
