package starter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/pveflow/pveflow/activities"
)

// ErrNoPendingWait is what errors.Is finds in the error of a wait operation (RetryWait,
// PauseWait, ResumeWait) on a workflow that has no such wait: it has closed, it runs
// no activity at the moment, or no pending activity has the ID asked for. The error's message
// says which.
var ErrNoPendingWait = errors.New("no pending wait")

// WaitRef names the wait an operation acts on: the pending activity of the latest run of the
// workflow Op of UID. ActivityID picks one when several are pending; empty picks the only one,
// or the only wait among several.
type WaitRef struct {
	UID        string
	Op         Op
	ActivityID string
}

// waitTypes are the activities that wait by failing until what they wait for has happened (see
// workflows.waitOptions): the ones to pick among several pending activities.
var waitTypes = []string{"TaskStatus", "VMStatus", "AgentNetworkInterfaces", "CloudInitResult", "VMConfig"}

// RetryWait makes the wait try again now, with its attempt count back at one and its budget
// unchanged (Temporal's ResetActivity). An attempt that runs goes on; the reset takes effect
// with the next. It returns the wait as it is then.
func (c *Client) RetryWait(ctx context.Context, ref WaitRef) (Wait, error) {
	return c.actOnWait(ctx, ref, "retry", func(ctx context.Context, exec *commonpb.WorkflowExecution, a *workflowpb.PendingActivityInfo) error {
		_, err := c.temporal.WorkflowService().ResetActivity(ctx, &workflowservice.ResetActivityRequest{
			Namespace: c.namespace, Execution: exec, Activity: &workflowservice.ResetActivityRequest_Id{Id: a.GetActivityId()},
		})
		return err
	})
}

// PauseWait pauses the wait (Temporal's PauseActivity): no attempt starts until ResumeWait, and
// an attempt that runs finishes first. Its budget goes on running. reason shows in the UI.
func (c *Client) PauseWait(ctx context.Context, ref WaitRef, reason string) (Wait, error) {
	return c.actOnWait(ctx, ref, "pause", func(ctx context.Context, exec *commonpb.WorkflowExecution, a *workflowpb.PendingActivityInfo) error {
		_, err := c.temporal.WorkflowService().PauseActivity(ctx, &workflowservice.PauseActivityRequest{
			Namespace: c.namespace, Execution: exec, Activity: &workflowservice.PauseActivityRequest_Id{Id: a.GetActivityId()}, Reason: reason,
		})
		return err
	})
}

// ResumeWait resumes a paused wait (Temporal's UnpauseActivity): it tries again now, its attempt
// count going on from where it was.
func (c *Client) ResumeWait(ctx context.Context, ref WaitRef) (Wait, error) {
	return c.actOnWait(ctx, ref, "resume", func(ctx context.Context, exec *commonpb.WorkflowExecution, a *workflowpb.PendingActivityInfo) error {
		if a.GetState() != enumspb.PENDING_ACTIVITY_STATE_PAUSED && a.GetState() != enumspb.PENDING_ACTIVITY_STATE_PAUSE_REQUESTED {
			return errors.New("it is not paused")
		}
		_, err := c.temporal.WorkflowService().UnpauseActivity(ctx, &workflowservice.UnpauseActivityRequest{
			Namespace: c.namespace, Execution: exec, Activity: &workflowservice.UnpauseActivityRequest_Id{Id: a.GetActivityId()},
		})
		return err
	})
}

// actOnWait finds the wait ref names, applies act to it, and describes it again.
func (c *Client) actOnWait(ctx context.Context, ref WaitRef, verb string,
	act func(context.Context, *commonpb.WorkflowExecution, *workflowpb.PendingActivityInfo) error,
) (Wait, error) {
	id, err := ref.Op.workflowID(ref.UID)
	if err != nil {
		return Wait{}, err
	}
	what := fmt.Sprintf("%s the wait of the %s of proxy %s", verb, ref.Op, ref.UID)
	exec, pending, err := c.pendingWait(ctx, id, ref.ActivityID)
	if err != nil {
		return Wait{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := act(ctx, exec, pending); err != nil {
		return Wait{}, fmt.Errorf("%s: activity %s (%s): %w", what, pending.GetActivityId(), pending.GetActivityType().GetName(), err)
	}
	desc, err := c.temporal.DescribeWorkflowExecution(ctx, exec.GetWorkflowId(), exec.GetRunId())
	if err != nil {
		return Wait{}, fmt.Errorf("%s: describe it again: %w", what, err)
	}
	for _, a := range desc.GetPendingActivities() {
		if a.GetActivityId() == pending.GetActivityId() {
			return c.waitOf(a), nil
		}
	}
	return Wait{}, nil // it completed meanwhile
}

// pendingWait finds the pending activity of the latest run of workflowID that activityID names,
// or the only one, or the only wait among several.
func (c *Client) pendingWait(ctx context.Context, workflowID, activityID string) (*commonpb.WorkflowExecution, *workflowpb.PendingActivityInfo, error) {
	desc, err := c.temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return nil, nil, err
	}
	info := desc.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil, nil, fmt.Errorf("%w: workflow %s is %s", ErrNoPendingWait, workflowID, activities.RunStatus(info.GetStatus()))
	}
	pending := desc.GetPendingActivities()
	candidates := pending
	if activityID != "" {
		candidates = slices.DeleteFunc(slices.Clone(pending), func(a *workflowpb.PendingActivityInfo) bool { return a.GetActivityId() != activityID })
	} else if len(pending) > 1 {
		candidates = slices.DeleteFunc(slices.Clone(pending), func(a *workflowpb.PendingActivityInfo) bool {
			return !slices.Contains(waitTypes, a.GetActivityType().GetName())
		})
	}
	switch {
	case len(pending) == 0:
		return nil, nil, fmt.Errorf("%w: workflow %s runs no activity now", ErrNoPendingWait, workflowID)
	case len(candidates) == 0 && activityID != "":
		return nil, nil, fmt.Errorf("%w: workflow %s has no pending activity %s; pending: %s", ErrNoPendingWait, workflowID, activityID, activityList(pending))
	case len(candidates) != 1:
		return nil, nil, fmt.Errorf("workflow %s has several pending activities (%s): name one by its activity ID", workflowID, activityList(pending))
	}
	return info.GetExecution(), candidates[0], nil
}

// activityList names pending activities by ID and type: "12 (TaskStatus), 14 (VMConfig)".
func activityList(pending []*workflowpb.PendingActivityInfo) string {
	names := make([]string, len(pending))
	for i, a := range pending {
		names[i] = fmt.Sprintf("%s (%s)", a.GetActivityId(), a.GetActivityType().GetName())
	}
	return strings.Join(names, ", ")
}
