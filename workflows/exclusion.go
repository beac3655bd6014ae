package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
)

// A proxy's create and delete never act on Proxmox at the same time, and the one started later
// wins: a delete stops a create that started before it, and a create waits for a delete that
// started no later than itself (a tie goes to the delete). Start order, as Temporal recorded
// it, decides, not the order in which their first steps happen to run.
//
// Each run, as it starts, asks Temporal about the other operation's workflow ID (the
// DescribeRun activity): whether its latest run runs, and when it started. A create that finds
// an earlier delete waits for that run to close; a delete that finds an earlier create signals
// that run delete-requested, which stops it, and waits for it to close. Both waits poll
// DescribeRun by retries (see waitOptions) within the budget of what the other run may still
// do; one that runs out fails Transient. Asking needs no signal, so a run that finds no other
// leaves no failed event in its history; the delete's signal fails only when the create closed
// in the instant since it was described, and the wait then ends at once.
//
// The budgets: a create waits for a delete within what the delete's own waits take at most
// (settling a clone, its lock, the stop and the destroy: budgets clone + unlock + stop +
// destroy); a delete waits for the create it stopped within budgets.unlock, as a stopped create
// closes once its current activity attempt ends.

// describeRun asks Temporal about the latest run of workflowID.
func (o *proxyOps) describeRun(workflowID string) (activities.RunInfo, error) {
	var a *activities.Activities
	step := "describe workflow " + workflowID
	o.t.step(step)
	var run activities.RunInfo
	if err := execute(o.ctx, o.callOptions(step), a.DescribeRun, activities.DescribeRunRequest{WorkflowID: workflowID}).Get(o.ctx, &run); err != nil {
		return run, fail(step, err)
	}
	return run, nil
}

// awaitClosed waits within budget until run of workflowID has closed.
func (o *proxyOps) awaitClosed(workflowID string, run activities.RunInfo, budget time.Duration) error {
	var a *activities.Activities
	step := "wait for workflow " + workflowID + " to close"
	err := execute(o.ctx, o.s.waitOptions(budget, step), a.DescribeRun,
		activities.DescribeRunRequest{WorkflowID: workflowID, RunID: run.RunID, WaitClosed: true}).Get(o.ctx, nil)
	if err != nil {
		return fail(step, err)
	}
	return nil
}

// awaitEarlierDelete waits for a delete of the proxy that started no later than this create to
// close.
func (c *create) awaitEarlierDelete() error {
	id := DeleteWorkflowID(c.uid)
	del, err := c.describeRun(id)
	if err != nil || !del.Running || del.StartedAt.After(c.started) {
		return err
	}
	c.t.phase(PhaseAwaitingDelete, "wait for "+id+", which started earlier, to finish")
	return c.awaitClosed(id, del, c.s.Budgets.Clone+c.s.Budgets.Unlock+c.s.Budgets.Stop+c.s.Budgets.Destroy)
}

// stopEarlierCreate stops a create of the proxy that started before this delete, and waits for
// it to close.
func (d *deletion) stopEarlierCreate() error {
	id := CreateWorkflowID(d.uid)
	create, err := d.describeRun(id)
	if err != nil || !create.Running || !create.StartedAt.Before(d.started) {
		return err
	}
	d.t.phase(PhaseStoppingCreate, "stop "+id+", which started earlier, and wait for it to close")
	if err := workflow.SignalExternalWorkflow(d.ctx, id, create.RunID, deleteRequestedSignal, nil).Get(d.ctx, nil); err != nil {
		workflow.GetLogger(d.ctx).Debug("the create closed before it was asked to stop", "workflowID", id, "runID", create.RunID, "error", err)
	}
	return d.awaitClosed(id, create, d.s.Budgets.Unlock)
}
