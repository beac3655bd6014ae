package pvesim

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/pve"
)

// restarted is c as a simulator restarted at the same instant finds it: its Snapshot through
// JSON, restored into a new Default cluster.
func restarted(t *testing.T, c *Cluster, clk *ManualClock) (*Cluster, *ManualClock) {
	t.Helper()
	saved, err := json.Marshal(c.Snapshot())
	require.NoError(t, err)
	var s Snapshot
	require.NoError(t, json.Unmarshal(saved, &s))
	again, againClk := newCluster(t, func(o *Options) { o.Clock = NewManualClock(clk.Now()) })
	require.NoError(t, again.Restore(s))
	return again, againClk
}

// proxyWithStaticAddresses is a cluster with a clone of the template booted from a seed ISO
// whose network-config gives static addresses, and a second clone that still runs.
func proxyWithStaticAddresses(t *testing.T) (c *Cluster, clk *ManualClock, done, running pve.UPID) {
	t.Helper()
	c, clk = newCluster(t)
	done = startClone(t, c, newID)
	finish(t, c, clk, done)
	_, mac := parseNet(c.vms[newID].cfg["net0"])
	bootClonedWithSeed(t, c, clk, seedWithNetwork(t, []nocloud.Ethernet{{Name: "net0", MAC: mac,
		Addresses: []string{"192.0.2.10/24"}, Gateway4: "192.0.2.1"}}))
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4"}), "pending until the next start")
	running = startClone(t, c, newID+1)
	return c, clk, done, running
}

func TestRestore_hasTheVMsVolumesAndGuestsOfTheSnapshot(t *testing.T) {
	c, clk, _, _ := proxyWithStaticAddresses(t)

	again, againClk := restarted(t, c, clk)

	assert.Equal(t, c.VMs(), again.VMs(), "configs, running, pools")
	assert.Equal(t, c.Volumes(), again.Volumes(), "disks and ISOs with their content")
	assert.Equal(t, c.State().Guests, again.State().Guests, "the cores in effect, the instance, the static addresses")
	assert.Equal(t, agentInterfaceOf(t, c, clk, "net0"), agentInterfaceOf(t, again, againClk, "net0"), "the guest agent answers as before")
}

func TestRestore_aFinishedTaskReadsAsBeforeAndARunningOneAsDiedWithItsWorker(t *testing.T) {
	c, clk, done, running := proxyWithStaticAddresses(t)
	before, err := c.TaskStatus(t.Context(), "pve1", done)
	require.NoError(t, err)

	again, _ := restarted(t, c, clk)

	after, err := again.TaskStatus(t.Context(), "pve1", done)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	died, err := again.TaskStatus(t.Context(), "pve1", running)
	require.NoError(t, err)
	assert.Equal(t, pve.TaskStopped, died.Status)
	assert.Equal(t, "unexpected status", died.ExitStatus)
	vm, ok := vmByID(again, newID+1)
	require.True(t, ok, "the clone's VM stays")
	assert.Equal(t, "clone", vm.Config["lock"], "locked, as a clone whose worker died leaves it")
}

func TestRestore_newTasksTakePIDsAfterTheSnapshots(t *testing.T) {
	c, clk, _, running := proxyWithStaticAddresses(t)
	again, _ := restarted(t, c, clk)

	upid, err := again.Stop(t.Context(), "pve1", newID)

	require.NoError(t, err)
	last, err := pve.ParseUPID(running)
	require.NoError(t, err)
	stop, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	assert.Greater(t, stop.PID, last.PID)
}

func TestRestore_aSnapshotOfTheRestoredClusterIsTheSame(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)

	again, _ := restarted(t, c, clk)

	assert.Equal(t, c.Snapshot(), again.Snapshot())
}

func TestRestore_refusesAClusterInUse(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	assert.ErrorContains(t, c.Restore(Snapshot{}), "the cluster has been used since New")
}
