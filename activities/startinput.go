package activities

import (
	"context"
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/pveflow/pveflow/internal/pve"
)

// StartInput reads the user-data a CreateProxy or ChangeProxy run was started with. UploadISO
// asks it rather than carry the user-data in its own input, so that Temporal's history holds the
// user-data once per run, in the workflow's input.
type StartInput interface {
	UserData(ctx context.Context, workflowID, runID string) (string, error)
}

// HistoryStartInput is the StartInput and the Runs of a worker, through the worker's client.
// As a StartInput it reads the first event of the run's history
// (WorkflowExecutionStarted, which holds the workflow's input) and decodes the input with the
// data converter of the worker's client, so it reads an encrypted input as the workflow does.
// Workers read histories anyway (to replay a workflow whose history is not cached), so the
// worker's credentials allow it.
type HistoryStartInput struct {
	// Service is the worker's client's: client.Client.WorkflowService().
	Service workflowservice.WorkflowServiceClient
	// Namespace is the namespace the worker's client works in.
	Namespace string
	// DataConverter is the worker's client's: client.Options.DataConverter, which
	// PVEFLOW_CODEC_KEY_FILE makes the codec's. Nil is the SDK's default.
	DataConverter converter.DataConverter
	// Client is the worker's client, which SignalRun signals through.
	Client client.Client
}

// startedInput is the part of workflows.CreateProxyInput and workflows.ChangeProxyInput read
// here: both hold the user-data as userData (importing package workflows would be an import
// cycle).
type startedInput struct {
	UserData string `json:"userData"`
}

// UserData reads the user-data of run runID of workflowID. Its errors name the run and never
// hold the user-data: a run that is gone is NotFound, a history the worker may not read or
// cannot decode is Permanent, anything else (the server unreachable, busy) is Transient.
func (h *HistoryStartInput) UserData(ctx context.Context, workflowID, runID string) (string, error) {
	run := fmt.Sprintf("workflow %s run %s", workflowID, runID)
	resp, err := h.Service.GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
		Namespace:       h.Namespace,
		Execution:       &commonpb.WorkflowExecution{WorkflowId: workflowID, RunId: runID},
		MaximumPageSize: 1,
	})
	if err != nil {
		return "", pve.Classified(historyErrorClass(err), fmt.Errorf("read the start event of %s: %w", run, err))
	}
	events := resp.GetHistory().GetEvents()
	if len(events) == 0 || events[0].GetWorkflowExecutionStartedEventAttributes() == nil {
		return "", pve.Classified(pve.Permanent, fmt.Errorf("read the start event of %s: the history does not begin with one", run))
	}
	dc := h.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	var in startedInput
	if err := dc.FromPayloads(events[0].GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
		// The converter's error may quote the payload it could not parse: it is not passed on.
		return "", pve.Classified(pve.Permanent, fmt.Errorf("decode the input of %s: not a CreateProxy or ChangeProxy input, or encrypted with keys the worker's PVEFLOW_CODEC_KEY_FILE does not have", run))
	}
	return in.UserData, nil
}

// historyErrorClass is the class of an error reading a run's history.
func historyErrorClass(err error) pve.Class {
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
