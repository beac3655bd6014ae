package pvesim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestAgent_notRunningUntilBootDelay(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.AgentBootDelay = 30 * time.Second })
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)

	_, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_agent_not_running", err)
	assert.Equal(t, pve.AgentNotRunning, pve.Classify(err))

	clk.Advance(30 * time.Second)
	_, err = c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	assert.NoError(t, err)
}

func TestAgent_interfacesAfterBoot(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0"}))
	startVM(t, c, clk, newID)
	clk.Advance(time.Minute)

	ifaces, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, []pve.AgentInterface{
		{Name: "lo", HardwareAddress: "00:00:00:00:00:00", IPAddresses: []pve.AgentIPAddress{
			{Address: "127.0.0.1", Type: "ipv4", Prefix: 8},
			{Address: "::1", Type: "ipv6", Prefix: 128},
		}},
		{Name: "ens18", HardwareAddress: "bc:24:11:2e:c5:4a", IPAddresses: []pve.AgentIPAddress{
			{Address: "169.254.240.208", Type: "ipv4", Prefix: 16},
			{Address: "10.1.237.208", Type: "ipv4", Prefix: 24},
			{Address: "fe80::be24:11ff:fe2e:c54a", Type: "ipv6", Prefix: 64},
		}},
	}, ifaces)
}

func TestAgent_addressesDifferPerVM(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	createVM(t, c, clk, newID+1)
	startVM(t, c, clk, newID)
	startVM(t, c, clk, newID+1)
	clk.Advance(time.Minute)

	a, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	require.NoError(t, err)
	b, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID+1)
	require.NoError(t, err)
	assert.NotEqual(t, a[1], b[1])
}

func TestAgent_vmStoppedIsNotRunning(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	_, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_agent_vm_stopped", err)
	assert.Equal(t, pve.NotRunning, pve.Classify(err))
}

func TestAgent_notConfigured(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"delete": "agent"}))
	startVM(t, c, clk, newID)

	_, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_agent_not_configured", err)
}

func TestAgent_stalledNeverAnswers(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	c.StallAgent(newID)
	startVM(t, c, clk, newID)

	clk.Advance(time.Hour)
	_, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_agent_not_running", err)
}

func TestPause_runningButPausedWithSilentAgentUntilStopped(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	clk.Advance(time.Second)

	require.NoError(t, c.Pause(newID))

	st, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "running", st.Status)
	assert.Equal(t, "paused", st.QMPStatus)
	_, err = c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	assert.ErrorContains(t, err, "QEMU guest agent is not running")

	upid, err := c.Stop(t.Context(), "pve1", newID)
	require.NoError(t, err)
	finish(t, c, clk, upid)
	st, err = c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "stopped", st.QMPStatus)
}

func TestPause_refusesAStoppedVM(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	assert.Error(t, c.Pause(newID))
}

func TestAgentFileRead_cloudInitResultAppearsCloudInitDurationAfterTheAgentAnswers(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.AgentBootDelay, o.CloudInitDuration = 10*time.Second, 20*time.Second })
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)

	_, err := c.AgentFileRead(t.Context(), "pve1", newID, CloudInitResultPath)
	requireFixtureError(t, "err_agent_not_running", err)

	clk.Advance(10 * time.Second)
	_, err = c.AgentFileRead(t.Context(), "pve1", newID, CloudInitResultPath)
	requireFixtureError(t, "err_agent_file_missing", err)

	clk.Advance(20 * time.Second)
	content, err := c.AgentFileRead(t.Context(), "pve1", newID, CloudInitResultPath)
	require.NoError(t, err)
	assert.JSONEq(t, `{"v1": {"datasource": "DataSourceNone", "errors": []}}`, content)
}

func TestAgentFileRead_failedCloudInitListsItsErrors(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	c.FailCloudInit(newID, "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))")
	startVM(t, c, clk, newID)
	clk.Advance(time.Minute)

	content, err := c.AgentFileRead(t.Context(), "pve1", newID, CloudInitResultPath)
	require.NoError(t, err)
	assert.JSONEq(t, `{"v1": {"datasource": "DataSourceNone", "errors": ["('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))"]}}`, content)
}

func TestAgentFileRead_stalledCloudInitNeverWritesItsResult(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	c.StallCloudInit(newID)
	startVM(t, c, clk, newID)
	clk.Advance(time.Hour)

	_, err := c.AgentFileRead(t.Context(), "pve1", newID, CloudInitResultPath)
	requireFixtureError(t, "err_agent_file_missing", err)
}

func TestAgentFileRead_anotherFileCannotBeOpenedAsPVESays(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	clk.Advance(time.Minute)

	_, err := c.AgentFileRead(t.Context(), "pve1", newID, "/etc/shadow")
	var apiErr *pve.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 500, apiErr.Status)
	assert.Equal(t, "Agent error: failed to open file '/etc/shadow' (mode: 'r'): No such file or directory", apiErr.Message)
}

func TestAgentFileRead_needsFileReadOrUnrestrictedBeforeAnythingElse(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.DenyPrivileges = []string{"VM.GuestAgent.FileRead"} })

	// The permission check comes before the VM is looked up: a VM that does not exist is
	// refused the same way.
	_, err := c.AgentFileRead(t.Context(), "pve1", newID, CloudInitResultPath)
	var apiErr *pve.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 403, apiErr.Status)
	assert.Equal(t, "Permission check failed (/vms/123456, VM.GuestAgent.FileRead|VM.GuestAgent.Unrestricted)", apiErr.Message)
}

func TestAgentFileRead_auditAloneDoesNotRead(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.DenyPrivileges = []string{"VM.GuestAgent.FileRead"} })
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	clk.Advance(time.Minute)

	_, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	require.NoError(t, err, "VM.GuestAgent.Audit reads the interfaces")
	_, err = c.AgentFileRead(t.Context(), "pve1", newID, CloudInitResultPath)
	assert.Equal(t, pve.Permanent, pve.Classify(err))
}
