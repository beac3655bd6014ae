package workflows_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

// cloudInitWorld is a world whose machine type "small" waits for cloud-init, which runs
// cloudInitFor after the guest agent answers.
func cloudInitWorld(t *testing.T, cloudInitFor time.Duration, change ...func(*pvesim.Options)) *world {
	t.Helper()
	w := newWorld(t, append([]func(*pvesim.Options){func(o *pvesim.Options) { o.CloudInitDuration = cloudInitFor }}, change...)...)
	mt := w.cfg.Proxmox.MachineTypes["small"]
	mt.Readiness = config.ReadinessCloudInit
	w.cfg.Proxmox.MachineTypes["small"] = mt
	return w
}

func TestCreate_waitsForCloudInitWhenItsMachineTypeAsks(t *testing.T) {
	w := cloudInitWorld(t, 2*time.Minute)
	begun := w.clock.Now()

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.NotEmpty(t, res.IPv4)
	assert.Greater(t, w.cluster.CallCount("AgentFileRead"), 1, "looked until cloud-init had written its result")
	// The agent answers 20 s after the start (newWorld), cloud-init two minutes after that.
	assert.GreaterOrEqual(t, w.clock.Now().Sub(begun), 2*time.Minute+20*time.Second, "answered only once cloud-init had finished")
}

func TestCreate_aMachineTypeThatDoesNotAskReadsNoFile(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.CloudInitDuration = time.Hour })

	_, err := w.create(createInput())

	require.NoError(t, err)
	assert.Zero(t, w.cluster.CallCount("AgentFileRead"), "readiness address, the default, ends with the address")
}

func TestCreate_cloudInitWithErrorsFailsTheCreateWithThoseErrors(t *testing.T) {
	const moduleErr = "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))"
	w := cloudInitWorld(t, time.Second)
	w.cluster.FailCloudInit(firstVMID(w), moduleErr)

	_, err := w.create(createInput())

	require.Error(t, err)
	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), moduleErr)
	assert.Contains(t, err.Error(), "cloud-init of VM")
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr))
	var details activities.CloudInitErrors
	require.NoError(t, appErr.Details(&details))
	assert.Equal(t, []string{moduleErr}, details.Errors, "the errors, as a list, in the create's failure")
}

func TestCreate_cloudInitThatNeverFinishesFailsWithinItsBudget(t *testing.T) {
	w := cloudInitWorld(t, time.Second)
	w.cfg.Budgets.CloudInit = 3 * time.Minute
	w.cluster.StallCloudInit(firstVMID(w))
	begun := w.clock.Now()

	_, err := w.create(createInput())

	require.Error(t, err)
	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "wait for cloud-init of VM")
	assert.Contains(t, err.Error(), "did not finish within its budget")
	assert.Less(t, w.clock.Now().Sub(begun), 10*time.Minute, "the create's other waits and cloud-init's 3 minutes, not the agent's or a default budget")
}

func TestPreflight_aTokenWithoutFileReadIsNamedWhenAMachineTypeWaitsForCloudInit(t *testing.T) {
	w := cloudInitWorld(t, time.Second, func(o *pvesim.Options) { o.DenyPrivileges = []string{"VM.GuestAgent.FileRead"} })

	check := w.check()
	_, err := w.create(createInput())

	require.Len(t, check.Nodes, 1)
	assert.Equal(t, reads.ReasonMissingPrivilege, check.Nodes[0].Reason)
	assert.Equal(t, []pve.MissingPrivilege{{Path: "/vms", Privilege: "VM.GuestAgent.FileRead"}}, check.Nodes[0].MissingPrivileges)
	require.Error(t, err)
	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "VM.GuestAgent.FileRead on /vms")
	assert.Zero(t, w.cluster.CallCount("Clone"), "refused before anything is made")
}

func TestPreflight_fileReadIsNotAskedForWithoutAMachineTypeThatWaitsForCloudInit(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.DenyPrivileges = []string{"VM.GuestAgent.FileRead"} })

	check := w.check()
	_, err := w.create(createInput())

	assert.True(t, check.Nodes[0].Healthy)
	require.NoError(t, err)
}

func TestProxy_aCheckDoesNotCountAVMWhoseCloudInitFailedAsPresent(t *testing.T) {
	w := cloudInitWorld(t, time.Second)
	w.cfg.Entity.CheckInterval = 5 * time.Minute
	w.cluster.FailCloudInit(firstVMID(w), "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))")
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	var checked proxyvm.ProxyStatus
	p.at(30*time.Minute, func() { checked = p.status() })
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	require.Error(t, p.answer("create").err)
	assert.Contains(t, p.answer("create").err.Error(), "Runparts: 1 failures")
	assert.Equal(t, proxyvm.ProxyFailed, checked.Phase, "the VM runs with its address, yet is no proxy until a person looks")
	assert.Contains(t, checked.LastFailure, "Runparts: 1 failures", "the status shows cloud-init's errors")
	assert.False(t, checked.Observed.CheckedAt.IsZero(), "checked meanwhile")
}
