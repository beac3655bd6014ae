package pvesim

import (
	"encoding/json"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pve/pvefixture"
)

func TestDestroy_busyDisksAreLeftWithAWarningEachInTheLog(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	require.Equal(t, []string{"local-lvm:vm-123456-disk-0", "local-lvm:vm-123456-disk-1"}, volumesOf(c, newID))
	c.BusyVolume("local-lvm:vm-123456-disk-0")
	c.BusyVolume("local-lvm:vm-123456-disk-1")

	upid, err := c.Destroy(t.Context(), "pve1", newID)
	require.NoError(t, err)
	st := finish(t, c, clk, upid)
	log, err := c.TaskLog(t.Context(), "pve1", upid)
	require.NoError(t, err)

	assert.Equal(t, fixtureExit(t, "task_status_stopped_warnings"), st.ExitStatus)
	assert.Equal(t, fixtureLog(t, "task_log_destroy_warnings"), log, "PVE's text, as the fixture has it")
	assert.Equal(t, []string{"local-lvm:vm-123456-disk-0", "local-lvm:vm-123456-disk-1"}, volumesOf(c, newID))
	_, exists := vmByID(c, newID)
	assert.False(t, exists, "the VM is destroyed all the same")
}

func TestDestroy_removesTheDisksThatAreNotBusy(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	c.BusyVolume("local-lvm:vm-123456-disk-1")

	upid, err := c.Destroy(t.Context(), "pve1", newID)
	require.NoError(t, err)
	st := finish(t, c, clk, upid)

	assert.Equal(t, "WARNINGS: 1", st.ExitStatus)
	assert.Equal(t, []string{"local-lvm:vm-123456-disk-1"}, volumesOf(c, newID))
}

func TestBusyVolume_onAStorageThatIsNotLVMPanics(t *testing.T) {
	c, _ := newCluster(t)

	assert.Panics(t, func() { c.BusyVolume("local:123456/vm-123456-disk-0.qcow2") })
}

func TestTaskLog_endsWithTheExitStatusOnceTheTaskStopped(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)

	running, err := c.TaskLog(t.Context(), "pve1", upid)
	require.NoError(t, err)
	finish(t, c, clk, upid)
	stopped, err := c.TaskLog(t.Context(), "pve1", upid)
	require.NoError(t, err)

	assert.Equal(t, []pve.TaskLogLine{{N: 1, T: "no content"}}, running, "PVE's answer for an empty log")
	assert.Equal(t, []pve.TaskLogLine{{N: 1, T: "TASK OK"}}, stopped)
}

func TestTaskLog_aFailedTaskEndsWithTaskError(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	finish(t, c, clk, upid)

	log, err := c.TaskLog(t.Context(), "pve1", upid)

	require.NoError(t, err)
	assert.Equal(t, []pve.TaskLogLine{{N: 1, T: "TASK ERROR: VM 123456 already running"}}, log)
}

func TestTaskLog_ofATaskOfAnotherNodeIsNoSuchTask(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)

	_, err = c.TaskLog(t.Context(), "pve2", upid)

	var apiErr *pve.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, map[string]string{"upid": "no such task"}, apiErr.Errors)
}

func TestPermissions_areEveryKnownPrivilegeButTheDenied(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.DenyPrivileges = []string{"VM.Clone"} })

	privs, err := c.Permissions(t.Context(), "/vms/9000")

	require.NoError(t, err)
	assert.NotContains(t, privs, "VM.Clone")
	for _, p := range pve.KnownPrivileges() {
		if p != "VM.Clone" {
			assert.True(t, privs[p], "%s held, propagating", p)
		}
	}
	assert.Equal(t, pve.Missing([]pve.PathPrivileges{{Path: "/vms/9000", Privileges: []string{"VM.Audit", "VM.Clone"}}}, map[string]pve.Privileges{"/vms/9000": privs}),
		[]pve.MissingPrivilege{{Path: "/vms/9000", Privilege: "VM.Clone"}})
}

// fixtureLog is the task log of a task-log fixture.
func fixtureLog(t *testing.T, name string) []pve.TaskLogLine {
	t.Helper()
	var body struct {
		Data []pve.TaskLogLine `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(pvefixture.Load(t, name).Body), &body))
	return body.Data
}
