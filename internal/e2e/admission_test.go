package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/admission"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The clone admission together with the creates that start it and ask it, on the real server:
// what the workflow tests in package workflows cannot show, as one test environment runs one
// workflow.

// admissionOfHome is the admission run of the simulator's default template storage.
func admissionOfHome(s *stack) client.WorkflowRun {
	return s.client.GetWorkflow(context.Background(), admission.CloneAdmissionWorkflowID(core.DefaultTaskQueue, "pve1/local-lvm"), "")
}

// admissionState asks the admission run for its holders and queue; one not running yet answers
// that someone waits.
func admissionState(t testing.TB, s *stack, run client.WorkflowRun) admission.AdmissionState {
	t.Helper()
	var st admission.AdmissionState
	v, err := s.client.QueryWorkflow(context.Background(), run.GetID(), run.GetRunID(), admission.AdmissionQuery)
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil {
		return admission.AdmissionState{Waiting: []admission.Holder{{}}}
	}
	return st
}

// oneCloneAtATime is a stack whose creates clone one at a time, each clone taking cloneFor.
func oneCloneAtATime(t *testing.T, cloneFor time.Duration) (*stack, *pvesim.Cluster) {
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": cloneFor} })
	cfg := fastConfig(t)
	cfg.Clones.PerStorage = 1
	return startStack(t, cluster, cfg), cluster
}

func TestE2E_cancellingTheCreateThatStartedTheAdmissionLeavesTheAdmissionRunning(t *testing.T) {
	s, cluster := oneCloneAtATime(t, 4*time.Second)
	create := s.startCreate(createInput(uid)) // the first create: it starts the admission
	eventually(t, "the create clones", func() bool { return cluster.CallCount("Clone") > 0 })

	_, err := served[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))
	require.NoError(t, err)
	_, err = served[proxyvm.CreateProxyResult](t, create)
	require.Equal(t, starter.FailSuperseded, starter.FailureType(err), "%v", err)

	desc, err := s.client.DescribeWorkflowExecution(context.Background(), admissionOfHome(s).GetID(), "")
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.GetWorkflowExecutionInfo().GetStatus())
	serve[proxyvm.CreateProxyResult](t, s.startCreate(createInput(otherUID)))
}

func TestE2E_aCreateStoppedWhileCloningKeepsItsLeaseUntilTheCloneEnds(t *testing.T) {
	s, cluster := oneCloneAtATime(t, 6*time.Second)
	first := s.startCreate(createInput(uid))
	eventually(t, "the first create waits for its clone", func() bool { return cluster.CallCount("TaskStatus") > 0 })
	second := s.startCreate(createInput(otherUID))
	eventually(t, "the second create queues", func() bool { return len(admissionState(t, s, admissionOfHome(s)).Waiting) == 1 })

	_, err := served[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))
	require.NoError(t, err)
	_, err = served[proxyvm.CreateProxyResult](t, first)
	require.Error(t, err)
	serve[proxyvm.CreateProxyResult](t, second)

	assert.Equal(t, 1, cluster.MaxConcurrentClones("pve1", "local-lvm"), "clones.perStorage is 1: %+v", cluster.CloneRuns())
}

func TestE2E_aQueuedCreatesProgressShowsItsPlaceFromTheAdmission(t *testing.T) {
	s, cluster := oneCloneAtATime(t, 6*time.Second)
	first := s.startCreate(createInput(uid))
	eventually(t, "the first create clones", func() bool { return cluster.CallCount("Clone") > 0 })
	second := s.startCreate(createInput(otherUID))
	eventually(t, "the second create queues", func() bool { return len(admissionState(t, s, admissionOfHome(s)).Waiting) == 1 })
	third := s.startCreate(createInput(thirdUID))
	eventually(t, "the third create queues", func() bool { return len(admissionState(t, s, admissionOfHome(s)).Waiting) == 2 })

	progress, err := s.starter.Progress(context.Background(), thirdUID, starter.Create)

	require.NoError(t, err)
	assert.Equal(t, core.PhaseQueued, progress.Phase)
	assert.Equal(t, 1, progress.QueuedBehind)
	assert.Contains(t, progress.Step, "1 ahead")
	for _, r := range []*starter.Request{first, second, third} {
		serve[proxyvm.CreateProxyResult](t, r)
	}
}

// The admission learns how long its storage's clones take from the looks that see them end,
// which send it with the lease; and it runs with a short workflow task timeout, so that a worker
// that dies holding one of its tasks keeps the storage's free slots free for 2 s, not 10.
func TestE2E_theAdmissionLearnsHowLongClonesTakeAndOutlivesAWorkerHoldingItsTaskBriefly(t *testing.T) {
	const cloneFor = 2 * time.Second
	s, _ := oneCloneAtATime(t, cloneFor)
	serve[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
	serve[proxyvm.CreateProxyResult](t, s.startCreate(createInput(otherUID)))

	st := admissionState(t, s, admissionOfHome(s))
	require.Len(t, st.RecentClones, 2)
	// Seen to take the clone's time, from a little after its start, to a look's pace after its
	// end, and the time a look takes to reach the simulator and come back.
	for _, took := range st.RecentClones {
		assert.True(t, took > cloneFor-500*time.Millisecond && took <= cloneFor+s.cfg.Poll.NextLook(cloneFor)+200*time.Millisecond, "a clone of %s seen to take %s", cloneFor, took)
	}
	desc, err := s.client.DescribeWorkflowExecution(context.Background(), admissionOfHome(s).GetID(), "")
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, desc.GetExecutionConfig().GetDefaultWorkflowTaskTimeout().AsDuration())
}

// A storage's clone admission and a proxy's operations go before the entities in their task
// queue: a fleet asked for at once reaches its clone slots while its entities still start.
func TestE2E_theAdmissionAndTheOperationsGoBeforeTheEntitiesInTheirTaskQueue(t *testing.T) {
	s, _ := oneCloneAtATime(t, time.Second)
	serve[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))

	for _, tc := range []struct {
		workflowID string
		priority   int32
	}{
		{admissionOfHome(s).GetID(), 1},
		{core.CreateWorkflowID(uid), 2},
		{core.ProxyWorkflowID(uid), 0}, // Temporal's default
	} {
		desc, err := s.client.DescribeWorkflowExecution(context.Background(), tc.workflowID, "")
		require.NoError(t, err)
		assert.Equal(t, tc.priority, desc.GetWorkflowExecutionInfo().GetPriority().GetPriorityKey(), tc.workflowID)
	}
}
