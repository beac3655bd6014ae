package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
)

// cloneBudget configures a stack whose clone waits get budget.
func cloneBudget(budget time.Duration) func(*config.Config) {
	return func(c *config.Config) { c.Budgets.Clone = budget }
}

// pollEvery configures a stack whose waits poll every interval.
func pollEvery(interval time.Duration) func(*config.Config) {
	return func(c *config.Config) {
		c.Poll = config.Poll{InitialInterval: interval, BackoffCoefficient: 1, MaximumInterval: interval}
	}
}

// awaitCloneWait starts the create of uid and returns its progress once its clone wait has
// polled the running clone.
func (s *stack) awaitCloneWait(t *testing.T) starter.Progress {
	t.Helper()
	_, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	var p starter.Progress
	eventually(t, "the clone wait polls the running clone", func() bool {
		p, err = s.starter.Progress(ctx(t), uid, starter.Create)
		return err == nil && p.ActivityType == "TaskStatus" && p.LastFailure != ""
	})
	return p
}

// awaitCloneEnd waits until the simulator's clone has finished.
func (s *stack) awaitCloneEnd(t *testing.T) {
	t.Helper()
	eventually(t, "the clone finishes", func() bool {
		runs := s.cluster.CloneRuns()
		return len(runs) == 1 && !runs[0].End.IsZero()
	})
}

func TestClient_progressWithTheWorkerStoppedIsDescribed(t *testing.T) {
	s := startStack(t, time.Minute)
	live := s.awaitCloneWait(t)
	s.stopWorker()
	stopped := time.Now()

	p, err := s.starter.Progress(ctx(t), uid, starter.Create)

	require.NoError(t, err)
	assert.Equal(t, starter.SourceQuery, live.Source)
	assert.Equal(t, starter.SourceDescribed, p.Source)
	assert.Equal(t, "no worker answered the status query within 3s", p.QueryError)
	assert.Equal(t, core.DefaultTaskQueue, p.Workers.TaskQueue)
	assert.False(t, p.Workers.LastPoll.After(stopped), "no poll since the worker stopped")
	assert.Equal(t, "running", p.State)
	assert.Equal(t, core.Status{UID: uid, Name: live.Name, Phase: core.PhaseCloning, Node: "pve1", VMID: live.VMID, StartedAt: p.StartedAt}, p.Status,
		"the search attributes, without step, task or error")
	assert.WithinDuration(t, live.StartedAt, p.StartedAt, time.Second)
	assert.Equal(t, "TaskStatus", p.ActivityType)
	assert.GreaterOrEqual(t, p.ActivityAttempt, live.ActivityAttempt)
	assert.Contains(t, p.LastFailure, "still running")
	assert.Equal(t, time.Minute, p.Budget)
}

func TestClient_aRequestOnATaskQueueNoWorkerPollsWaitsAndTheProxySaysWhy(t *testing.T) {
	s := startStack(t, time.Minute)
	orphan := starter.New(s.server.Client(), "no-worker-here", starter.WithNamespace(s.server.Namespace()))
	sendCtx, cancel := context.WithTimeout(ctx(t), 3*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		_, err := orphan.Create(sendCtx, createInput(uid))
		sent <- err
	}()

	var p starter.ProxyProgress
	eventually(t, "the request started the proxy's entity", func() bool {
		var err error
		p, err = orphan.ProxyProgress(ctx(t), uid)
		return err == nil
	})

	assert.Equal(t, starter.SourceDescribed, p.Source)
	assert.Equal(t, "no worker polls task queue no-worker-here", p.QueryError)
	assert.Equal(t, starter.Workers{TaskQueue: "no-worker-here"}, p.Workers)
	assert.Equal(t, "running", p.State)
	assert.Equal(t, uid, p.UID)
	assert.Nil(t, p.OperationProgress, "no worker took the request")
	assert.ErrorAs(t, <-sent, new(*client.WorkflowUpdateServiceTimeoutOrCanceledError), "no worker accepted the request")
}

func TestClient_progressWithAWorkerSaysWhenItLastPolled(t *testing.T) {
	s := startStack(t, time.Minute)

	p := s.awaitCloneWait(t)

	assert.Equal(t, starter.SourceQuery, p.Source)
	assert.Empty(t, p.QueryError)
	assert.Equal(t, 1, p.Workers.Pollers)
	assert.WithinDuration(t, time.Now(), p.Workers.LastPoll, time.Minute)
}

func TestClient_retryWaitPollsNowWithTheAttemptsReset(t *testing.T) {
	s := startStackWith(t, time.Second, client.Options{}, func(c *config.Config) {
		cloneBudget(10 * time.Minute)(c)
		pollEvery(time.Minute)(c)
	})
	p := s.awaitCloneWait(t)
	require.Greater(t, time.Until(p.NextAttempt), 30*time.Second, "the next poll is a minute away")
	s.awaitCloneEnd(t)

	w, err := s.starter.RetryWait(ctx(t), starter.WaitRef{UID: uid, Op: starter.Create})

	require.NoError(t, err)
	// The reset attempt may poll and complete before RetryWait describes the run again: then
	// there is no wait left to show.
	if w.ActivityID != "" {
		assert.Equal(t, p.ActivityID, w.ActivityID)
		assert.Equal(t, int32(1), w.ActivityAttempt)
	}
	// Within 30 s, well before the next poll a minute away.
	eventually(t, "the create moves past its clone", func() bool {
		p, err := s.starter.Progress(ctx(t), uid, starter.Create)
		return err == nil && p.Phase != core.PhaseCloning
	})
}

func TestClient_pausedWaitPollsAgainWhenResumed(t *testing.T) {
	s := startStackWith(t, time.Second, client.Options{}, pollEvery(200*time.Millisecond))
	s.awaitCloneWait(t)
	ref := starter.WaitRef{UID: uid, Op: starter.Create}

	paused, err := s.starter.PauseWait(ctx(t), ref, "looking at the storage")
	require.NoError(t, err)
	s.awaitCloneEnd(t)
	stillPaused, err := s.starter.Progress(ctx(t), uid, starter.Create)
	require.NoError(t, err)
	resumed, err := s.starter.ResumeWait(ctx(t), ref)
	require.NoError(t, err)
	_, err = s.starter.CreateResult(ctx(t), uid)

	require.NoError(t, err)
	assert.Equal(t, "paused", paused.ActivityState)
	assert.Equal(t, core.PhaseCloning, stillPaused.Phase, "no poll saw the clone end while paused")
	assert.Equal(t, "paused", stillPaused.ActivityState)
	assert.NotEqual(t, "paused", resumed.ActivityState)
}

func TestClient_waitOperationsNeedAPendingWait(t *testing.T) {
	s := startStack(t, time.Second)
	req, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	require.NoError(t, req.Get(ctx(t), nil))
	ref := starter.WaitRef{UID: uid, Op: starter.Create}

	_, err = s.starter.RetryWait(ctx(t), ref)

	require.ErrorIs(t, err, starter.ErrNoPendingWait)
	assert.Equal(t, "retry the wait of the create of proxy "+uid+": no pending wait: workflow "+core.CreateWorkflowID(uid)+" is completed", err.Error())
}

func TestClient_resumeWaitRefusesAWaitThatIsNotPaused(t *testing.T) {
	s := startStack(t, time.Minute)
	p := s.awaitCloneWait(t)

	_, err := s.starter.ResumeWait(ctx(t), starter.WaitRef{UID: uid, Op: starter.Create})

	require.Error(t, err)
	assert.Contains(t, err.Error(), "activity "+p.ActivityID+" (TaskStatus): it is not paused")
}

func TestClient_waitOperationsOnAnActivityThatIsNotPending(t *testing.T) {
	s := startStack(t, time.Minute)
	p := s.awaitCloneWait(t)

	_, err := s.starter.PauseWait(ctx(t), starter.WaitRef{UID: uid, Op: starter.Create, ActivityID: "999"}, "")

	require.ErrorIs(t, err, starter.ErrNoPendingWait)
	assert.Contains(t, err.Error(), "no pending activity 999; pending: "+p.ActivityID+" (TaskStatus)")
}

func TestClient_aStoppedWorkerStillListedIsNoLiveWorkerOnceItsTaskWaits(t *testing.T) {
	s := startStack(t, time.Minute)
	_, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	s.stopWorker()
	const other = "0b7e5c1a-2d4f-4e6a-9c8b-7a6f5e4d3c2b"
	go func() { _, _ = s.starter.Create(ctx(t), createInput(other)) }()

	var p starter.ProxyProgress
	eventually(t, "the entity's first workflow task waits unserved", func() bool {
		p, err = s.starter.ProxyProgress(ctx(t), other)
		return err == nil && p.Workers.Unserved == "workflow task"
	})

	assert.Equal(t, 1, p.Workers.Pollers, "Temporal still lists the stopped worker")
	assert.False(t, p.Workers.Live())
	assert.Regexp(t, `^no worker polls task queue pveflow: none took its workflow task, the last poll was \d+s ago$`, p.QueryError)
}

// A query that waits for a busy worker (its workflow task runs local activities, whose Proxmox
// calls take long) times out without the worker being taken for dead: waiting commands print no
// "no worker polls" note while it works.
func TestClient_aQueryHeldByABusyWorkerLeavesTheWorkerLive(t *testing.T) {
	s := startStack(t, time.Minute)
	release := s.cluster.Block("StorageStatus") // a create's preflight: a local activity
	t.Cleanup(release)
	_, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	eventually(t, "the create's preflight waits for Proxmox", func() bool { return s.cluster.CallCount("StorageStatus") > 0 })

	p, err := s.starter.Progress(ctx(t), uid, starter.Create)
	require.NoError(t, err)

	assert.Equal(t, starter.SourceDescribed, p.Source, "the query waited for the workflow task")
	assert.Equal(t, "no worker answered the status query within 3s", p.QueryError)
	assert.True(t, p.Workers.Live(), "the worker holds the workflow task: %+v", p.Workers)
}

func TestClient_createResultWaitsForACreateItsEntityHasYetToStart(t *testing.T) {
	s := startStack(t, 0)
	s.stopWorker()
	sendCtx, cancel := context.WithCancel(ctx(t))
	go func() { _, _ = s.starter.Create(sendCtx, createInput(uid)) }()
	eventually(t, "the request started the proxy's entity", func() bool {
		_, err := s.starter.ProxyProgress(ctx(t), uid)
		return err == nil
	})
	result := make(chan error, 1)
	go func() {
		_, err := s.starter.CreateResult(ctx(t), uid)
		result <- err
	}()
	time.Sleep(2 * time.Second)
	s.startWorker()

	require.NoError(t, <-result, "the result waits for the create the entity starts once a worker runs")
	cancel()
}

func TestClient_deleteResultOfAProxyWithNoDeleteAskedForSaysSo(t *testing.T) {
	s := startStack(t, 0)
	req, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	require.NoError(t, req.Get(ctx(t), nil))

	_, err = s.starter.DeleteResult(ctx(t), uid)

	assert.ErrorContains(t, err, "delete of proxy "+uid+": there is none (workflow "+core.DeleteWorkflowID(uid)+"), and its entity neither runs one nor has one asked")
}
