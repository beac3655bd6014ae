package workflows_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/admission"
	"github.com/pveflow/pveflow/workflows/core"
)

// A wait that needs more than its budget is answered by starting the create again: the run
// fails Transient, and the next one resumes on the VM the first cloned.
func TestCreate_aWaitOutOfBudgetFailsTransientAndANewStartResumesOnTheSameVM(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": 5 * time.Minute, "qmstart": 3 * time.Second}
	})
	w.cfg.Budgets.Clone = 2 * time.Minute

	_, err := w.create(createInput())
	require.Error(t, err)
	assert.Equal(t, core.FailTransient, failureType(t, err))
	cloned := w.vms()
	require.Len(t, cloned, 1)
	w.advance(5 * time.Minute)
	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, cloned[0].VMID, res.VMID)
	assert.Len(t, w.vms(), 1)
	assert.Equal(t, 1, w.cluster.CallCount("Clone"))
}

// A stalled clone's wait shows in the UI as "Attempt n of MaximumAttempts": the maximum is what
// the wait can reach within its budget, a few looks more than it makes, not budget/interval
// (602 for 10 minutes) of which it makes a tenth.
func TestCreate_aStalledClonesAttemptMaximumFitsItsBudget(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": time.Hour}
	})
	w.cfg.Budgets.Clone = 10 * time.Minute
	env := w.env()
	var made int32
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == "TaskStatus" {
			made = max(made, info.Attempt)
		}
	})
	maximum := core.AttemptsWithin(w.cfg.Budgets.Clone, w.cfg.Poll)

	w.runOp(env, core.CreateProxyName, createInput())

	require.Error(t, env.GetWorkflowError())
	assert.Equal(t, core.FailTransient, failureType(t, env.GetWorkflowError()))
	assert.Greater(t, maximum, made, "the budget, not the attempt count, ended the wait")
	assert.LessOrEqual(t, maximum, made+config.ExpectedLooks+2, "the maximum is what the budget lets the wait reach")
}

// A clone's look lost with its worker (killed while it looked) is made again the poll's first
// interval after its heartbeat stopped, however many looks the wait has made: its slot stands
// free meanwhile. Its looks space themselves, so the retry policy spaces only those.
func TestCreate_aClonesLookLostWithItsWorkerIsMadeAgainAfterThePollsFirstInterval(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": 2 * time.Minute}
	})
	env := w.env()
	var policies []*temporal.RetryPolicy
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&scheduledSeen{activity: func(name string, o workflow.ActivityOptions) {
		if name == "TaskStatus" && o.HeartbeatTimeout > 0 {
			policies = append(policies, o.RetryPolicy)
		}
	}}}})

	w.runOp(env, core.CreateProxyName, createInput())

	require.NoError(t, env.GetWorkflowError())
	require.NotEmpty(t, policies, "the clone's wait heartbeats")
	for _, p := range policies {
		require.NotNil(t, p)
		assert.Equal(t, w.cfg.Poll.InitialInterval, p.InitialInterval)
		assert.Equal(t, 1.0, p.BackoffCoefficient, "a lost look's retry does not grow with the wait's attempts")
	}
}

// Every task a create waits for is seen to have ended within a fifth of its duration or a
// second, whichever is more (the default poll settings), from a tenth of a second to ten
// minutes: a clone's wait, an activity from its first look, and the waits that look first in the
// worker (the seed's upload and release, the resize, the start).
func TestCreate_seesEveryTasksEndWithinAFifthOfItsDurationOrASecond(t *testing.T) {
	// Some end just after a look (at 5 s, at 7.2 s), the latest they can be seen.
	for _, took := range []time.Duration{100 * time.Millisecond, 900 * time.Millisecond, 1500 * time.Millisecond,
		2500 * time.Millisecond, 5050 * time.Millisecond, 5400 * time.Millisecond, 7250 * time.Millisecond, 13 * time.Second,
		30 * time.Second, 49 * time.Second, 2 * time.Minute, 10 * time.Minute} {
		t.Run(took.String(), func(t *testing.T) {
			w := newWorld(t, func(o *pvesim.Options) {
				o.TaskDurations = map[string]time.Duration{"qmclone": took, "imgcopy": took, "resize": took, "qmstart": took, "imgdel": took}
			})
			// Room for every wait, the seed's release included, whose budget is a request's.
			b := &w.cfg.Budgets
			b.Clone, b.Upload, b.Resize, b.Start, b.Request = 15*time.Minute, 15*time.Minute, 15*time.Minute, 15*time.Minute, 15*time.Minute

			_, err := w.create(createInput())

			require.NoError(t, err)
			tasks := w.cluster.TaskRuns()
			require.Len(t, tasks, 5)
			poll := w.cfg.Poll
			for _, task := range tasks {
				require.False(t, task.Seen.IsZero(), "the end of %s was never seen", task.Type)
				late := task.Seen.Sub(task.End)
				bound := max(time.Duration((poll.BackoffCoefficient-1)*float64(took)), poll.InitialInterval)
				assert.LessOrEqual(t, late, bound, "%s of %s seen to end %s late", task.Type, took, late)
			}
		})
	}
}

// A clone onto a storage that has cloned before is seen to have ended within a fortieth of its
// time: its admission expects it to take as long as the last clones there took, and its wait
// looks around that end (config.Poll.NextLookExpecting). The first clone, with nothing to
// expect, is seen at the pace's look, and the second expects what that look saw.
func TestCreate_aClonesEndIsSeenWithinAFortiethOnceItsStorageHasCloned(t *testing.T) {
	const took = 13 * time.Second // the pace looks at 12.4 s and 14.9 s
	w := newWorld(t, func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": took, "qmstart": 3 * time.Second}
	})
	w.cfg.Clones.PerStorage = 1
	p := newProxyEntity(t, w)
	for i := range 3 {
		at := time.Duration(i) * time.Hour
		p.request(at, core.CreateUpdate, fmt.Sprint("create-", i), createInput())
		p.request(at+30*time.Minute, core.DeleteUpdate, fmt.Sprint("delete-", i), deleteInput())
	}
	admissionID := admission.CloneAdmissionWorkflowID("default-test-taskqueue", "pve1/local-lvm")
	p.at(3*time.Hour, func() { p.env.CancelWorkflowByID(admissionID, "") })

	st := p.run()

	require.Equal(t, []string{"create:completed", "delete:completed", "create:completed", "delete:completed", "create:completed", "delete:completed"}, kinds(st))
	var late []time.Duration
	for _, task := range w.cluster.TaskRuns() {
		if task.Type == "qmclone" {
			require.False(t, task.Seen.IsZero(), "the end of clone %s was never seen", task.UPID)
			late = append(late, task.Seen.Sub(task.End))
		}
	}
	require.Len(t, late, 3)
	assert.Greater(t, late[0], took/10, "the first clone, seen at the pace's look")
	assert.LessOrEqual(t, late[1], took/20, "the second clone, seen near the end the first one's late sighting led it to expect")
	assert.LessOrEqual(t, late[2], took/40, "the third clone, expecting the second's sighting")
}
