package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows"
)

// slowClones is a world whose clones take 5 minutes, against a clone budget of 2.
func slowClones(t *testing.T) *world {
	t.Helper()
	w := newWorld(t, func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": 5 * time.Minute, "qmstart": 3 * time.Second}
	})
	w.cfg.Budgets.Clone = 2 * time.Minute
	return w
}

func TestCreate_extendWaitSignalOnTheCloneWait(t *testing.T) {
	tests := []struct {
		name    string
		ext     func(start time.Time) any
		created bool
	}{
		{"extra", func(time.Time) any { return workflows.ExtendWait{Extra: "10m"} }, true},
		{"deadline", func(start time.Time) any {
			return workflows.ExtendWait{Deadline: start.Add(10 * time.Minute)}
		}, true},
		{"naming the clone wait", func(time.Time) any { return workflows.ExtendWait{Extra: "10m", ActivityID: "wait-1"} }, true},
		{"naming another wait", func(time.Time) any { return workflows.ExtendWait{Extra: "10m", ActivityID: "wait-7"} }, false},
		{"extra that is no duration", func(time.Time) any { return workflows.ExtendWait{Extra: "ten minutes"} }, false},
		{"payload that is no ExtendWait", func(time.Time) any { return map[string]any{"extra": 600} }, false},
		{"earlier deadline", func(start time.Time) any {
			return workflows.ExtendWait{Deadline: start.Add(time.Minute)}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := slowClones(t)
			env := w.env()
			start := env.Now()
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.ExtendWaitSignal, tt.ext(start)) }, time.Minute)

			env.ExecuteWorkflow(workflows.CreateProxyName, createInput())

			if tt.created {
				require.NoError(t, env.GetWorkflowError())
				assert.Len(t, w.vms(), 1)
				return
			}
			require.Error(t, env.GetWorkflowError())
			assert.Equal(t, workflows.FailTransient, failureType(t, env.GetWorkflowError()))
			assert.Contains(t, env.GetWorkflowError().Error(), "did not finish within its budget")
		})
	}
}

func TestCreate_statusShowsTheExtendedDeadlineOfTheWait(t *testing.T) {
	w := slowClones(t)
	env := w.env()
	var before, after workflows.Status
	query := func(into *workflows.Status) func() {
		return func() {
			v, err := env.QueryWorkflow(workflows.StatusQuery)
			require.NoError(t, err)
			require.NoError(t, v.Get(into))
		}
	}
	env.RegisterDelayedCallback(query(&before), 30*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.ExtendWaitSignal, workflows.ExtendWait{Extra: "10m"}) }, time.Minute)
	env.RegisterDelayedCallback(query(&after), 3*time.Minute)

	env.ExecuteWorkflow(workflows.CreateProxyName, createInput())

	require.NoError(t, env.GetWorkflowError())
	assert.Equal(t, workflows.PhaseCloning, after.Phase, "still cloning past the clone budget")
	assert.WithinDuration(t, env.Now(), before.WaitDeadline, time.Hour, "a wait shows its deadline")
	assert.Equal(t, 10*time.Minute, after.WaitDeadline.Sub(before.WaitDeadline))
}

func TestDelete_extendedDestroyWaitOutlastsItsBudget(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": 45 * time.Second, "qmstart": 3 * time.Second, "qmdestroy": 5 * time.Minute}
	})
	res, err := w.create(createInput())
	require.NoError(t, err)
	w.cfg.Budgets.Destroy = 2 * time.Minute
	env := w.env()
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.ExtendWaitSignal, workflows.ExtendWait{Extra: "10m"}) }, time.Minute)

	env.ExecuteWorkflow(workflows.DeleteProxyName, workflows.DeleteProxyInput{UID: uid, ProviderID: res.ProviderID})

	require.NoError(t, env.GetWorkflowError())
	assert.Empty(t, w.vms())
}
