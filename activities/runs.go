package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/pve"
)

// Runs describes workflow runs as Temporal keeps them, and signals them. The create and the
// delete of a proxy ask it whether the other runs, and since when, and wait for it to close;
// CollectGarbage asks whether a create runs. Asking needs no signal, so a success leaves no
// failed event in history. A create signals its clone admission through it (SignalRun): a
// local activity's marker where a signal from the workflow costs its history two events and a
// workflow task.
type Runs interface {
	DescribeRun(ctx context.Context, workflowID, runID string) (RunInfo, error)
	// SignalRun signals run runID of workflowID (its latest run when runID is empty) with arg;
	// a run that does not run is a NotFound error.
	SignalRun(ctx context.Context, workflowID, runID, signal string, arg any) error
	// SignalWithStartRun signals the running workflow workflowID with arg, starting it first,
	// as start says, when none runs.
	SignalWithStartRun(ctx context.Context, workflowID, signal string, arg any, start StartRun) error
}

// StartRun is the run SignalWithStartRun starts when none runs: a workflow of WorkflowType,
// with Input, on TaskQueue.
type StartRun struct {
	WorkflowType string `json:"workflowType"`
	TaskQueue    string `json:"taskQueue"`
	// Input is the workflow's input, as JSON.
	Input json.RawMessage `json:"input"`
	// WorkflowTaskTimeout is the run's workflow task timeout; zero is Temporal's default.
	WorkflowTaskTimeout time.Duration `json:"workflowTaskTimeout,omitempty"`
	// PriorityKey is the priority of the run's tasks in its task queue; zero is Temporal's
	// default.
	PriorityKey int `json:"priorityKey,omitempty"`
}

// RunInfo is a workflow run as Temporal describes it. A workflow ID that never ran is a RunInfo
// with Running false and no RunID.
type RunInfo struct {
	RunID   string `json:"runID,omitempty"`
	Running bool   `json:"running"`
	// Status is how the run stands (RunStatus); empty for a workflow ID that never ran.
	Status    string    `json:"status,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
}

// DescribeRunRequest is the input of DescribeRun.
type DescribeRunRequest struct {
	WorkflowID string `json:"workflowID"`
	// RunID names the run; empty means the latest run of WorkflowID.
	RunID string `json:"runID,omitempty"`
	// WaitClosed makes the activity fail with a retryable NotReady error while the run runs, so
	// the activity's retry policy polls until it has closed.
	WaitClosed bool `json:"waitClosed,omitempty"`
}

// DescribeRun describes a workflow run: whether it runs and when it started.
func (a *Activities) DescribeRun(ctx context.Context, req DescribeRunRequest) (RunInfo, error) {
	step := "describe workflow " + req.WorkflowID
	if a.Runs == nil {
		return RunInfo{}, failure(step, pve.Classified(pve.Permanent, errors.New("the worker was built without Activities.Runs, so it cannot ask Temporal about a workflow")))
	}
	run, err := a.Runs.DescribeRun(ctx, req.WorkflowID, req.RunID)
	if err != nil {
		return RunInfo{}, failure(step, err)
	}
	if req.WaitClosed && run.Running {
		return run, notReady(ErrNotReady, 0, "workflow %s run %s, started %s, still runs", req.WorkflowID, run.RunID, run.StartedAt.Format(time.RFC3339))
	}
	return run, nil
}

// SignalRunRequest is the input of SignalRun.
type SignalRunRequest struct {
	WorkflowID string `json:"workflowID"`
	// RunID names the run; empty means the latest run of WorkflowID.
	RunID  string `json:"runID,omitempty"`
	Signal string `json:"signal"`
	// Arg is the signal's argument, as JSON.
	Arg json.RawMessage `json:"arg"`
}

// SignalRun signals the running workflow req.WorkflowID. A workflow that does not run is
// NotFound, which is not retried: the caller starts it, or knows it has closed.
func (a *Activities) SignalRun(ctx context.Context, req SignalRunRequest) error {
	step := fmt.Sprintf("signal %s to workflow %s", req.Signal, req.WorkflowID)
	if a.Runs == nil {
		return failure(step, pve.Classified(pve.Permanent, errors.New("the worker was built without Activities.Runs, so it cannot signal a workflow")))
	}
	if err := a.Runs.SignalRun(ctx, req.WorkflowID, req.RunID, req.Signal, req.Arg); err != nil {
		return failure(step, err)
	}
	return nil
}

// SignalWithStartRunRequest is the input of SignalWithStartRun.
type SignalWithStartRunRequest struct {
	WorkflowID string `json:"workflowID"`
	Signal     string `json:"signal"`
	// Arg is the signal's argument, as JSON.
	Arg   json.RawMessage `json:"arg"`
	Start StartRun        `json:"start"`
}

// SignalWithStartRun signals the running workflow req.WorkflowID, starting it first when none
// runs, in one request to Temporal.
func (a *Activities) SignalWithStartRun(ctx context.Context, req SignalWithStartRunRequest) error {
	step := fmt.Sprintf("signal %s to workflow %s, starting it if it does not run", req.Signal, req.WorkflowID)
	if a.Runs == nil {
		return failure(step, pve.Classified(pve.Permanent, errors.New("the worker was built without Activities.Runs, so it cannot start a workflow")))
	}
	if err := a.Runs.SignalWithStartRun(ctx, req.WorkflowID, req.Signal, req.Arg, req.Start); err != nil {
		return failure(step, err)
	}
	return nil
}

// TemporalRuns is the Runs of a worker: Temporal's answers through the worker's client.
type TemporalRuns struct {
	// Client is the worker's client: its data converter encodes the signals' arguments and
	// the started workflows' inputs as the workflows' own payloads are.
	Client client.Client
}

// SignalRun signals run runID of workflowID with arg through the worker's client: its data
// converter encodes arg as the workflow's own signals are, and its tracing carries the
// activity's trace into the signal.
func (h *TemporalRuns) SignalRun(ctx context.Context, workflowID, runID, signal string, arg any) error {
	if h.Client == nil {
		return pve.Classified(pve.Permanent, fmt.Errorf("signal %s to workflow %s: TemporalRuns has no Client", signal, workflowID))
	}
	if err := h.Client.SignalWorkflow(ctx, workflowID, runID, signal, arg); err != nil {
		return pve.Classified(temporalErrorClass(err), fmt.Errorf("signal %s to workflow %s: %w", signal, workflowID, err))
	}
	return nil
}

// SignalWithStartRun signals the running workflow workflowID with arg through the worker's
// client, starting it first when none runs; a workflow ID that ran before may run again.
func (h *TemporalRuns) SignalWithStartRun(ctx context.Context, workflowID, signal string, arg any, start StartRun) error {
	if h.Client == nil {
		return pve.Classified(pve.Permanent, fmt.Errorf("signal-with-start %s of workflow %s: TemporalRuns has no Client", signal, workflowID))
	}
	opts := client.StartWorkflowOptions{
		ID:                    workflowID,
		TaskQueue:             start.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowTaskTimeout:   start.WorkflowTaskTimeout,
		Priority:              temporal.Priority{PriorityKey: start.PriorityKey},
	}
	if _, err := h.Client.SignalWithStartWorkflow(ctx, workflowID, signal, arg, opts, start.WorkflowType, start.Input); err != nil {
		return pve.Classified(temporalErrorClass(err), fmt.Errorf("signal-with-start %s of workflow %s: %w", signal, workflowID, err))
	}
	return nil
}

// DescribeRun describes run runID of workflowID, or its latest run when runID is empty, with
// the worker's client. A workflow that never ran does not run.
func (h *TemporalRuns) DescribeRun(ctx context.Context, workflowID, runID string) (RunInfo, error) {
	if h.Client == nil {
		return RunInfo{}, pve.Classified(pve.Permanent, fmt.Errorf("describe workflow %s: TemporalRuns has no Client", workflowID))
	}
	resp, err := h.Client.DescribeWorkflowExecution(ctx, workflowID, runID)
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return RunInfo{}, nil
	case err != nil:
		return RunInfo{}, pve.Classified(temporalErrorClass(err), fmt.Errorf("describe workflow %s: %w", workflowID, err))
	}
	info := resp.GetWorkflowExecutionInfo()
	return RunInfo{
		RunID:     info.GetExecution().GetRunId(),
		Running:   info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		Status:    RunStatus(info.GetStatus()),
		StartedAt: info.GetStartTime().AsTime(),
	}, nil
}

// RunStatus is how a run's status reads: running, completed, failed, canceled, terminated,
// continued-as-new, timed-out or paused; unknown for any other.
func RunStatus(s enumspb.WorkflowExecutionStatus) string {
	if name, ok := runStatuses[s]; ok {
		return name
	}
	return "unknown"
}

var runStatuses = map[enumspb.WorkflowExecutionStatus]string{
	enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:          "running",
	enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:        "completed",
	enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:           "failed",
	enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:         "canceled",
	enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:       "terminated",
	enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW: "continued-as-new",
	enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:        "timed-out",
	enumspb.WORKFLOW_EXECUTION_STATUS_PAUSED:           "paused",
}

// temporalErrorClass is the class of an error of a request to Temporal about a run.
func temporalErrorClass(err error) pve.Class {
	var (
		notFound         *serviceerror.NotFound
		namespaceMissing *serviceerror.NamespaceNotFound
		denied           *serviceerror.PermissionDenied
		invalid          *serviceerror.InvalidArgument
	)
	switch {
	case errors.As(err, &notFound):
		return pve.NotFound
	case errors.As(err, &namespaceMissing), errors.As(err, &denied), errors.As(err, &invalid):
		return pve.Permanent
	}
	return pve.Transient
}
