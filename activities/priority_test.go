package activities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/pve"
)

// Every activity, local ones too, calls ordered by its workflow's start (pve.WithOrder), which
// no activity's own information says.
func TestCallPriority_theActivitiesOfAWorkflowCallInTheOrderOfItsStart(t *testing.T) {
	for _, local := range []bool{false, true} {
		t.Run(map[bool]string{false: "activity", true: "local activity"}[local], func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			started := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
			env.SetStartTime(started)
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activities.CallPriority("GetProxy")}})
			order := func(ctx context.Context) (time.Time, error) {
				at, ok := pve.OrderOf(ctx)
				if !ok {
					return time.Time{}, errors.New("no order")
				}
				return at, nil
			}
			env.RegisterActivityWithOptions(order, activity.RegisterOptions{Name: "Order"})
			env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (time.Time, error) {
				var got time.Time
				if local {
					ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Second})
					return got, workflow.ExecuteLocalActivity(ctx, order).Get(ctx, &got)
				}
				ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Second})
				return got, workflow.ExecuteActivity(ctx, "Order").Get(ctx, &got)
			}, workflow.RegisterOptions{Name: "CreateProxy"})

			env.ExecuteWorkflow("CreateProxy")

			require.NoError(t, env.GetWorkflowError())
			var got time.Time
			require.NoError(t, env.GetWorkflowResult(&got))
			assert.True(t, started.Equal(got), "ordered as of %s, the workflow started %s", got, started)
		})
	}
}

func TestCallPriority_theActivitiesOfACareWorkflowCallAtCarePriority(t *testing.T) {
	tests := []struct {
		workflowType string
		local        bool
		want         pve.Priority
	}{
		{"GetProxy", false, pve.PriorityCare},
		{"GetProxy", true, pve.PriorityCare},
		{"CreateProxy", false, pve.PriorityDefault},
		{"CreateProxy", true, pve.PriorityDefault},
	}
	for _, tt := range tests {
		name := tt.workflowType + map[bool]string{false: ", activity", true: ", local activity"}[tt.local]
		t.Run(name, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activities.CallPriority("GetProxy", "Observer")}})
			priority := func(ctx context.Context) (pve.Priority, error) { return pve.PriorityOf(ctx), nil }
			env.RegisterActivityWithOptions(priority, activity.RegisterOptions{Name: "Priority"})
			env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (pve.Priority, error) {
				var got pve.Priority
				if tt.local {
					ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Second})
					err := workflow.ExecuteLocalActivity(ctx, priority).Get(ctx, &got)
					return got, err
				}
				ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Second})
				err := workflow.ExecuteActivity(ctx, "Priority").Get(ctx, &got)
				return got, err
			}, workflow.RegisterOptions{Name: tt.workflowType})

			env.ExecuteWorkflow(tt.workflowType)

			require.NoError(t, env.GetWorkflowError())
			var got pve.Priority
			require.NoError(t, env.GetWorkflowResult(&got))
			assert.Equal(t, tt.want, got)
		})
	}
}
