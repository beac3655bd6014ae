package starter

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// ProxyStatus asks the entity of uid for its status: what was asked, what is, the operation
// that runs and the latest ones. The entity answers once closed too, as long as a worker runs
// to replay it. An invalid uid fails with ErrInvalidUID.
func (c *Client) ProxyStatus(ctx context.Context, uid string) (proxyvm.ProxyStatus, error) {
	if err := checkUID(uid); err != nil {
		return proxyvm.ProxyStatus{}, err
	}
	st, err := c.proxyStatus(ctx, uid)
	if err != nil {
		return proxyvm.ProxyStatus{}, fmt.Errorf("status of proxy %s: %w", uid, err)
	}
	return st, nil
}

func (c *Client) proxyStatus(ctx context.Context, uid string) (proxyvm.ProxyStatus, error) {
	val, err := c.temporal.QueryWorkflow(ctx, core.ProxyWorkflowID(uid), "", core.StatusQuery)
	if err != nil {
		return proxyvm.ProxyStatus{}, err
	}
	var st proxyvm.ProxyStatus
	return st, val.Get(&st)
}

// ProxyProgress is a proxy entity's status together with what Temporal knows of its run, and
// the Progress of the operation it runs.
type ProxyProgress struct {
	proxyvm.ProxyStatus
	// State is the entity run's state, as Progress.State.
	State string `json:"state"`
	// Source is SourceQuery or SourceDescribed: described, the status holds the UID, the phase,
	// the name, node and VMID of the entity's search attributes and its start time; of an
	// entity that failed or was ended, LastFailure is why (a request its worker could not read),
	// and the phase of one that never had one is absent.
	Source     string `json:"source"`
	QueryError string `json:"queryError,omitempty"`
	// Workers says who polls the entity's task queue, and names a task of the entity, or else of
	// its operation, that waits unserved.
	Workers Workers `json:"workers"`
	// OperationProgress is the Progress of the child that runs the operation, nil when none
	// runs.
	OperationProgress *Progress `json:"operationProgress,omitempty"`
}

// ErrNoProxy is what errors.Is finds in the error of ProxyProgress for a UID that no request
// was ever sent for: it has no entity.
var ErrNoProxy = errors.New("no such proxy")

// noProxy is the error of a UID without entity.
func noProxy(uid string) error {
	return fmt.Errorf("%w %s: no request was sent for it (workflow %s)", ErrNoProxy, uid, core.ProxyWorkflowID(uid))
}

// ProxyProgress returns where the entity of uid is: its status from the status query when a
// worker answers it, else from DescribeWorkflowExecution (Source says which), the Progress of the
// operation it runs, and the pollers of its task queue. It works with no worker running. An
// invalid uid fails with ErrInvalidUID, a UID without entity with ErrNoProxy.
func (c *Client) ProxyProgress(ctx context.Context, uid string) (ProxyProgress, error) {
	if err := checkUID(uid); err != nil {
		return ProxyProgress{}, err
	}
	id := core.ProxyWorkflowID(uid)
	desc, err := c.temporal.DescribeWorkflowExecution(ctx, id, "")
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return ProxyProgress{}, noProxy(uid)
	}
	if err != nil {
		return ProxyProgress{}, fmt.Errorf("describe proxy %s: %w", uid, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	p := ProxyProgress{State: activities.RunStatus(info.GetStatus())}
	if p.Workers, err = c.workersOf(ctx, desc); err != nil {
		return ProxyProgress{}, fmt.Errorf("proxy %s: %w", uid, err)
	}
	failure, err := c.closeFailure(ctx, info)
	if err != nil {
		return ProxyProgress{}, fmt.Errorf("proxy %s: %w", uid, err)
	}
	why := ""
	if failure != "" {
		// It answers no query: a run that failed before it read its input (a request a worker
		// could not decrypt) registered no handler.
		why = fmt.Sprintf("the entity is %s: it answers no status query", p.State)
	} else if why, err = c.askStatus(ctx, id, &p.Workers, &p.ProxyStatus); err != nil {
		return ProxyProgress{}, fmt.Errorf("status of proxy %s: %w", uid, err)
	}
	if why == "" {
		p.Source = SourceQuery
		return p, c.operationProgress(ctx, uid, &p, desc.GetPendingChildren())
	}
	p.QueryError = why
	p.Source = SourceDescribed
	described, err := proxyOf(info)
	if err != nil {
		return ProxyProgress{}, fmt.Errorf("describe proxy %s: %w", uid, err)
	}
	p.ProxyStatus = proxyvm.ProxyStatus{
		UID: uid, Phase: described.Phase, StartedAt: described.StartTime, LastFailure: failure,
		Desired:  proxyvm.DesiredState{Name: described.Name},
		Observed: proxyvm.ObservedState{Node: described.Node, VMID: described.VMID},
	}
	if p.Phase == "" && failure != "" {
		p.Phase = proxyvm.ProxyAbsent // it closed before it ever held a proxy
	}
	return p, c.operationProgress(ctx, uid, &p, desc.GetPendingChildren())
}

// closeFailure is why the run info describes failed, timed out, was terminated or cancelled, as
// its close event says; empty when it runs or completed.
func (c *Client) closeFailure(ctx context.Context, info *workflowpb.WorkflowExecutionInfo) (string, error) {
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return "", nil
	}
	exec := info.GetExecution()
	err := c.temporal.GetWorkflow(ctx, exec.GetWorkflowId(), exec.GetRunId()).Get(ctx, nil)
	if err == nil {
		return "", fmt.Errorf("workflow %s is %s, yet its result is a success", exec.GetWorkflowId(), activities.RunStatus(info.GetStatus()))
	}
	// The SDK's "workflow execution error (type: ...)" and an application error's "(type: ...,
	// retryable: ...)" say no more than the state.
	if appErr, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		return appErr.Message(), nil
	}
	if cause := errors.Unwrap(err); cause != nil {
		err = cause
	}
	return err.Error(), nil
}

// operationProgress adds the Progress of the operation p's entity runs: the one its status
// names, or else the started child of a kind Progress knows among its pending children, which is
// all there is to go by without a worker to answer the status query. A child an earlier run
// started before it continued as new is no child of this run: only the status names it.
func (c *Client) operationProgress(ctx context.Context, uid string, p *ProxyProgress, children []*workflowpb.PendingChildExecutionInfo) error {
	var op Op
	if p.Operation != nil {
		op = Op(p.Operation.Kind)
	} else {
		op, p.Operation = pendingOperation(uid, children)
	}
	if _, err := op.workflowID(uid); err != nil {
		return nil // none runs, or one Progress does not know
	}
	progress, err := c.Progress(ctx, uid, op)
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return nil // started a moment ago: Temporal has yet to record its start
	}
	if err != nil {
		return fmt.Errorf("proxy %s: %w", uid, err)
	}
	p.OperationProgress = &progress
	if p.Workers.Unserved == "" && progress.Workers.Unserved != "" {
		p.Workers.Unserved = progress.Workers.Unserved + " of the " + string(op)
	}
	if p.Operation.StartedAt.IsZero() {
		p.Operation.StartedAt = progress.StartedAt
	}
	return nil
}

// pendingOperation is the started child of a kind Progress knows among children, and its record.
func pendingOperation(uid string, children []*workflowpb.PendingChildExecutionInfo) (Op, *proxyvm.OperationRecord) {
	for _, child := range children {
		for _, op := range []Op{Create, Change, Delete} {
			if id, _ := op.workflowID(uid); id == child.GetWorkflowId() && child.GetRunId() != "" {
				return op, &proxyvm.OperationRecord{Kind: string(op), WorkflowID: id, RunID: child.GetRunId()}
			}
		}
	}
	return "", nil
}
