package starter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

func TestClient_getProxyRunsBesideARunningCreateAndFindsItsVM(t *testing.T) {
	s := startStack(t, 2*time.Second)
	req, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	eventually(t, "the create clones", func() bool { return s.cluster.CallCount("Clone") > 0 })

	_, err = s.starter.GetProxy(ctx(t), uid)
	assert.ErrorIs(t, err, starter.ErrTransient, "the VM is being cloned")
	assert.Equal(t, core.FailTransient, starter.FailureType(err))

	var created proxyvm.CreateProxyResult
	require.NoError(t, req.Get(ctx(t), &created))
	for _, key := range []string{uid, created.ProviderID} {
		got, err := s.starter.GetProxy(ctx(t), key)
		require.NoError(t, err, key)
		assert.Equal(t, proxy.Running, got.State)
		assert.Equal(t, created.IPv4, got.IPv4)
		assert.Equal(t, uid, got.UID)
	}
}

func TestClient_readsOfAnEmptyCluster(t *testing.T) {
	s := startStack(t, 50*time.Millisecond)

	_, err := s.starter.GetProxy(ctx(t), uid)
	assert.ErrorIs(t, err, starter.ErrNotFound)
	assert.ErrorContains(t, err, "no VM carries its mark")
	assert.NotContains(t, err.Error(), "workflow execution error", "the message is the workflow's own")

	listed, err := s.starter.ListProxies(ctx(t))
	require.NoError(t, err)
	assert.Empty(t, listed.Proxies)

	health, err := s.starter.CheckHealth(ctx(t))
	require.NoError(t, err)
	assert.True(t, health.Healthy(), "%+v", health.Nodes)
}

func TestClient_getProxyRefusesKeysBeforeCallingTemporal(t *testing.T) {
	c := starter.New(nil, core.DefaultTaskQueue) // a call to Temporal would panic

	_, err := c.GetProxy(ctx(t), "vms/12/proxy-x")
	assert.ErrorIs(t, err, starter.ErrInvalidProviderID)
	_, err = c.GetProxy(ctx(t), "not a uid")
	assert.ErrorIs(t, err, starter.ErrInvalidUID)
}

func TestClient_healthScheduleAppliedTwiceRunsAndItsLastResultIsReadable(t *testing.T) {
	s := startStack(t, 50*time.Millisecond)
	_, err := s.starter.LastHealth(ctx(t))
	require.Error(t, err, "no schedule yet")

	require.NoError(t, s.starter.ApplyHealthSchedule(ctx(t), time.Hour))
	require.NoError(t, s.starter.ApplyHealthSchedule(ctx(t), time.Second), "a second apply updates the schedule")

	handle := s.server.Client().ScheduleClient().GetHandle(ctx(t), core.HealthScheduleID(core.DefaultTaskQueue))
	desc, err := handle.Describe(ctx(t))
	require.NoError(t, err)
	require.Len(t, desc.Schedule.Spec.Intervals, 1)
	assert.Equal(t, time.Second, desc.Schedule.Spec.Intervals[0].Every)
	var last reads.CheckHealthResult
	eventually(t, "a scheduled check completes", func() bool {
		last, err = s.starter.LastHealth(ctx(t))
		return err == nil
	})
	assert.True(t, last.Healthy())
	require.Len(t, last.Nodes, 1)
	assert.Equal(t, "pve1", last.Nodes[0].Name)
}

func TestClient_aGetThatFindsNoVMCompletesItsWorkflow(t *testing.T) {
	s := startStack(t, 50*time.Millisecond)
	var id string
	_, err := s.starter.GetProxy(starter.WithStarted(ctx(t), func(workflowID string) { id = workflowID }), uid)
	require.ErrorIs(t, err, starter.ErrNotFound)

	desc, err := s.server.Client().DescribeWorkflowExecution(ctx(t), id, "")

	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, desc.GetWorkflowExecutionInfo().GetStatus(), "no failed workflow in the UI")
}
