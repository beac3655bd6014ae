package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// wait runs activity with arg, a wait (see waitOptions), within budget, and stores its result
// in out. It returns the activity's own error.
//
// A wait's budget is its ScheduleToClose timeout, and nothing moves it: Temporal's own actions
// on a pending activity (UpdateActivityOptions, from the UI or the CLI) move the next attempt's
// timer but not the deadline the activity was scheduled with (server 1.32). A wait that runs out
// of budget fails the run Transient, and starting it again resumes on the same VM, with budgets
// raised in the configuration when a wait needs more time.
func (t *tracker) wait(ctx workflow.Context, s settings, budget time.Duration, summary string, activity, arg, out any) error {
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, s.waitOptions(budget, summary)), activity, arg).Get(ctx, out)
}
