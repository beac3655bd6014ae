package core

import (
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
)

// SignalRun signals the running workflow workflowID with arg, as a call (SignalRun). A workflow
// that does not run is an ErrNotFound error.
func SignalRun(ctx workflow.Context, s Settings, workflowID, signal string, arg any) error {
	var a *activities.Activities
	payload, err := ProtocolJSON(arg)
	if err != nil {
		return Permanentf("signal %s to workflow %s: %v", signal, workflowID, err)
	}
	step := fmt.Sprintf("signal %s to workflow %s", signal, workflowID)
	return Call(ctx, s.CallOptions(step), a.SignalRun, activities.SignalRunRequest{WorkflowID: workflowID, Signal: signal, Arg: payload}).Get(ctx, nil)
}

// ProtocolJSON encodes a signal's argument or a workflow's input for a call. json.Marshal of the
// protocol's structs is deterministic: no maps, no floats; workflowcheck flags it for the
// reflection it uses.
func ProtocolJSON(v any) (json.RawMessage, error) {
	return json.Marshal(v) //workflowcheck:ignore
}
