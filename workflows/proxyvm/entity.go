package proxyvm

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"

	"github.com/pveflow/pveflow/workflows/core"
)

// keptOperations is how many operations a Proxy entity keeps in its status.
const keptOperations = 20

// keptAnswers is how many answers, by Update ID, a Proxy entity carries from run to run: a
// request sent again under its ID after a continue-as-new gets its first answer, not a second
// operation.
const keptAnswers = 50

// Proxy is the entity of one proxy: the one place that knows what the operator asked of it, and
// the only one that acts on its VM. Requests reach it as Updates (CreateUpdate, ChangeUpdate,
// DeleteUpdate); a validator refuses a bad one before anything is recorded, and the handler
// answers once the operation that serves the request has closed. The entity runs one operation
// at a time as a child (CreateProxy, ChangeProxy, DeleteProxy under their own IDs), so two never
// act on the VM at once, and a later request supersedes an earlier one: a delete stops a running
// create or change, a create waits for a running delete.
//
// Between requests a present proxy's VM is checked every entity.checkInterval (a GetProxy
// child) and healed: a VM found stopped or gone is created again by a CreateProxy, and drift
// from the machine type is reported, and put back by a ChangeProxy when entity.fixDrift says so.
//
// The entity continues as new, carrying its state, when its history grows long and no request
// is in flight; an operation that runs then goes on (its children are abandoned, not
// cancelled, when a run closes) and the next run waits for it. It closes once its proxy has
// been absent for entity.closeAfter with no request.
func (w *Workflows) Proxy(ctx workflow.Context, in ProxyInput) (ProxyStatus, error) {
	if err := proxy.ValidateUID(in.UID); err != nil {
		return ProxyStatus{}, core.Permanentf("proxy entity: %v", err)
	}
	if id := workflow.GetInfo(ctx).WorkflowExecution.ID; id != core.ProxyWorkflowID(in.UID) {
		return ProxyStatus{}, core.Permanentf("proxy entity of %s must run as %s, not %s", in.UID, core.ProxyWorkflowID(in.UID), id)
	}
	e := &entity{ctx: ctx, cfg: w.Config, uid: in.UID}
	if in.State != nil {
		e.st = *in.State
	} else {
		e.st.StartedAt = workflow.Now(ctx)
	}
	e.st.Runs++
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return core.SettingsOf(w.Config) }).Get(&e.s); err != nil {
		return ProxyStatus{}, err
	}
	if err := e.register(); err != nil {
		return ProxyStatus{}, err
	}
	return e.run(in.State == nil)
}

type entity struct {
	ctx workflow.Context
	// cfg is the worker's configuration, read only by the validators, which Temporal does not
	// run again on replay.
	cfg config.Config
	uid string
	s   core.Settings
	st  ProxyState

	// version counts the requests this run accepted.
	version int
	waiters []*waiter
	op      *runningOp
	// reason, when set, is why the next operation runs: what a check found.
	reason string
	// drifted asks the next plan for a change that puts the machine type back.
	drifted bool
	// stopTimer stops the timer that wakes the loop for the next check, or to close an absent
	// proxy's entity; woken says it fired.
	stopTimer workflow.CancelFunc
	woken     bool
	// look is what the cluster's observer last asked the entity to look at, until it has.
	look *core.Look
	// published is what the search attributes last said.
	published string
	// rebuilding is set while a request reads the proxy's VM (rebuild).
	rebuilding bool
}

// A waiter is a request whose handler waits for the operation that serves it.
type waiter struct {
	kind    string
	version int
	done    bool
	result  any
	err     error
}

// runningOp is the operation that runs.
type runningOp struct {
	rec *OperationRecord
	// serves is the last request version the operation's input reflects.
	serves int
	// spec is the spec the operation makes the VM match (nil for a delete).
	spec *ProxySpec
	// rebuildFrom is the applied spec a rebuild (delete, then create) replaces.
	rebuildFrom *ProxySpec
	cancel      workflow.CancelFunc
	// superseded is set when a later request cancelled it.
	superseded string
	done       bool
	result     any
	err        error
}

func (e *entity) register() error {
	if err := workflow.SetQueryHandler(e.ctx, core.StatusQuery, func() (ProxyStatus, error) { return e.status(), nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(e.ctx, core.CreateUpdate,
		func(ctx workflow.Context, in ProxySpec) (CreateProxyResult, error) {
			return handle[CreateProxyResult](ctx, e, OpCreate, nil, func() { e.want(in); e.st.WantedAt = workflow.Now(e.ctx) })
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, in ProxySpec) error {
			return e.validate(ctx, func() error { return e.validateCreate(in) })
		}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(e.ctx, core.ChangeUpdate,
		func(ctx workflow.Context, req ChangeRequest) (ChangeProxyResult, error) {
			return handle[ChangeProxyResult](ctx, e, OpChange, func() error { return e.validateChange(req) },
				func() { e.change(req); e.st.WantedAt = workflow.Now(e.ctx) })
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req ChangeRequest) error {
			return e.validate(ctx, func() error { return e.validateChange(req) })
		}}); err != nil {
		return err
	}
	looks := workflow.GetSignalChannel(e.ctx, core.LookSignal)
	workflow.Go(e.ctx, func(ctx workflow.Context) {
		for {
			var l core.Look
			looks.Receive(ctx, &l)
			e.look = &l
		}
	})
	return workflow.SetUpdateHandlerWithOptions(e.ctx, core.DeleteUpdate,
		func(ctx workflow.Context, in DeleteProxyInput) (DeleteProxyResult, error) {
			return handle[DeleteProxyResult](ctx, e, OpDelete, nil, func() { e.st.Spec, e.st.UserDataDigest = nil, "" })
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, in DeleteProxyInput) error {
			return e.validate(ctx, func() error { return e.validateDelete(in) })
		}})
}

// validate runs a request's check, unless the request was answered before under its Update ID:
// sent again, it gets that answer, whatever the proxy has become since. A refusal is of type
// FailRejected, but for one that says why in a type of its own (a collection's delete that a
// create overtook is Superseded).
func (e *entity) validate(ctx workflow.Context, check func() error) error {
	if _, ok := e.answered(workflow.GetCurrentUpdateInfo(ctx).ID); ok {
		return nil
	}
	return refusal(check())
}

// refusal is err, a request's check's, as the request's refusal: of type FailRejected, unless
// it has a type of its own.
func refusal(err error) error {
	if _, typed := errors.AsType[*temporal.ApplicationError](err); err == nil || typed {
		return err
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), core.FailRejected, nil)
}

// handle serves a request: one answered before under its Update ID gets that answer again;
// any other is accepted, with apply making it the operator's wish, and answered once the
// operation that serves it has closed. The answer is kept by the Update ID. check, when set, is
// the request's validation, which the validator leaves to the handler while the entity does
// not know whether its proxy is wanted: it runs once the proxy's VM has been read (rebuild).
func handle[T any](ctx workflow.Context, e *entity, kind string, check func() error, apply func()) (T, error) {
	var zero T
	id := workflow.GetCurrentUpdateInfo(ctx).ID
	if a, ok := e.answered(id); ok {
		return answerOf[T](a)
	}
	if check != nil && !e.st.Known {
		err := e.rebuild(ctx)
		if err == nil {
			err = refusal(check())
		}
		if err != nil {
			e.keepAnswer(newAnswer(id, nil, err))
			return zero, err
		}
	}
	w := e.accept(kind, apply)
	if err := workflow.Await(ctx, func() bool { return w.done }); err != nil {
		return zero, err
	}
	e.keepAnswer(newAnswer(id, w.result, w.err))
	if w.err != nil {
		return zero, w.err
	}
	return w.result.(T), nil
}

// rebuild reads the proxy's VM, for an entity that does not know whether its proxy is wanted:
// a fresh one, an earlier entity having been terminated with its state. A VM that carries the
// proxy's mark with the spec it was made to (proxy.Spec) makes the proxy present with that spec,
// what the VM is being what was applied; without one the proxy is absent. The user-data is not
// on Proxmox, only its digest: until a request gives it again, nothing makes a seed of it.
func (e *entity) rebuild(ctx workflow.Context) error {
	if e.rebuilding {
		return workflow.Await(ctx, func() bool { return !e.rebuilding })
	}
	e.rebuilding = true
	defer func() { e.rebuilding = false }()
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:               core.GetProxyWorkflowID(e.uid, fmt.Sprintf("rebuild-%d", e.st.Runs)),
		WorkflowExecutionTimeout: core.ReadTimeout,
	})
	var got GetProxyResult
	err := workflow.ExecuteChildWorkflow(cctx, core.GetProxyName, GetProxyInput{UID: e.uid}).Get(cctx, &got)
	switch {
	case e.st.Known:
		return nil // a create or delete was accepted meanwhile: it says what is wanted
	case err == nil && got.NotFound != "":
		e.st.Observed = ObservedState{State: "absent", CheckedAt: workflow.Now(e.ctx)}
	case err != nil:
		return core.Transientf("proxy %s: its entity started afresh and could not read its VM to learn what it is (send the request again): %v", e.uid, err)
	case got.Spec == nil || got.Image == "":
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"proxy %s: its entity started afresh, and its VM %d on node %s does not record the spec it was made to: send a create with the proxy's spec first",
			e.uid, got.VMID, got.Node), core.FailRejected, nil)
	default:
		m := got.Spec
		spec := ProxySpec{UID: e.uid, Name: got.Name, Zone: m.Zone, Image: got.Image, MachineType: m.MachineType, InstanceID: got.InstanceID,
			Addresses: m.Addresses, NICs: m.NICs, AddressPool: m.AddressPool}
		e.st.Spec, e.st.Applied, e.st.UserDataDigest = &spec, withoutUserData(&spec), m.UserDataSHA256
		if _, gen, ok := strings.Cut(got.InstanceID, ".g"); ok {
			e.st.UserDataGen, _ = strconv.Atoi(gen)
		}
		e.st.Observed = ObservedState{VMID: got.VMID, Node: got.Node, State: string(got.State), IPv4: got.IPv4, IPv6: got.IPv6,
			CheckedAt: workflow.Now(e.ctx), Drift: e.drift(got)}
		workflow.GetLogger(e.ctx).Info("rebuilt the proxy's spec from its VM's mark", "uid", e.uid, "vmid", got.VMID, "node", got.Node)
		e.schedule()
	}
	e.st.Known = true
	e.publish()
	return nil
}

// userDataSHA256 is the digest of the spec's user-data, or of the one its VM had when the spec
// was rebuilt from the VM.
func (e *entity) userDataSHA256() string {
	if e.st.UserDataDigest != "" {
		return e.st.UserDataDigest
	}
	return userDataSHA256(e.st.Spec.UserData)
}

// answered is the answer kept for the request of Update ID id.
func (e *entity) answered(id string) (Answer, bool) {
	i := slices.IndexFunc(e.st.Answers, func(a Answer) bool { return a.UpdateID == id })
	if i < 0 {
		return Answer{}, false
	}
	return e.st.Answers[i], true
}

// answerCanceled is Answer.FailureType of a request whose operation was cancelled.
const answerCanceled = "Canceled"

func newAnswer(id string, result any, err error) Answer {
	a := Answer{UpdateID: id}
	switch res := result.(type) {
	case CreateProxyResult:
		a.Create = &res
	case ChangeProxyResult:
		a.Change = &res
	case DeleteProxyResult:
		a.Delete = &res
	}
	if appErr, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		a.FailureType, a.Failure = appErr.Type(), appErr.Message()
	} else if temporal.IsCanceledError(err) {
		a.FailureType, a.Failure = answerCanceled, err.Error()
	} else if err != nil {
		a.Failure = err.Error()
	}
	return a
}

// answerOf is a kept answer as the handler of its kind returns it.
func answerOf[T any](a Answer) (T, error) {
	var zero T
	switch {
	case a.FailureType == answerCanceled:
		return zero, temporal.NewCanceledError(a.Failure)
	case a.Failure != "":
		return zero, temporal.NewNonRetryableApplicationError(a.Failure, a.FailureType, nil)
	}
	var res any
	switch {
	case a.Create != nil:
		res = *a.Create
	case a.Change != nil:
		res = *a.Change
	case a.Delete != nil:
		res = *a.Delete
	}
	if v, ok := res.(T); ok {
		return v, nil
	}
	return zero, temporal.NewNonRetryableApplicationError(fmt.Sprintf("request %s was answered as a request of another kind: send a new request under a new ID", a.UpdateID), core.FailRejected, nil)
}

func (e *entity) keepAnswer(a Answer) {
	e.st.Answers = append(e.st.Answers, a)
	if n := len(e.st.Answers) - keptAnswers; n > 0 {
		e.st.Answers = slices.Delete(e.st.Answers, 0, n)
	}
}

// accept records a request: apply changes what the operator wants, and the requests and the
// operation that the change makes moot are superseded.
func (e *entity) accept(kind string, apply func()) *waiter {
	e.version++
	e.st.Known = true
	apply()
	e.st.Blocked = false
	w := &waiter{kind: kind, version: e.version}
	e.waiters = append(e.waiters, w)
	why := fmt.Sprintf("superseded by the %s request of proxy %s", kind, e.uid)
	for _, o := range e.waiters {
		if o.done || o == w {
			continue
		}
		servedByDelete := e.op != nil && e.op.rec.Kind == OpDelete && o.version <= e.op.serves
		switch {
		case kind == OpDelete && o.kind != OpDelete,
			kind != OpDelete && o.kind == OpDelete && !servedByDelete:
			o.done, o.err = true, temporal.NewNonRetryableApplicationError(why, core.FailSuperseded, nil)
		}
	}
	if kind == OpDelete {
		e.stopForDelete(why)
	}
	return w
}

// stopForDelete cancels the create or change that runs, which a delete makes moot, and waits
// for it to have stopped before the delete starts.
func (e *entity) stopForDelete(why string) {
	if e.op != nil && e.op.rec.Kind != OpDelete && e.op.superseded == "" {
		e.op.superseded = why
		e.op.cancel()
	}
}

// want makes the create request's spec the proxy's.
func (e *entity) want(in ProxySpec) {
	if e.st.Spec != nil {
		// The validator lets through only the spec the proxy has: with the user-data, when
		// the spec was rebuilt without it.
		if e.st.UserDataDigest != "" {
			e.st.Spec.UserData, e.st.UserDataDigest = in.UserData, ""
		}
		return
	}
	in = withDefaults(in)
	in.InstanceID = e.uid
	e.st.UserDataGen = 0
	e.st.Spec = &in
}

// change applies a change request to the present spec.
func (e *entity) change(req ChangeRequest) {
	spec := *e.st.Spec
	if req.Image != "" {
		spec.Image = req.Image
	}
	if req.MachineType != "" {
		spec.MachineType = req.MachineType
	}
	userData := req.UserData != nil && userDataSHA256(*req.UserData) != e.userDataSHA256()
	if req.UserData != nil {
		spec.UserData, e.st.UserDataDigest = *req.UserData, ""
	}
	// The guest configures a NIC from the seed's network-config, which cloud-init applies to a
	// new instance only: other NICs need a new instance-id as new user-data does.
	if userData || !slices.Equal(e.s.NICs(spec.NICs, spec.MachineType), e.s.NICs(e.st.Spec.NICs, e.st.Spec.MachineType)) {
		e.newInstance(&spec)
	}
	e.st.Spec = &spec
}

// newInstance gives spec a new cloud-init instance-id, <uid>.g<N>: its seed is to be written
// anew, and cloud-init to run it as a new instance.
func (e *entity) newInstance(spec *ProxySpec) {
	e.st.UserDataGen++
	spec.InstanceID = fmt.Sprintf("%s.g%d", e.uid, e.st.UserDataGen)
}

// The validators read the worker's configuration as it is: Temporal does not run them on
// replay, so their reads need not be deterministic (hence the workflowcheck:ignore).
func (e *entity) validateCreate(in ProxySpec) error {
	if err := e.validateUID(in.UID); err != nil {
		return err
	}
	err := in.CheckFor(e.cfg.Proxmox) //workflowcheck:ignore
	if err != nil {
		return err
	}
	if e.st.Spec == nil {
		return nil
	}
	in = withDefaults(in)
	diff := specDiff(*e.st.Spec, in)
	if userDataSHA256(in.UserData) != e.userDataSHA256() {
		diff = append(diff, "user-data")
	}
	if len(diff) > 0 {
		return fmt.Errorf("create proxy %s: it exists with another spec (%s); change it with pveflow update, or delete it first", in.UID, strings.Join(diff, ", "))
	}
	return nil
}

func (e *entity) validateChange(req ChangeRequest) error {
	if err := e.validateUID(req.UID); err != nil {
		return err
	}
	if err := req.Check(); err != nil {
		return err
	}
	switch {
	case e.st.Spec == nil && !e.st.Known:
		return nil // judged once the proxy's VM is read (rebuild): a lost entity may have left one
	case e.st.Spec == nil:
		return fmt.Errorf("change proxy %s: the proxy is absent; create it first", req.UID)
	}
	spec := *e.st.Spec
	if req.Image != "" {
		spec.Image = req.Image
	}
	if req.MachineType != "" {
		spec.MachineType = req.MachineType
	}
	return spec.checkPlacement("change", e.cfg.Proxmox) //workflowcheck:ignore
}

func (e *entity) validateDelete(in DeleteProxyInput) error {
	if err := e.validateUID(in.UID); err != nil {
		return err
	}
	// A garbage collection's delete of a proxy created or changed since it looked: the proxy is
	// wanted again. A validator's check records nothing, so the entity's commands are as before.
	if !in.UnlessWantedSince.IsZero() && e.st.Spec != nil && e.st.WantedAt.After(in.UnlessWantedSince) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"delete proxy %s: refused: a create or change of it was accepted at %s, after the request's caller looked (%s); the proxy is wanted again",
			in.UID, e.st.WantedAt.Format(time.RFC3339Nano), in.UnlessWantedSince.Format(time.RFC3339Nano)), core.FailSuperseded, nil)
	}
	return nil
}

func (e *entity) validateUID(uid string) error {
	if uid != e.uid {
		return fmt.Errorf("proxy %s cannot take a request for proxy %q: send it to %s", e.uid, uid, core.ProxyWorkflowID(uid))
	}
	return nil
}

// run is the entity's loop: start what the operator's wishes need, wait for it, check the VM
// when idle, continue as new or close when due.
func (e *entity) run(fresh bool) (ProxyStatus, error) {
	if fresh {
		if err := e.adoptRunningOperation(); err != nil {
			return ProxyStatus{}, err
		}
	} else if e.st.Current != nil {
		// A run continues as new with no request in flight, so the spec is the one the
		// operation was started with.
		e.resumeOperation(e.st.Current, e.st.Spec)
		e.st.Current = nil
	}
	e.publish()
	if e.op == nil {
		e.schedule()
	}
	// Every request starts its entity: when the requests that started this one were all
	// refused (by the validator, or once the proxy's VM was read), it holds nothing and closes
	// at once rather than after entity.closeAfter.
	refusedAll := func() bool {
		return fresh && e.version == 0 && e.op == nil && e.st.Spec == nil && workflow.AllHandlersFinished(e.ctx)
	}
	for {
		if e.op == nil {
			e.startNext()
		}
		seen := e.version
		if err := workflow.Await(e.ctx, func() bool {
			return e.version != seen || (e.op != nil && e.op.done) || e.woken || e.look != nil || e.continueAsNewDue() || refusedAll()
		}); err != nil {
			return ProxyStatus{}, err
		}
		if refusedAll() {
			return e.status(), nil
		}
		if e.op != nil && e.op.done {
			e.finish()
			e.publish()
			e.schedule()
		}
		if l := e.look; l != nil && !e.woken {
			e.look = nil
			// An operation that runs, or a proxy that is absent, has nothing to look at.
			if e.op == nil && e.st.Spec != nil {
				workflow.GetLogger(e.ctx).Info("the observer asks for a look at the proxy's VM", "uid", e.uid, "vmid", l.VMID, "why", l.Why)
				e.check(false)
				e.schedule()
			}
		}
		if e.woken {
			e.woken, e.look = false, nil
			if e.op == nil && e.st.Spec == nil && len(e.pending()) == 0 && workflow.AllHandlersFinished(e.ctx) {
				workflow.GetLogger(e.ctx).Info("closing the entity of an absent proxy", "uid", e.uid)
				return e.status(), nil
			}
			if e.op == nil && e.st.Spec != nil {
				e.check(true)
				e.schedule()
			}
		}
		if e.continueAsNewDue() {
			return ProxyStatus{}, e.continueAsNew()
		}
	}
}

// pending are the requests not yet answered.
func (e *entity) pending() []*waiter {
	var out []*waiter
	for _, w := range e.waiters {
		if !w.done {
			out = append(out, w)
		}
	}
	return out
}

// startNext starts the operation the operator's wishes need now, if any.
func (e *entity) startNext() {
	spec, applied := e.st.Spec, e.st.Applied
	hasPending := func(kind string) bool {
		return slices.ContainsFunc(e.pending(), func(w *waiter) bool { return w.kind == kind })
	}
	switch {
	case spec == nil && (applied != nil || hasPending(OpDelete)):
		e.startDelete(nil)
	case spec == nil, e.st.Blocked:
	case applied != nil && (applied.Image != spec.Image || applied.Zone != spec.Zone || applied.Name != spec.Name):
		e.startDelete(applied)
	case applied == nil || hasPending(OpCreate):
		e.startCreate(*spec, nil)
	case applied.MachineType != spec.MachineType || applied.InstanceID != spec.InstanceID || e.drifted || hasPending(OpChange):
		e.startChange(*spec)
	}
}

// startCreate starts a CreateProxy of spec: of a proxy that has no VM or a stopped one, or,
// with rebuildFrom, the second half of a rebuild.
func (e *entity) startCreate(spec ProxySpec, rebuildFrom *ProxySpec) {
	e.start(&runningOp{spec: &spec, rebuildFrom: rebuildFrom}, OpCreate, core.CreateWorkflowID(e.uid), core.CreateProxyName, spec)
}

// startChange starts a ChangeProxy of the whole spec: the VM's mark tells it whether the guest
// has the spec's user-data.
func (e *entity) startChange(spec ProxySpec) {
	in := ProxySpec{UID: e.uid, Name: spec.Name, Zone: spec.Zone, Image: spec.Image, MachineType: spec.MachineType, Addresses: spec.Addresses,
		NICs: spec.NICs, AddressPool: spec.AddressPool, UserData: spec.UserData, InstanceID: spec.InstanceID}
	e.drifted = false
	e.start(&runningOp{spec: &spec}, OpChange, core.ChangeWorkflowID(e.uid), core.ChangeProxyName, in)
}

// startDelete starts a DeleteProxy: of an absent proxy, or, with rebuildFrom, the first half of
// a rebuild onto a new image or zone, which a create of the spec follows.
func (e *entity) startDelete(rebuildFrom *ProxySpec) {
	in := DeleteProxyInput{UID: e.uid, Name: e.nameOf()}
	if rebuildFrom != nil {
		in.Name = rebuildFrom.Name
		in.KeepAddresses = true // the create that follows takes them again
	}
	e.start(&runningOp{rebuildFrom: rebuildFrom}, OpDelete, core.DeleteWorkflowID(e.uid), core.DeleteProxyName, in)
}

// nameOf is the name of the proxy's VM as last known.
func (e *entity) nameOf() string {
	switch {
	case e.st.Spec != nil:
		return e.st.Spec.Name
	case e.st.Applied != nil:
		return e.st.Applied.Name
	}
	return proxy.NameFromUID(e.uid)
}

// start runs an operation as a child. Children are abandoned when a run of the entity closes,
// so one goes on across a continue-as-new; cancelling one waits for it to have stopped, so the
// next operation never overlaps it.
func (e *entity) start(op *runningOp, kind, workflowID, workflowType string, in any) {
	e.st.Seq++
	reason := e.reason
	if reason == "" {
		reason = "requested"
	}
	if op.rebuildFrom != nil {
		reason = fmt.Sprintf("rebuild onto %s", strings.Join(specDiff(*op.rebuildFrom, *e.st.Spec), ", "))
	}
	e.reason = ""
	op.rec = &OperationRecord{Seq: e.st.Seq, Kind: kind, Reason: reason, WorkflowID: workflowID, StartedAt: workflow.Now(e.ctx)}
	op.serves = e.version
	e.op = op
	e.cancelTimer()
	ctx, cancel := workflow.WithCancel(e.ctx)
	op.cancel = cancel
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            workflowID,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WaitForCancellation:   true,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowTaskTimeout:   operationTaskTimeout,
		Priority:              temporal.Priority{PriorityKey: operationPriority},
	})
	child := workflow.ExecuteChildWorkflow(ctx, workflowType, in)
	e.publish()
	workflow.Go(e.ctx, func(ctx workflow.Context) {
		var exec workflow.Execution
		if err := child.GetChildWorkflowExecution().Get(ctx, &exec); err == nil {
			op.rec.RunID = exec.RunID
		}
		switch kind {
		case OpCreate:
			var res CreateProxyResult
			op.err = child.Get(ctx, &res)
			op.result = res
		case OpChange:
			var res ChangeProxyResult
			op.err = child.Get(ctx, &res)
			op.result = res
		default:
			var res DeleteProxyResult
			op.err = child.Get(ctx, &res)
			op.result = res
		}
		op.done = true
	})
}

// finish records the operation that closed, answers the requests it served, and says what
// the proxy is now.
func (e *entity) finish() {
	op := e.op
	e.op = nil
	op.rec.ClosedAt = workflow.Now(e.ctx)
	switch {
	case op.err == nil:
		op.rec.Outcome = "completed"
	case op.superseded != "":
		op.rec.Outcome, op.rec.Error = "cancelled", op.superseded
	case temporal.IsCanceledError(op.err):
		op.rec.Outcome, op.rec.Error = "cancelled", op.err.Error()
	default:
		op.rec.Outcome, op.rec.Error = "failed", op.err.Error()
	}
	e.record(*op.rec)
	if op.rec.isHeal() {
		recordHeal(e.ctx, *op.rec)
	}
	if op.err != nil {
		e.failed(op)
		return
	}
	e.st.LastFailure, e.st.NeedsPerson = "", false
	e.st.FailedHeals, e.st.NextHealAt = 0, time.Time{}
	now := workflow.Now(e.ctx)
	switch res := op.result.(type) {
	case CreateProxyResult:
		e.st.Applied = withoutUserData(op.spec)
		e.st.Observed = ObservedState{VMID: res.VMID, Node: res.Node, State: string(proxy.Running), IPv4: res.IPv4, IPv6: res.IPv6, CheckedAt: now}
	case ChangeProxyResult:
		e.st.Applied = withoutUserData(op.spec)
		e.st.Observed = ObservedState{VMID: res.VMID, Node: res.Node, State: string(proxy.Running), IPv4: res.IPv4, IPv6: res.IPv6, CheckedAt: now}
	case DeleteProxyResult:
		e.st.Applied = nil
		e.st.Observed = ObservedState{CheckedAt: now}
		if op.rebuildFrom != nil && e.st.Spec != nil {
			// The create that completes the rebuild answers the requests.
			e.startCreate(*e.st.Spec, op.rebuildFrom)
			return
		}
	case nil:
		e.resumed(op)
		return
	}
	// The operation changed the VM's entry in the cluster's list: the observer takes its next
	// listing as the normal.
	e.watch(e.st.Observed.VMID)
	e.serve(op)
}

// resumed takes in an operation that an earlier run started: what it made is not known here,
// so the VM is checked at once.
func (e *entity) resumed(op *runningOp) {
	if op.rec.Kind == OpDelete || op.spec == nil {
		e.st.Applied = nil
	} else {
		e.st.Applied = withoutUserData(op.spec)
	}
	if e.st.Spec != nil {
		e.woken = true
	}
}

// failed answers the requests an operation that failed served with its error, and stops the
// entity from trying again on its own.
func (e *entity) failed(op *runningOp) {
	if op.superseded != "" {
		return // the request that superseded it runs next
	}
	if op.rec.Kind != OpChange {
		e.st.Applied = nil
	}
	e.st.LastFailure = op.rec.Error
	e.st.NeedsPerson = core.IsType(op.err, core.FailPermanent)
	if op.rec.isHeal() {
		// A VM that fails again at every heal (it stops at every boot, its storage is gone) is
		// healed ever less often, not made again at every check.
		e.st.FailedHeals++
		e.st.NextHealAt = workflow.Now(e.ctx).Add(healBackoff(e.s.Entity.CheckInterval, e.st.FailedHeals))
	}
	for _, w := range e.pending() {
		if w.version <= op.serves {
			w.done, w.err = true, op.err
		}
	}
	// A request accepted while the operation ran asks again: it is served by the next one.
	e.st.Blocked = len(e.pending()) == 0
}

// serve answers the requests a completed operation served.
func (e *entity) serve(op *runningOp) {
	for _, w := range e.pending() {
		if w.version > op.serves {
			continue
		}
		switch res := op.result.(type) {
		case CreateProxyResult:
			switch w.kind {
			case OpCreate:
				w.done, w.result = true, res
			case OpChange:
				// What the create did: it made the VM anew (a rebuild), provisioned it with the
				// whole spec, or changed the VM it found running to match it.
				c := ChangeProxyResult{VMID: res.VMID, Node: res.Node, Name: res.Name, IPv4: res.IPv4, IPv6: res.IPv6, Restarted: res.Restarted,
					Changed: append([]string{}, res.Changed...), Warnings: res.Warnings}
				switch {
				case op.rebuildFrom != nil:
					c.Rebuilt, c.Changed = true, specDiff(*op.rebuildFrom, *op.spec)
				case res.Provisioned:
					c.Changed = []string{"provisioned with the change"}
				}
				w.done, w.result = true, c
			}
		case ChangeProxyResult:
			if w.kind == OpChange {
				w.done, w.result = true, res
			}
		case DeleteProxyResult:
			if w.kind == OpDelete {
				w.done, w.result = true, res
			}
		}
	}
}

func withoutUserData(spec *ProxySpec) *ProxySpec {
	s := *spec
	s.UserData = ""
	return &s
}

// record adds an operation to the kept ones.
func (e *entity) record(rec OperationRecord) {
	e.st.Operations = append(e.st.Operations, rec)
	if n := len(e.st.Operations) - keptOperations; n > 0 {
		e.st.Operations = slices.Delete(e.st.Operations, 0, n)
	}
}

// maxHealBackoff bounds the wait between heals that fail.
const maxHealBackoff = 6 * time.Hour

// healBackoff is how long after its failed-th heal in a row failed the entity heals again:
// the check interval, doubled with each failure, at most maxHealBackoff.
func healBackoff(interval time.Duration, failed int) time.Duration {
	d := interval
	for i := 1; i < failed && d < maxHealBackoff; i++ {
		d *= 2
	}
	return min(d, maxHealBackoff)
}

// check reads the proxy's VM (a GetProxy child) and decides what to heal. The observer is given
// the entity's word on the VM it found when it is not the one it watches, and, with rewatch, in
// any case: an entity's own checks (its backstops) so start an observer that stopped.
func (e *entity) check(rewatch bool) {
	e.st.Checks++
	seen := e.version
	ctx := workflow.WithChildOptions(e.ctx, workflow.ChildWorkflowOptions{
		WorkflowID:               core.GetProxyWorkflowID(e.uid, fmt.Sprintf("check-%d", e.st.Checks)),
		WorkflowExecutionTimeout: core.ReadTimeout,
	})
	workflow.SetCurrentDetails(e.ctx, e.phase()+": check the VM")
	var got GetProxyResult
	err := workflow.ExecuteChildWorkflow(ctx, core.GetProxyName, GetProxyInput{UID: e.uid}).Get(ctx, &got)
	recordCheck(e.ctx, got, err)
	if e.version != seen || e.st.Spec == nil {
		return // a request came meanwhile: it decides
	}
	now := workflow.Now(e.ctx)
	switch {
	case err == nil && got.NotFound != "":
		e.st.Observed = ObservedState{State: "absent", CheckedAt: now}
		e.heal("check: the proxy has no VM")
	case err != nil:
		e.st.Observed.CheckedAt = now
		e.st.Observed.State = "unknown"
		workflow.GetLogger(e.ctx).Warn("check of the proxy's VM failed", "uid", e.uid, "error", err)
	default:
		e.st.Observed = ObservedState{VMID: got.VMID, Node: got.Node, State: string(got.State), IPv4: got.IPv4, IPv6: got.IPv6, CheckedAt: now,
			Drift: e.drift(got)}
		switch {
		case got.State == proxy.Stopped:
			e.heal(fmt.Sprintf("check: VM %d on node %s was stopped", got.VMID, got.Node))
		case e.st.Applied == nil && e.matches(got) && !(e.st.NeedsPerson && e.s.MachineTypes[e.st.Spec.MachineType].WaitsForCloudInit()):
			// What was made is not known (the last operation failed, or another entity's ran), and
			// the VM is the spec's after all: a create that failed late, its guest slow to report.
			// Not after a Permanent failure of a machine type that waits for cloud-init: running
			// with its address, the VM may be one whose cloud-init failed, which a check cannot
			// tell and a person looks at before it counts as present.
			workflow.GetLogger(e.ctx).Info("the proxy's VM is its spec's: present", "uid", e.uid, "vmid", got.VMID)
			e.st.Applied, e.st.Blocked, e.st.NeedsPerson = withoutUserData(e.st.Spec), false, false
			e.st.FailedHeals, e.st.NextHealAt = 0, time.Time{}
		case len(e.st.Observed.Drift) > 0 && e.s.Entity.FixDrift && e.st.NeedsPerson:
			workflow.GetLogger(e.ctx).Warn("not putting the drift back until a request after its Permanent failure", "uid", e.uid, "drift", e.st.Observed.Drift)
		case len(e.st.Observed.Drift) > 0 && e.s.Entity.FixDrift && e.st.Applied != nil:
			e.drifted, e.st.Blocked = true, false
			if m := (proxy.Machine{NICs: got.NICs}); len(m.NICDrift(e.s.Bridge, e.s.NICs(e.st.Spec.NICs, e.st.Spec.MachineType))) > 0 {
				spec := *e.st.Spec
				e.newInstance(&spec) // a NIC put back is configured by a new seed
				e.st.Spec = &spec
			}
			e.reason = fmt.Sprintf("check: VM %d drifted from machine type %s: %s", got.VMID, e.st.Spec.MachineType, strings.Join(e.st.Observed.Drift, ", "))
		}
		if got.VMID != e.st.Watched || rewatch {
			e.watch(got.VMID)
		}
	}
	e.publish()
}

// matches reports whether the VM a check found runs with an address and is the spec's, as its
// config and mark tell: its name, image, seed and machine type.
func (e *entity) matches(got GetProxyResult) bool {
	spec := e.st.Spec
	return got.State == proxy.Running && len(e.st.Observed.Drift) == 0 &&
		got.Name == spec.Name && got.Image == spec.Image && got.InstanceID == spec.InstanceID
}

// drift says where the VM a check found differs from the spec's machine type.
func (e *entity) drift(got GetProxyResult) []string {
	mt, ok := e.s.MachineTypes[e.st.Spec.MachineType]
	if !ok {
		return nil
	}
	m := proxy.Machine{Cores: got.Cores, MemoryMiB: got.MemoryMiB, DiskGiB: got.DiskGiB, NICs: got.NICs}
	var out []string
	for _, d := range m.Drift(config.Placement{Cores: mt.Cores, MemoryMiB: mt.MemoryMiB, DiskGiB: mt.DiskGiB}) {
		out = append(out, d.String())
	}
	// The spec's own NICs, else its machine type's, as its create and changes give them. A result
	// from before GetProxy read the NICs has none, and shows none drifted.
	for _, n := range m.NICDrift(e.s.Bridge, e.s.NICs(e.st.Spec.NICs, e.st.Spec.MachineType)) {
		out = append(out, n.String())
	}
	// The config shows a change PVE keeps pending as if it were in effect: only the mark tells
	// that the guest has not seen it.
	if got.RebootOwed != nil {
		out = append(out, fmt.Sprintf("reboot owed for %s", cmp.Or(strings.Join(got.RebootOwed.Changed, ", "), "a change")))
	}
	return out
}

// heal makes the next operation a create, which adopts a stopped VM and starts it, or makes a
// new one, with why. After a Permanent failure it only reports: a person has to act first (a
// foreign VM with the proxy's name, a missing privilege), and a request after that runs again.
func (e *entity) heal(why string) {
	if e.st.NeedsPerson {
		workflow.GetLogger(e.ctx).Warn("not healing the proxy until a request after its Permanent failure", "uid", e.uid, "found", why)
		return
	}
	if e.st.UserDataDigest != "" {
		workflow.GetLogger(e.ctx).Warn("not healing the proxy: its spec was rebuilt from its VM, which does not hold its user-data; a create with the user-data gives it back",
			"uid", e.uid, "found", why)
		return
	}
	if now := workflow.Now(e.ctx); now.Before(e.st.NextHealAt) {
		workflow.GetLogger(e.ctx).Warn("not healing the proxy yet: its last heals failed", "uid", e.uid, "found", why,
			"failedHeals", e.st.FailedHeals, "nextHealAt", e.st.NextHealAt)
		return
	}
	e.st.Applied = nil
	e.st.Blocked = false
	e.reason = why
}

// adoptRunningOperation makes an operation of the proxy that runs from an earlier entity (one
// that was terminated) this run's, so that none starts beside it. The request that started this
// entity was accepted meanwhile: a delete among them stops an adopted create or change, as it
// would have stopped one this entity started.
func (e *entity) adoptRunningOperation() error {
	for _, op := range []struct{ kind, id string }{
		{OpCreate, core.CreateWorkflowID(e.uid)}, {OpChange, core.ChangeWorkflowID(e.uid)}, {OpDelete, core.DeleteWorkflowID(e.uid)},
	} {
		run, err := core.DescribeRun(e.ctx, e.s, op.id)
		if err != nil {
			return err
		}
		if !run.Running {
			continue
		}
		e.st.Seq++
		e.resumeOperation(&OperationRecord{Seq: e.st.Seq, Kind: op.kind, Reason: "found running when the entity started", WorkflowID: op.id, RunID: run.RunID, StartedAt: run.StartedAt}, nil)
		if slices.ContainsFunc(e.pending(), func(w *waiter) bool { return w.kind == OpDelete }) {
			e.stopForDelete(fmt.Sprintf("superseded by the delete request of proxy %s", e.uid))
		}
		return nil
	}
	return nil
}

// resumeOperation follows an operation this run did not start until it closes.
// spec is what it makes the VM match, nil when that is not known (a create or change that an
// earlier entity started).
func (e *entity) resumeOperation(rec *OperationRecord, spec *ProxySpec) {
	r := *rec
	// It serves no request of this run: those wait for the operation after it.
	op := &runningOp{rec: &r, spec: spec}
	// Cancelling it asks it to stop, and the wait goes on until it has: the next operation never
	// overlaps it.
	op.cancel = func() {
		workflow.RequestCancelExternalWorkflow(e.ctx, r.WorkflowID, r.RunID)
	}
	e.op = op
	workflow.Go(e.ctx, func(ctx workflow.Context) {
		var a *activities.Activities
		step := "wait for workflow " + r.WorkflowID + " to close"
		var run activities.RunInfo
		for {
			// An operation may wait longer than any one budget (for a clone lease): the wait
			// starts again until it ends.
			op.err = core.Execute(ctx, e.s.WaitOptions(e.s.Budgets.Unlock, step), a.DescribeRun,
				activities.DescribeRunRequest{WorkflowID: r.WorkflowID, RunID: r.RunID, WaitClosed: true}).Get(ctx, &run)
			if op.err == nil || !(temporal.IsTimeoutError(op.err) || core.IsType(op.err, activities.ErrNotReady)) {
				break
			}
		}
		switch {
		case op.err != nil:
			op.err = core.Fail(step, op.err)
		case run.Status == "canceled":
			op.err = temporal.NewCanceledError(r.WorkflowID + " run " + r.RunID + " was cancelled")
		case run.Status != "completed":
			op.err = core.Transientf("%s run %s closed %s", r.WorkflowID, r.RunID, run.Status)
		}
		op.done = true
	})
}

// continueAsNewDue reports whether the history is long enough to start afresh and nothing holds
// the run: an operation that runs is carried, a request in flight is not.
func (e *entity) continueAsNewDue() bool {
	info := workflow.GetInfo(e.ctx)
	long := info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= e.s.Entity.HistoryEvents
	return long && len(e.pending()) == 0 && workflow.AllHandlersFinished(e.ctx) && (e.op == nil || e.op.rec.RunID != "")
}

func (e *entity) continueAsNew() error {
	st := e.st
	if e.op != nil {
		rec := *e.op.rec
		st.Current = &rec
	}
	return workflow.NewContinueAsNewError(e.ctx, core.ProxyName, ProxyInput{UID: e.uid, State: &st})
}

// schedule sets the timer for what the entity does next when idle: check a present proxy's VM,
// or close the entity of an absent one. The timer is made once per idle spell, not on every
// pass of the loop, so requests do not push it back.
func (e *entity) schedule() {
	e.cancelTimer()
	var d time.Duration
	// The timer's summary is what the UI shows for it, where workflow.Sleep's would read "Sleep".
	var summary string
	switch {
	case e.op != nil:
		return
	case e.st.Spec != nil:
		if e.s.Entity.CheckInterval <= 0 {
			return
		}
		d, summary = e.s.Entity.CheckInterval+e.jitter(), "next check"
		if e.st.Watched != 0 {
			d = e.backstop()
		}
	default:
		d, summary = e.s.Entity.CloseAfter, "close if no request comes"
	}
	ctx, cancel := workflow.WithCancel(e.ctx)
	e.stopTimer = cancel
	workflow.Go(ctx, func(ctx workflow.Context) {
		if workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: summary}).Get(ctx, nil) == nil {
			e.woken = true
		}
	})
}

func (e *entity) cancelTimer() {
	if e.stopTimer != nil {
		e.stopTimer()
		e.stopTimer = nil
	}
}

// jitter spreads the checks of a fleet: a fraction of entity.checkJitter that the UID and the
// check's number decide, so it needs no random number in history.
func (e *entity) jitter() time.Duration {
	if e.s.Entity.CheckJitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(e.uid + "/" + strconv.Itoa(e.st.Checks)))
	return time.Duration(h.Sum64() % uint64(e.s.Entity.CheckJitter))
}

// backstop is when an entity that the observer watches checks itself all the same: between half
// and one and a half entity.backstopInterval, as a hash of the UID and the check's number says,
// so that a fleet's backstops spread over the interval rather than come together.
func (e *entity) backstop() time.Duration {
	h := fnv.New64a()
	h.Write([]byte(e.uid + "/backstop/" + strconv.Itoa(e.st.Checks)))
	b := e.s.Entity.BackstopInterval
	return b/2 + time.Duration(h.Sum64()%uint64(b))
}

// watch gives the cluster's observer the entity's word on what to watch: VM vmid, from its next
// listing on, or nothing (vmid 0). The observer is started if none runs. Without its word
// taken (no observer configured, or Temporal refused the signal) the entity checks itself
// every interval.
func (e *entity) watch(vmid int) {
	if e.s.Entity.BackstopInterval <= 0 || e.s.Entity.CheckInterval <= 0 || (vmid == 0 && e.st.Watched == 0) {
		return
	}
	var a *activities.Activities
	observer := core.ObserverWorkflowID(workflow.GetInfo(e.ctx).TaskQueueName)
	step := "ask " + observer + " to watch the proxy's VM"
	arg, err := core.ProtocolJSON(core.WatchRequest{UID: e.uid, VMID: vmid})
	if err == nil {
		start := activities.StartRun{WorkflowType: core.ObserverName, TaskQueue: workflow.GetInfo(e.ctx).TaskQueueName, Input: json.RawMessage("{}")}
		err = core.Call(e.ctx, e.s.ProbeOptions(step), a.SignalWithStartRun,
			activities.SignalWithStartRunRequest{WorkflowID: observer, Signal: core.WatchSignal, Arg: arg, Start: start}).Get(e.ctx, nil)
	}
	if err != nil {
		workflow.GetLogger(e.ctx).Warn("the observer did not take the entity's word: the entity checks itself every interval", "uid", e.uid, "error", err)
		e.st.Watched = 0
		return
	}
	e.st.Watched = vmid
}

// opLink is what an entity's current details say of the operation that runs, workflowID in
// namespace: a link to its page in the Web UI, which renders current details as Markdown. Its
// page shows what it waits for, the step in its current details and the wait with its attempt
// and last failure under Pending Activities, which the entity cannot know without costing both
// histories a signal at every step. The link is relative to the UI's address, which no worker
// knows.
func opLink(namespace, workflowID string) string {
	return fmt.Sprintf("what it waits for shows on its page: [%s](/namespaces/%s/workflows/%s)",
		workflowID, url.PathEscape(namespace), url.PathEscape(workflowID))
}

// phase is the proxy's phase as its status and ProxyPhase say.
func (e *entity) phase() string {
	if e.op != nil {
		switch {
		case e.op.rec.Kind == OpDelete && e.st.Spec != nil:
			return ProxyChanging // the delete of a rebuild
		case e.op.rec.Kind == OpDelete:
			return ProxyDeleting
		case e.op.rec.Reason != "requested" && !strings.HasPrefix(e.op.rec.Reason, "rebuild"):
			return ProxyHealing
		case e.op.rec.Kind == OpChange || e.op.rebuildFrom != nil:
			return ProxyChanging
		}
		return ProxyCreating
	}
	switch {
	case e.st.Blocked:
		return ProxyFailed
	case e.st.Spec == nil:
		return ProxyAbsent
	}
	return ProxyPresent
}

// publish shows the proxy's phase and VM in its search attributes and the UI.
func (e *entity) publish() {
	phase := e.phase()
	details := phase
	if e.op != nil {
		details += fmt.Sprintf(": %s (%s), %s", e.op.rec.Kind, e.op.rec.Reason, opLink(workflow.GetInfo(e.ctx).Namespace, e.op.rec.WorkflowID))
	}
	workflow.SetCurrentDetails(e.ctx, details)
	// An upsert is an event in history: one per change, not one per check.
	key := fmt.Sprint(phase, e.nameOf(), e.st.Observed.Node, e.st.Observed.VMID)
	if key == e.published {
		return
	}
	e.published = key
	updates := []temporal.SearchAttributeUpdate{core.ProxyUIDKey.ValueSet(e.uid), core.ProxyNameKey.ValueSet(e.nameOf()), core.ProxyPhaseKey.ValueSet(phase)}
	if o := e.st.Observed; o.VMID != 0 {
		updates = append(updates, core.PveNodeKey.ValueSet(o.Node), core.PveVMIDKey.ValueSet(int64(o.VMID)))
	} else {
		updates = append(updates, core.PveNodeKey.ValueUnset(), core.PveVMIDKey.ValueUnset())
	}
	if err := workflow.UpsertTypedSearchAttributes(e.ctx, updates...); err != nil {
		workflow.GetLogger(e.ctx).Warn("search attribute update failed", "error", err)
	}
}

// status is the proxy as the status query tells it.
func (e *entity) status() ProxyStatus {
	st := ProxyStatus{
		UID:         e.uid,
		Phase:       e.phase(),
		Observed:    e.st.Observed,
		LastFailure: e.st.LastFailure,
		NextHealAt:  e.st.NextHealAt,
		Operations:  slices.Clone(e.st.Operations),
		Runs:        e.st.Runs,
		StartedAt:   e.st.StartedAt,
	}
	if st.Operations == nil {
		st.Operations = []OperationRecord{}
	}
	if s := e.st.Spec; s != nil {
		st.Desired = DesiredState{Present: true, Name: s.Name, Zone: s.Zone, Image: s.Image, MachineType: s.MachineType,
			UserDataSHA256: e.userDataSHA256(), InstanceID: s.InstanceID}
	}
	if e.op != nil {
		rec := *e.op.rec
		st.Operation = &rec
	}
	for _, w := range e.pending() {
		st.Requests = append(st.Requests, PendingRequest{Kind: w.kind, Served: e.op != nil && w.version <= e.op.serves})
	}
	return st
}
