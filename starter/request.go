package starter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// ErrRejected is what errors.Is finds in the error of Create, Change or Delete when the proxy's
// entity's validator refused the request at once: an unknown image, machine type or zone, a
// change of an absent proxy. Nothing ran and nothing was recorded; the error's message is the
// entity's. A request sent again under an Update ID whose operation failed is not refused: its
// Get returns that failure again.
var ErrRejected = errors.New("request refused")

// FailSuperseded is the FailureType of a request that a later one of the same proxy superseded
// before it was served, as a delete supersedes a running create.
const FailSuperseded = core.FailSuperseded

// A RequestOption changes a request that Create, Change or Delete sends.
type RequestOption func(*requestOptions)

type requestOptions struct{ updateID string }

// WithUpdateID sends the request under the Update ID id: sent again with the same ID while the
// entity's run is the same, it is the same request, not a second one, so a caller that lost
// the answer may retry. Without it, every call is a new request.
func WithUpdateID(id string) RequestOption {
	return func(o *requestOptions) { o.updateID = id }
}

// Request is a request a proxy's entity accepted: Get waits for the operation that serves it.
type Request struct {
	UID string
	// Kind is proxyvm.OpCreate, OpChange or OpDelete.
	Kind     string
	UpdateID string
	// rebuild is a change with a new image: the entity serves it with a delete and a create.
	rebuild bool
	handle  client.WorkflowUpdateHandle
}

// Get waits for the operation that serves the request to close and stores its result in result:
// a *proxyvm.CreateProxyResult, *proxyvm.ChangeProxyResult or *proxyvm.DeleteProxyResult.
// A failure keeps its type (see FailureType): the operation's, or FailSuperseded.
//
// A change that started a fresh entity (one whose predecessor was terminated) is judged once
// the entity has read the proxy's VM: its refusal comes here, as ErrRejected.
func (r *Request) Get(ctx context.Context, result any) error {
	err := r.handle.Get(ctx, result)
	if appErr, ok := errors.AsType[*temporal.ApplicationError](err); ok && appErr.Type() == core.FailRejected {
		return refused{rejection{r, err}, ErrRejected}
	}
	if err != nil {
		return fmt.Errorf("%s of proxy %s: %w", r.Kind, r.UID, err)
	}
	return nil
}

// WorkflowID is the ID of the child workflow that serves the request, whose Progress tells how
// it gets on: core.CreateWorkflowID, ChangeWorkflowID or DeleteWorkflowID. A change with a
// new image rebuilds the VM, a DeleteProxy and then a CreateProxy: its WorkflowID is the create's,
// which runs last and the longest; ProxyProgress follows whichever child runs.
func (r *Request) WorkflowID() string {
	id, _ := r.Op().workflowID(r.UID)
	return id
}

// Op is the operation of WorkflowID, for Progress.
func (r *Request) Op() Op {
	if r.rebuild {
		return Create
	}
	return Op(r.Kind)
}

// Create asks the entity of in.UID for the proxy to be present with in's spec, starting the
// entity when none runs. It returns once the entity accepted the request, which needs a worker;
// Get waits for the CreateProxy that serves it. A spec that in.Check refuses fails with its
// proxyvm.SpecError (ErrInvalidUID, ErrInvalidName, ErrInvalidNetwork or ErrUserDataTooLarge
// to errors.Is) before Temporal is called; a request the entity refuses fails with ErrRejected.
func (c *Client) Create(ctx context.Context, in proxyvm.ProxySpec, opts ...RequestOption) (*Request, error) {
	if err := in.Check(); err != nil {
		return nil, err
	}
	return c.request(ctx, &Request{UID: in.UID, Kind: proxyvm.OpCreate}, core.CreateUpdate, in, opts)
}

// Change asks the entity of req.UID to change its present proxy: what req sets. It returns once
// the entity accepted the request; Get waits for the ChangeProxy (or, with a new image, the
// delete and create) that serves it. A change that req.Check refuses fails with its
// proxyvm.SpecError (ErrInvalidUID, ErrNothingToChange or ErrUserDataTooLarge to errors.Is)
// before Temporal is called; a request the entity refuses, a change of an absent proxy among
// them, fails with ErrRejected.
func (c *Client) Change(ctx context.Context, req proxyvm.ChangeRequest, opts ...RequestOption) (*Request, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	r := &Request{UID: req.UID, Kind: proxyvm.OpChange, rebuild: req.Image != ""}
	return c.request(ctx, r, core.ChangeUpdate, req, opts)
}

// Delete asks the entity of in.UID for the proxy to be absent, starting the entity when none
// runs; a create that still runs is superseded. It returns once the entity accepted the
// request; Get waits for the DeleteProxy that serves it. An invalid in.UID fails with
// ErrInvalidUID before Temporal is called.
func (c *Client) Delete(ctx context.Context, in proxyvm.DeleteProxyInput, opts ...RequestOption) (*Request, error) {
	if err := checkUID(in.UID); err != nil {
		return nil, err
	}
	return c.request(ctx, &Request{UID: in.UID, Kind: proxyvm.OpDelete}, core.DeleteUpdate, in, opts)
}

// request sends r as the Update named update with arg, by UpdateWithStart, and waits for the
// entity to accept or refuse it.
func (c *Client) request(ctx context.Context, r *Request, update string, arg any, opts []RequestOption) (*Request, error) {
	var o requestOptions
	for _, opt := range opts {
		opt(&o)
	}
	start := c.temporal.NewWithStartWorkflowOperation(core.ProxyOptions(r.UID, c.taskQueue), core.ProxyName,
		proxyvm.ProxyInput{UID: r.UID})
	handle, err := c.temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID:     o.updateID,
			UpdateName:   update,
			Args:         []any{arg},
			WaitForStage: client.WorkflowUpdateStageAccepted,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("send %s of proxy %s to %s: %w", r.Kind, r.UID, core.ProxyWorkflowID(r.UID), err)
	}
	if err := refusal(handle); err != nil {
		return nil, refused{rejection{r, c.entityFailure(ctx, start, err)}, ErrRejected}
	}
	r.UpdateID = handle.UpdateID()
	r.handle = handle
	return r, nil
}

// entityFailure is the failure of the entity that refused a request with err "unknown update":
// an entity that failed in its first task, before it took any request, such as one whose
// worker cannot read its input (written without the worker's codec key, or with another): the
// SDK refuses the request so, and the entity's failure says why. Any other refusal, or an
// entity that has not failed within entityFailureWait, is err.
func (c *Client) entityFailure(ctx context.Context, start client.WithStartWorkflowOperation, err error) error {
	appErr, ok := errors.AsType[*temporal.ApplicationError](err)
	if !ok || !strings.HasPrefix(appErr.Message(), "unknown update ") {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, entityFailureWait)
	defer cancel()
	run, startErr := start.Get(ctx)
	if startErr != nil {
		return err
	}
	failed, ok := errors.AsType[*temporal.ApplicationError](c.temporal.GetWorkflow(ctx, run.GetID(), run.GetRunID()).Get(ctx, nil))
	if !ok {
		return err
	}
	return failed
}

// entityFailureWait is how long entityFailure waits for a refusing entity's outcome: its
// first task has ended by the time it refused.
const entityFailureWait = 5 * time.Second

// rejection is a request the entity refused with err: one line, its validator's message
// without the request it names again and without the causes the SDK appends.
type rejection struct {
	r   *Request
	err error
}

func (e rejection) Error() string {
	msg := e.err.Error()
	if appErr, ok := errors.AsType[*temporal.ApplicationError](e.err); ok {
		msg = strings.TrimPrefix(appErr.Message(), fmt.Sprintf("%s proxy %s: ", e.r.Kind, e.r.UID))
	}
	return fmt.Sprintf("%s of proxy %s refused: %s", e.r.Kind, e.r.UID, msg)
}

func (e rejection) Unwrap() error { return e.err }

// refusal is the error the entity refused an update with, or nil when it accepted it. A refused
// update comes back completed with its failure (core.FailRejected for the validator's); an
// accepted one has its outcome still to come, which a Get on a context already done does not
// wait for (the poll fails before it is sent), or, sent again under its Update ID, has it
// already: the operation's, which Get returns.
func refusal(handle client.WorkflowUpdateHandle) error {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	err := handle.Get(done, nil)
	if _, pending := errors.AsType[*client.WorkflowUpdateServiceTimeoutOrCanceledError](err); pending || err == nil {
		return nil
	}
	// An operation's outcome: the failure of its child workflow, or one the entity kept by the
	// Update ID (of the operation's types). Anything else completed at once is a refusal: the
	// validator's, or the worker's, which cannot read the request (a codec key missing).
	if _, ok := errors.AsType[*temporal.ChildWorkflowExecutionError](err); ok {
		return nil
	}
	switch FailureType(err) {
	case core.FailPermanent, core.FailTransient, core.FailQuotaExceeded, core.FailNotFound, FailSuperseded, FailCanceled:
		return nil
	}
	return err
}
