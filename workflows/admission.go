package workflows

import (
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Clone admission. PVE allocates a clone's volumes on a storage under one lock per storage, taken
// with a 10 s timeout: dozens of clones at once onto one storage fail with "can't lock file
// '/var/lock/pve-manager/pve-storage-<id>' - got timeout". So at most clones.perStorage clones run
// at once onto one storage, first come first served, across every worker and workflow.
//
// One CloneAdmission workflow per storage grants the leases: an entity workflow is the one place
// that sees every request in order, survives any worker, and shows its queue in the UI, where
// a lock in a worker's memory would see one worker only and a task queue's rate limit bounds
// rates, not how many run at once. A create asks by signal (acquire), waits for the grant, and
// gives the lease back (release) when its clone task has ended, and when it fails or is
// cancelled. A holder that can give nothing back, because it was terminated, is found out: the
// admission checks its holders from time to time by a signal to their run, which fails for a
// closed run. A worker that dies loses nothing: the run goes on elsewhere, holding its lease.

// Signals of the clone admission protocol.
const (
	cloneAcquireSignal  = "clone-acquire"
	cloneReleaseSignal  = "clone-release"
	cloneAdmittedSignal = "clone-admitted"
	cloneQueuedSignal   = "clone-queued"
	cloneLeaseCheck     = "clone-lease-check"
)

// AdmissionQuery answers the admission's state: who holds a lease, who waits.
const AdmissionQuery = "admission"

// CloneAdmissionWorkflowID is the ID of the admission workflow of one storage key, for the
// workers of one task queue: another installation on the same Temporal namespace, with a task
// queue of its own, has admissions of its own, which its own workers run.
func CloneAdmissionWorkflowID(taskQueue, storage string) string {
	return "clone-admission/" + taskQueue + "/" + storage
}

// Holder is a workflow run that asks for a clone lease, or holds one.
type Holder struct {
	WorkflowID string `json:"workflowID"`
	RunID      string `json:"runID"`
}

// admissionRequest is what an acquire signal carries.
type admissionRequest struct {
	Holder
	// Limit is clones.perStorage as the requesting run has it; the admission takes the latest.
	Limit int `json:"limit"`
	// CheckEvery spaces the admission's checks that its holders still run.
	CheckEvery time.Duration `json:"checkEvery"`
}

// queued is what a clone-queued signal carries: how many requests are before this one.
type queued struct {
	Ahead int `json:"ahead"`
}

// AdmissionState is the admission's state, carried across continue-as-new, and what
// AdmissionQuery answers.
type AdmissionState struct {
	Storage    string        `json:"storage"`
	Limit      int           `json:"limit"`
	CheckEvery time.Duration `json:"checkEvery"`
	Holders    []Holder      `json:"holders"`
	Waiting    []Holder      `json:"waiting"`
}

// admissionHistoryLimit is the history length past which an idle admission continues as new.
const admissionHistoryLimit = 2000

// CloneAdmission grants the clone leases of one storage. It runs as long as clones are made
// onto that storage, continuing as new when its history grows long while nobody holds or waits.
func (w *Workflows) CloneAdmission(ctx workflow.Context, st AdmissionState) error {
	a := &admission{ctx: ctx, st: st}
	if err := workflow.SetQueryHandler(ctx, AdmissionQuery, func() (AdmissionState, error) { return a.st, nil }); err != nil {
		return err
	}
	acquires := workflow.GetSignalChannel(ctx, cloneAcquireSignal)
	releases := workflow.GetSignalChannel(ctx, cloneReleaseSignal)
	a.report()
	for ctx.Err() == nil {
		timerCtx, cancelTimer := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx).
			AddReceive(acquires, func(ch workflow.ReceiveChannel, _ bool) {
				var req admissionRequest
				ch.Receive(ctx, &req)
				a.acquire(req)
			}).
			AddReceive(releases, func(ch workflow.ReceiveChannel, _ bool) {
				var h Holder
				ch.Receive(ctx, &h)
				a.release(h)
			})
		if len(a.st.Holders) > 0 && a.st.CheckEvery > 0 {
			sel.AddFuture(workflow.NewTimer(timerCtx, a.st.CheckEvery), func(workflow.Future) { a.checkHolders() })
		}
		sel.Select(ctx)
		cancelTimer()
		a.grant()
		a.report()
		idle := len(a.st.Holders) == 0 && len(a.st.Waiting) == 0
		if idle && workflow.GetInfo(ctx).GetCurrentHistoryLength() > admissionHistoryLimit && acquires.Len() == 0 && releases.Len() == 0 {
			return workflow.NewContinueAsNewError(ctx, CloneAdmissionName, a.st)
		}
	}
	// Cancelled by a person: the creates that wait or hold a lease start a new one when they
	// ask again.
	return temporal.NewCanceledError()
}

type admission struct {
	ctx workflow.Context
	st  AdmissionState
}

func (a *admission) acquire(req admissionRequest) {
	if req.Limit > 0 {
		a.st.Limit = req.Limit
	}
	if req.CheckEvery > 0 {
		a.st.CheckEvery = req.CheckEvery
	}
	if slices.Contains(a.st.Holders, req.Holder) {
		a.tell(req.Holder, cloneAdmittedSignal, nil) // its grant crossed its repeated request
		return
	}
	if i := slices.Index(a.st.Waiting, req.Holder); i >= 0 {
		a.tell(req.Holder, cloneQueuedSignal, queued{Ahead: i})
		return
	}
	a.st.Waiting = append(a.st.Waiting, req.Holder)
	if len(a.st.Holders) >= a.st.Limit {
		a.tell(req.Holder, cloneQueuedSignal, queued{Ahead: len(a.st.Waiting) - 1})
	}
}

func (a *admission) release(h Holder) {
	a.st.Holders = slices.DeleteFunc(a.st.Holders, func(x Holder) bool { return x == h })
	a.st.Waiting = slices.DeleteFunc(a.st.Waiting, func(x Holder) bool { return x == h })
}

// grant admits waiting runs, first come first served, while leases are free. A run that does
// not take the grant (it has closed) is dropped. The grants go out together, and the runs still
// waiting learn how many are before them now, without the admission waiting for that news to
// arrive: with dozens waiting, one signal after the other would make the queue crawl.
func (a *admission) grant() {
	moved := false
	for len(a.st.Holders) < a.st.Limit && len(a.st.Waiting) > 0 {
		n := min(a.st.Limit-len(a.st.Holders), len(a.st.Waiting))
		next := slices.Clone(a.st.Waiting[:n])
		a.st.Waiting = a.st.Waiting[n:]
		moved = true
		for i, ok := range a.tellAll(next, cloneAdmittedSignal, nil) {
			if ok {
				a.st.Holders = append(a.st.Holders, next[i])
			}
		}
	}
	if moved {
		for i, h := range a.st.Waiting {
			workflow.SignalExternalWorkflow(a.ctx, h.WorkflowID, h.RunID, cloneQueuedSignal, queued{Ahead: i})
		}
	}
}

// checkHolders releases the leases of runs that have closed without giving them back: a
// terminated run runs no code, so it cannot.
func (a *admission) checkHolders() {
	holders := slices.Clone(a.st.Holders)
	for i, alive := range a.tellAll(holders, cloneLeaseCheck, nil) {
		if !alive {
			h := holders[i]
			workflow.GetLogger(a.ctx).Warn("releasing the clone lease of a run that closed without giving it back", "workflowID", h.WorkflowID, "runID", h.RunID)
			a.release(h)
		}
	}
}

// report sets the gauges of the storage's clones: those waiting for a lease and those holding
// one. The worker running the admission reports them; one that ran it before keeps the values it
// last saw.
func (a *admission) report() {
	h := workflow.GetMetricsHandler(a.ctx).WithTags(map[string]string{"storage": a.st.Storage})
	h.Gauge(clonesQueuedMetric).Update(float64(len(a.st.Waiting)))
	h.Gauge(clonesRunningMetric).Update(float64(len(a.st.Holders)))
}

// tell signals a run; it fails when the run has closed.
func (a *admission) tell(h Holder, signal string, payload any) bool {
	return a.tellAll([]Holder{h}, signal, payload)[0]
}

// tellAll signals runs at once and reports which took the signal; a closed run does not.
func (a *admission) tellAll(hs []Holder, signal string, payload any) []bool {
	futures := make([]workflow.Future, len(hs))
	for i, h := range hs {
		futures[i] = workflow.SignalExternalWorkflow(a.ctx, h.WorkflowID, h.RunID, signal, payload)
	}
	ok := make([]bool, len(hs))
	for i, f := range futures {
		ok[i] = f.Get(a.ctx, nil) == nil
	}
	return ok
}

// lease is a create's side of the admission: its request, and what it holds.
type lease struct {
	// admission is the admission workflow's ID, storage the storage key it admits clones onto.
	admission, storage string
	req                admissionRequest
	held               bool
}

// admitClone waits for a lease to clone onto storage, showing in the status and the UI how many
// requests are before it. The admission workflow is started when none runs. A request whose
// grant got lost (the admission continued as new just then) is repeated from time to time.
func (c *create) admitClone(storage string) (*lease, error) {
	info := workflow.GetInfo(c.ctx)
	l := &lease{admission: CloneAdmissionWorkflowID(info.TaskQueueName, storage), storage: storage, req: admissionRequest{
		Holder:     Holder{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID},
		Limit:      c.s.Clones.PerStorage,
		CheckEvery: max(c.s.Poll.MaximumInterval, time.Second) * 3,
	}}
	c.t.phase(PhaseQueued, fmt.Sprintf("ask %s for a clone lease", l.admission))
	if err := c.askForLease(l); err != nil {
		return nil, err
	}
	admitted := workflow.GetSignalChannel(c.ctx, cloneAdmittedSignal)
	queue := workflow.GetSignalChannel(c.ctx, cloneQueuedSignal)
	every := c.s.Poll.MaximumInterval
	timerCtx, cancelTimer := workflow.WithCancel(c.ctx)
	defer func() { cancelTimer() }()
	timer := workflow.NewTimer(timerCtx, every)
	var askErr error
	for !l.held && c.ctx.Err() == nil && askErr == nil {
		workflow.NewSelector(c.ctx).
			AddReceive(admitted, func(ch workflow.ReceiveChannel, _ bool) {
				ch.Receive(c.ctx, nil)
				l.held = true
			}).
			AddReceive(queue, func(ch workflow.ReceiveChannel, _ bool) {
				var q queued
				ch.Receive(c.ctx, &q)
				c.t.status.QueuedBehind = q.Ahead
				c.t.step(fmt.Sprintf("queued for a clone onto storage %s: %d ahead, %d cloning (clones.perStorage)", storage, q.Ahead, l.req.Limit))
			}).
			AddFuture(timer, func(workflow.Future) {
				if c.ctx.Err() != nil {
					return
				}
				askErr = c.askForLease(l)
				every = min(2*every, maxAskInterval)
				timer = workflow.NewTimer(timerCtx, every)
			}).
			Select(c.ctx)
	}
	if askErr != nil {
		return nil, askErr
	}
	c.t.status.QueuedBehind = 0
	if !l.held {
		l.release(c.ctx)
		return nil, temporal.NewCanceledError("stopped while queued for a clone lease")
	}
	return l, nil
}

// maxAskInterval caps the backoff between a queued create's repeated lease requests. They
// matter only when a grant was lost, so they can be rare.
const maxAskInterval = 2 * time.Minute

// askForLease sends the lease request to the storage's admission, starting the admission
// when none runs. Whether it runs is asked of Temporal first: a signal to an admission that
// does not run would fail, and leave a failed event in the history of a create that succeeds.
func (c *create) askForLease(l *lease) error {
	c.t.step("describe workflow " + l.admission)
	admission, err := describeRun(c.ctx, c.s, l.admission)
	if err != nil {
		return err
	}
	if admission.Running && c.signalAcquire(l) == nil {
		return nil
	}
	// None runs, or the one that ran has closed since it was described.
	if err := c.startAdmission(l); err != nil {
		return err
	}
	if err := c.signalAcquire(l); err != nil {
		return transientf("create proxy %s: ask %s for a clone lease: %v", c.in.Name, l.admission, err)
	}
	return nil
}

func (c *create) signalAcquire(l *lease) error {
	return workflow.SignalExternalWorkflow(c.ctx, l.admission, "", cloneAcquireSignal, l.req).Get(c.ctx, nil)
}

// startAdmission starts the admission workflow of the lease's storage, on this run's task
// queue, unless another create just did. It is a child only in name: it is abandoned, so it
// outlives this run.
func (c *create) startAdmission(l *lease) error {
	ctx := workflow.WithChildOptions(c.ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            l.admission,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	})
	child := workflow.ExecuteChildWorkflow(ctx, CloneAdmissionName, AdmissionState{Storage: l.storage})
	var started workflow.Execution
	err := child.GetChildWorkflowExecution().Get(ctx, &started)
	if err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return transientf("create proxy %s: start %s: %v", c.in.Name, l.admission, err)
	}
	return nil
}

// release gives the lease back, or withdraws the request. It runs on a disconnected context, so
// a failed or cancelled run still does it.
func (l *lease) release(ctx workflow.Context) {
	if l == nil {
		return
	}
	ctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	err := workflow.SignalExternalWorkflow(ctx, l.admission, "", cloneReleaseSignal, l.req.Holder).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("clone lease not given back; the admission finds it out", "storage", l.storage, "error", err)
	}
	l.held = false
}
