package admission

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
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
// gives the lease back (release) when it has seen its clone task end, or when it fails or is
// cancelled. A lease covers a clone, not a run: a create that stops before it saw its clone end
// (its budget spent, a delete stopping it, an answer lost and the clone adopted) gives the
// lease back with the clone it covers, and the admission keeps it until PVE says that clone has
// ended. A holder that can give nothing back, because it was terminated, is found out: the
// admission asks Temporal on a schedule whether its holders' runs still run. A worker that
// dies loses nothing: the run goes on elsewhere, holding its lease.
//
// The admission outlives whatever starts it: a create starts it on a disconnected context, and
// abandons it. Its work per event is bounded (a grant signals the runs it admits, no one else: a
// queued run's place is answered by AdmissionQuery), and it continues as new when the server
// suggests it, carrying its holders and queue.

// Signals of the clone admission protocol.
const (
	cloneAcquireSignal  = "clone-acquire"
	cloneReleaseSignal  = "clone-release"
	cloneAdmittedSignal = "clone-admitted"
)

// AdmissionQuery answers the admission's state: who holds a lease, who waits, in order, and
// which clones it still covers for runs that stopped waiting for them.
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
	// CheckEvery spaces the admission's checks of its holders and of the clones it covers.
	CheckEvery time.Duration `json:"checkEvery"`
	// HistoryEvents is clones.historyEvents as the requesting run has it.
	HistoryEvents int `json:"historyEvents,omitempty"`
}

// leaseRelease is what a release signal carries: the run, and the clone its lease still covers
// when the run stopped before it saw that clone end.
type leaseRelease struct {
	Holder
	Clone *CloneInFlight `json:"clone,omitempty"`
	// Waited is, on the release of a clone that ended well, how long its wait waited, from its
	// first look to the one that saw the end (activities.TaskResult.Waited): the admission learns
	// from it how long its storage's clones take. The look that gives the lease back
	// (lease.giveBack) adds it to the release it sends.
	Waited time.Duration `json:"waited,omitempty"`
}

// cloneGrant is what a clone-admitted signal carries.
type cloneGrant struct {
	// ExpectedClone is how long the storage's clones take, from the last ones (the median of
	// AdmissionState.RecentClones); zero when none has been seen. The create's wait gathers its
	// looks around that end (activities.Pace.Expected), so that the lease comes back soon after
	// the clone ends.
	ExpectedClone time.Duration `json:"expectedClone,omitempty"`
}

// CloneInFlight is a clone whose end its create did not see: its task, when the create has the
// task's UPID, else the VM the clone makes (the Clone call's answer was lost). It has ended when
// its task has, or when the VM is gone or no longer locked by the clone.
type CloneInFlight struct {
	// Node is the node the clone task runs on, the template's.
	Node string   `json:"node"`
	UPID pve.UPID `json:"upid,omitempty"`
	VMID int      `json:"vmid,omitempty"`
}

// CoveredClone is a lease given back with a clone still in flight: it counts against the limit
// until the clone has ended.
type CoveredClone struct {
	Holder
	CloneInFlight
}

// AdmissionState is the admission's state, carried across continue-as-new, and what
// AdmissionQuery answers. Waiting is in order: a run's index in it is how many are before it.
type AdmissionState struct {
	Storage    string         `json:"storage"`
	Limit      int            `json:"limit"`
	CheckEvery time.Duration  `json:"checkEvery"`
	Holders    []Holder       `json:"holders"`
	Waiting    []Holder       `json:"waiting"`
	Covered    []CoveredClone `json:"covered,omitempty"`
	// RecentClones are the last clones' durations as their waits saw them (leaseRelease.Waited),
	// oldest first: at most activities.RecentWaits of them.
	RecentClones []time.Duration `json:"recentClones,omitempty"`
	// HistoryEvents is the history length past which it continues as new; zero is
	// defaultAdmissionHistoryEvents.
	HistoryEvents int `json:"historyEvents,omitempty"`
}

// defaultAdmissionHistoryEvents is the history length past which the admission continues as
// new, if the server has not suggested it before, until a request brings clones.historyEvents.
const defaultAdmissionHistoryEvents = 10000

// CloneAdmission grants the clone leases of one storage. It runs as long as clones are made
// onto that storage. Cancelled, it grants no more leases and closes once its leases are back:
// the creates still queued ask a new admission when they ask again.
func (w *Workflows) CloneAdmission(ctx workflow.Context, st AdmissionState) error {
	a := &admission{st: st}
	a.ctx, _ = workflow.NewDisconnectedContext(ctx)
	if err := workflow.SetQueryHandler(ctx, AdmissionQuery, func() (AdmissionState, error) { return a.st, nil }); err != nil {
		return err
	}
	a.acquires = workflow.GetSignalChannel(ctx, cloneAcquireSignal)
	a.releases = workflow.GetSignalChannel(ctx, cloneReleaseSignal)
	a.report()
	cancelled := false
	var check workflow.Future // one check at a time, on a schedule that no signal pushes back
	for {
		if check == nil && a.busy() && a.st.CheckEvery > 0 {
			check = workflow.NewTimer(a.ctx, a.st.CheckEvery)
		}
		sel := workflow.NewSelector(a.ctx)
		a.receive(sel)
		if !cancelled {
			sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { cancelled = true })
		}
		if check != nil {
			sel.AddFuture(check, func(workflow.Future) {
				check = nil
				a.checkHolders()
				a.checkCovered()
			})
		}
		sel.Select(a.ctx)
		if cancelled {
			a.st.Waiting = nil
		} else {
			a.grant()
		}
		a.report()
		switch {
		case cancelled && !a.busy():
			return temporal.NewCanceledError()
		case !cancelled && a.historyIsLong():
			return a.continueAsNew()
		}
	}
}

type admission struct {
	// ctx is disconnected from the run's: a cancelled admission still checks and hears back
	// the leases it has granted.
	ctx workflow.Context
	st  AdmissionState
	// acquires and releases are the channels of the protocol's two signals to the admission.
	acquires, releases workflow.ReceiveChannel
}

// busy is whether any lease is out: held, or covering a clone in flight.
func (a *admission) busy() bool { return len(a.st.Holders)+len(a.st.Covered) > 0 }

func (a *admission) historyIsLong() bool {
	return core.HistoryPast(a.ctx, cmp.Or(a.st.HistoryEvents, defaultAdmissionHistoryEvents))
}

// receive adds the admission's two signal channels to sel.
func (a *admission) receive(sel workflow.Selector) {
	sel.AddReceive(a.acquires, func(ch workflow.ReceiveChannel, _ bool) {
		var req admissionRequest
		ch.Receive(a.ctx, &req)
		a.acquire(req)
	}).AddReceive(a.releases, func(ch workflow.ReceiveChannel, _ bool) {
		var r leaseRelease
		ch.Receive(a.ctx, &r)
		a.release(r)
	})
}

// continueAsNew takes in every signal already delivered, so that none is lost with this run,
// grants what it can, and continues as new with the holders, the queue and the covered clones.
func (a *admission) continueAsNew() error {
	for {
		var req admissionRequest
		var r leaseRelease
		switch {
		case a.acquires.ReceiveAsync(&req):
			a.acquire(req)
		case a.releases.ReceiveAsync(&r):
			a.release(r)
		default:
			a.grant() // its signals may let more in: take them too
			if a.acquires.Len() == 0 && a.releases.Len() == 0 {
				return workflow.NewContinueAsNewError(a.ctx, core.CloneAdmissionName, a.st)
			}
		}
	}
}

func (a *admission) acquire(req admissionRequest) {
	if req.Limit > 0 {
		a.st.Limit = req.Limit
	}
	if req.CheckEvery > 0 {
		a.st.CheckEvery = req.CheckEvery
	}
	if req.HistoryEvents > 0 {
		a.st.HistoryEvents = req.HistoryEvents
	}
	if slices.Contains(a.st.Holders, req.Holder) {
		a.tell(req.Holder, cloneAdmittedSignal, a.grantNow()) // its grant crossed its repeated request
		return
	}
	if !slices.Contains(a.st.Waiting, req.Holder) {
		a.st.Waiting = append(a.st.Waiting, req.Holder)
	}
}

// release takes back a run's lease, or withdraws its request. A lease given back with a clone
// in flight goes on covering that clone.
func (a *admission) release(r leaseRelease) {
	held := slices.Contains(a.st.Holders, r.Holder)
	a.st.Holders = slices.DeleteFunc(a.st.Holders, func(x Holder) bool { return x == r.Holder })
	a.st.Waiting = slices.DeleteFunc(a.st.Waiting, func(x Holder) bool { return x == r.Holder })
	if held && r.Clone != nil {
		a.st.Covered = append(a.st.Covered, CoveredClone{Holder: r.Holder, CloneInFlight: *r.Clone})
	}
	if held && r.Waited > 0 {
		a.st.RecentClones = activities.Remember(a.st.RecentClones, r.Waited)
	}
}

// grantNow is the grant the admission sends now.
func (a *admission) grantNow() cloneGrant {
	return cloneGrant{ExpectedClone: activities.ExpectedWait(a.st.RecentClones)}
}

// grant admits waiting runs, first come first served, while leases are free. A run that does
// not take the grant (it has closed) is dropped. The grants go out together.
func (a *admission) grant() {
	for len(a.st.Holders)+len(a.st.Covered) < a.st.Limit && len(a.st.Waiting) > 0 {
		n := min(a.st.Limit-len(a.st.Holders)-len(a.st.Covered), len(a.st.Waiting))
		next := slices.Clone(a.st.Waiting[:n])
		a.st.Waiting = a.st.Waiting[n:]
		for i, ok := range a.tellAll(next, cloneAdmittedSignal, a.grantNow()) {
			if ok {
				a.st.Holders = append(a.st.Holders, next[i])
			}
		}
	}
}

// checkHolders releases the leases of runs that have closed without giving them back: a
// terminated run runs no code, so it cannot. Its clone, if one still runs, is not known here.
//
// A run that closes gives its lease back first, but its release may have come during the workflow
// task that found it closed, and a task takes in only the signals that came before it began:
// released there, a lease given back with its clone in flight would be granted again while that
// clone runs. So the admission waits for its next task, takes in the releases that came, and
// releases only the leases still held by runs found closed.
func (a *admission) checkHolders() {
	holders := slices.Clone(a.st.Holders)
	var closed []Holder
	for i, alive := range a.describeAll(holders) {
		if !alive {
			closed = append(closed, holders[i])
		}
	}
	if len(closed) == 0 {
		return
	}
	_ = workflow.Sleep(a.ctx, time.Millisecond) // the next workflow task
	var r leaseRelease
	for a.releases.ReceiveAsync(&r) {
		a.release(r)
		r = leaseRelease{}
	}
	for _, h := range closed {
		if slices.Contains(a.st.Holders, h) {
			workflow.GetLogger(a.ctx).Warn("releasing the clone lease of a run that closed without giving it back", "workflowID", h.WorkflowID, "runID", h.RunID)
			a.release(leaseRelease{Holder: h})
		}
	}
}

// checkCovered asks PVE, once per covered clone, whether it has ended, and frees the leases of
// those that have. A clone that cannot be read this time is asked again at the next check.
func (a *admission) checkCovered() {
	if len(a.st.Covered) == 0 {
		return
	}
	var acts *activities.Activities
	futures := make([]workflow.Future, len(a.st.Covered))
	for i, c := range a.st.Covered {
		ctx := workflow.WithActivityOptions(a.ctx, workflow.ActivityOptions{
			StartToCloseTimeout: max(a.st.CheckEvery, time.Second),
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
			Summary:             "has the clone of " + c.WorkflowID + " ended?",
		})
		if c.UPID != "" {
			futures[i] = workflow.ExecuteActivity(ctx, acts.TaskStatus, activities.TaskStatusRequest{Node: c.Node, UPID: c.UPID})
		} else {
			futures[i] = workflow.ExecuteActivity(ctx, acts.VMConfig, activities.VMConfigRequest{VMRef: activities.VMRef{Node: c.Node, VMID: c.VMID}})
		}
	}
	still := a.st.Covered[:0:0]
	for i, f := range futures {
		c := a.st.Covered[i]
		var cfg pve.VMConfig
		err := f.Get(a.ctx, &cfg)
		ended := core.IsType(err, activities.ErrNotFound) || core.IsType(err, activities.ErrTaskFailed) ||
			(err == nil && (c.UPID != "" || cfg["lock"] != "clone"))
		if !ended {
			still = append(still, c)
		}
	}
	a.st.Covered = still
}

// report sets the gauges of the storage's clones: those waiting for a lease and those holding
// one or covered by one. The worker running the admission reports them; one that ran it before
// keeps the values it last saw.
func (a *admission) report() {
	h := workflow.GetMetricsHandler(a.ctx).WithTags(map[string]string{"storage": a.st.Storage})
	h.Gauge(clonesQueuedMetric).Update(float64(len(a.st.Waiting)))
	h.Gauge(clonesRunningMetric).Update(float64(len(a.st.Holders) + len(a.st.Covered)))
}

// tell signals a run; it fails when the run has closed.
func (a *admission) tell(h Holder, signal string, payload any) bool {
	return a.tellAll([]Holder{h}, signal, payload)[0]
}

// tellAll signals runs at once and reports which took the signal; a closed run does not.
//
// The signals go as calls (SignalRun, a local activity each), which the worker makes within the
// workflow task that decided them: a signal from the workflow is sent only once that task
// completes, and its outcome comes back in another, so every grant would cost the admission two
// workflow tasks in a row, and a lease's turn the time between them, while releases queued
// behind it. A call that fails is made again as a signal from the workflow: a run that has
// closed refuses that too, and the test environment, where an activity cannot signal a
// workflow, takes it.
func (a *admission) tellAll(hs []Holder, signal string, payload any) []bool {
	var acts *activities.Activities
	arg, err := core.ProtocolJSON(payload)
	if err != nil {
		return a.signalAll(hs, signal, payload)
	}
	ctx := workflow.WithLocalActivityOptions(a.ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: max(a.st.CheckEvery, time.Second),
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	futures := make([]workflow.Future, len(hs))
	for i, h := range hs {
		futures[i] = workflow.ExecuteLocalActivity(ctx, acts.SignalRun, activities.SignalRunRequest{WorkflowID: h.WorkflowID, RunID: h.RunID, Signal: signal, Arg: arg})
	}
	ok := make([]bool, len(hs))
	var again []Holder
	var at []int // again[j] is hs[at[j]]
	for i, f := range futures {
		if f.Get(a.ctx, nil) == nil {
			ok[i] = true
			continue
		}
		again, at = append(again, hs[i]), append(at, i)
	}
	for j, took := range a.signalAll(again, signal, payload) {
		ok[at[j]] = took
	}
	return ok
}

// signalAll signals runs from the workflow, for the calls that failed (tellAll).
func (a *admission) signalAll(hs []Holder, signal string, payload any) []bool {
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

// describeAll asks Temporal, at once, whether each run still runs: a local activity each, a
// marker in the admission's history and nothing in the run's. A run that cannot be described
// this time counts as running, and is asked again at the next check.
func (a *admission) describeAll(hs []Holder) []bool {
	var acts *activities.Activities
	ctx := workflow.WithLocalActivityOptions(a.ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: max(a.st.CheckEvery, time.Second),
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	futures := make([]workflow.Future, len(hs))
	for i, h := range hs {
		futures[i] = workflow.ExecuteLocalActivity(ctx, acts.DescribeRun, activities.DescribeRunRequest{WorkflowID: h.WorkflowID, RunID: h.RunID})
	}
	alive := make([]bool, len(hs))
	for i, f := range futures {
		var run activities.RunInfo
		err := f.Get(a.ctx, &run)
		alive[i] = err != nil || run.Running
	}
	return alive
}

// Lease is a create's side of the admission: its request, and what it holds.
type Lease struct {
	// admission is the admission workflow's ID, storage the storage key it admits clones onto.
	admission, storage string
	req                admissionRequest
	held               bool
	// given is set once the clone's wait gave the lease back (giveBack): release has nothing
	// left to do.
	given bool
	// clone is the clone the lease covers whose end the create has not seen, if any.
	clone *CloneInFlight
	// expectedClone is how long the admission expects the clone to take (cloneGrant).
	ExpectedClone time.Duration
	// cloneWaited is how long the wait of the clone that ended well waited, once it has.
	cloneWaited time.Duration
}

// leaseAsker is a create asking for a clone lease: its run's context, settings and tracker,
// and the proxy's name for its errors.
type leaseAsker struct {
	ctx  workflow.Context
	s    core.Settings
	t    *core.Tracker
	name string
}

// Admit waits for a lease to clone onto storage for the create of proxy name (see
// leaseAsker.admitClone).
func Admit(ctx workflow.Context, s core.Settings, t *core.Tracker, name, storage string) (*Lease, error) {
	return (&leaseAsker{ctx: ctx, s: s, t: t, name: name}).admitClone(storage)
}

// admitClone waits for a lease to clone onto storage. The admission workflow is started when
// none runs. A request is lost only with its admission (cancelled, or terminated or reset by a
// person), so a queued create asks again rarely: a minute after it asked, then at doubling
// intervals up to maxAskInterval. Each ask costs its history a timer, a workflow task and a
// signal; asking from poll.maximumInterval on was most of a queued create's history. How many
// are before it the status does not say, the admission does (AdmissionQuery; pveflow status
// asks it): telling every queued create its place on every grant made the admission's history
// grow with the square of its queue.
func (c *leaseAsker) admitClone(storage string) (*Lease, error) {
	info := workflow.GetInfo(c.ctx)
	l := &Lease{admission: CloneAdmissionWorkflowID(info.TaskQueueName, storage), storage: storage, req: admissionRequest{
		Holder:        Holder{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID},
		Limit:         c.s.Clones.PerStorage,
		CheckEvery:    max(c.s.Poll.MaximumInterval, time.Second) * 3,
		HistoryEvents: c.s.Clones.HistoryEvents,
	}}
	c.t.Phase(core.PhaseQueued, fmt.Sprintf("ask %s for a clone lease", l.admission))
	c.t.Status.Admission = l.admission
	defer func() { c.t.Status.Admission = "" }()
	if err := c.askForLease(l); err != nil {
		return nil, err
	}
	c.t.Step(fmt.Sprintf("queued for a clone onto storage %s, where %d clone at once (clones.perStorage)", storage, l.req.Limit))
	admitted := workflow.GetSignalChannel(c.ctx, cloneAdmittedSignal)
	every := firstAskAgain
	timerCtx, cancelTimer := workflow.WithCancel(c.ctx)
	defer func() { cancelTimer() }()
	timer := workflow.NewTimer(timerCtx, every)
	var askErr error
	for !l.held && c.ctx.Err() == nil && askErr == nil {
		workflow.NewSelector(c.ctx).
			AddReceive(admitted, func(ch workflow.ReceiveChannel, _ bool) {
				var grant cloneGrant
				ch.Receive(c.ctx, &grant)
				l.held, l.ExpectedClone = true, grant.ExpectedClone
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
	if !l.held {
		l.Release(c.ctx, c.s)
		return nil, temporal.NewCanceledError("stopped while queued for a clone lease")
	}
	return l, nil
}

// firstAskAgain is how long a queued create waits before it asks its admission again, and
// maxAskInterval caps the backoff between its later asks.
const (
	firstAskAgain  = time.Minute
	maxAskInterval = 2 * time.Minute
)

// askForLease sends the lease request to the storage's admission, starting the admission
// when none runs, in one call (SignalWithStartRun, a local activity): one marker, where
// starting the admission as a child and signalling it from the workflow cost ten events and two
// workflow tasks. A call that fails is done that way: the child's start orders the signal after
// it. (The test environment, which cannot start a workflow from an activity, goes that way too.)
func (c *leaseAsker) askForLease(l *Lease) error {
	var a *activities.Activities
	step := "ask " + l.admission + " for a clone lease"
	c.t.Step(step)
	arg, err := core.ProtocolJSON(l.req)
	if err != nil {
		return core.Permanentf("create proxy %s: %s: %v", c.name, step, err)
	}
	input, err := core.ProtocolJSON(AdmissionState{Storage: l.storage})
	if err != nil {
		return core.Permanentf("create proxy %s: %s: %v", c.name, step, err)
	}
	start := activities.StartRun{WorkflowType: core.CloneAdmissionName, TaskQueue: workflow.GetInfo(c.ctx).TaskQueueName, Input: input, WorkflowTaskTimeout: admissionTaskTimeout, PriorityKey: admissionPriority}
	req := activities.SignalWithStartRunRequest{WorkflowID: l.admission, Signal: cloneAcquireSignal, Arg: arg, Start: start}
	if core.Call(c.ctx, c.s.CallOptions(step), a.SignalWithStartRun, req).Get(c.ctx, nil) == nil {
		return nil
	}
	if err := c.startAdmission(l); err != nil {
		return err
	}
	if err := workflow.SignalExternalWorkflow(c.ctx, l.admission, "", cloneAcquireSignal, l.req).Get(c.ctx, nil); err != nil {
		return core.Transientf("create proxy %s: ask %s for a clone lease: %v", c.name, l.admission, err)
	}
	return nil
}

// startAdmission starts the admission workflow of the lease's storage, on this run's task
// queue, unless another create just did. It is a child only in name: it is abandoned, so it
// outlives this run, and it is started on a disconnected context, so that cancelling this run
// does not cancel it: the SDK asks a child to cancel when its starting context is cancelled,
// whatever its ParentClosePolicy.
func (c *leaseAsker) startAdmission(l *Lease) error {
	ctx, _ := workflow.NewDisconnectedContext(c.ctx)
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            l.admission,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowTaskTimeout:   admissionTaskTimeout,
		Priority:              temporal.Priority{PriorityKey: admissionPriority},
	})
	child := workflow.ExecuteChildWorkflow(ctx, core.CloneAdmissionName, AdmissionState{Storage: l.storage})
	var started workflow.Execution
	err := child.GetChildWorkflowExecution().Get(ctx, &started)
	if err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return core.Transientf("create proxy %s: start %s: %v", c.name, l.admission, err)
	}
	return nil
}

// GiveBack is the release the clone's wait sends when it sees the clone end well
// (TaskStatusRequest.Then), from whichever worker makes that look: the lease comes back within
// the look's pace of PVE's end of the clone, where the create's next workflow task, on a worker
// that may have died, could hold it for seconds while creates queue for the slot. A clone that
// ended well is the last the lease covers: the create clones no more. The look adds how long
// the wait waited (leaseRelease.Waited). Nil without a lease.
func (l *Lease) GiveBack() (*activities.SignalRunRequest, error) {
	if l == nil {
		return nil, nil
	}
	arg, err := core.ProtocolJSON(leaseRelease{Holder: l.req.Holder})
	if err != nil {
		return nil, err
	}
	return &activities.SignalRunRequest{WorkflowID: l.admission, Signal: cloneReleaseSignal, Arg: arg}, nil
}

// CloneEnded records that the clone ended well, as its wait res saw it, and whether the wait's
// look gave the lease back. A lease the look could not give back goes back with release, which
// then tells the admission how long the clone took.
func (l *Lease) CloneEnded(res activities.TaskResult) {
	if l == nil {
		return
	}
	l.clone, l.cloneWaited = nil, res.Waited
	if res.Signalled {
		l.given, l.held = true, false
	}
}

// Covers records the clone the lease covers, or, with nil, that the create saw it end.
func (l *Lease) Covers(clone *CloneInFlight) {
	if l != nil {
		l.clone = clone
	}
}

// Release gives the lease back, with the clone it still covers, or withdraws the request, as a
// call (SignalRun): one marker, and the admission hears it within the workflow task that saw the
// clone end. It runs on a disconnected context, so a failed or cancelled run still does it. An
// admission the call finds not running is signalled from the workflow all the same: none runs
// then, and the signal fails, except in the test environment, where the operations' tests run
// and an activity cannot signal a workflow.
func (l *Lease) Release(ctx workflow.Context, s core.Settings) {
	if l == nil || l.given {
		return
	}
	ctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	release := leaseRelease{Holder: l.req.Holder, Clone: l.clone, Waited: l.cloneWaited}
	err := core.SignalRun(ctx, s, l.admission, cloneReleaseSignal, release)
	if core.IsType(err, activities.ErrNotFound) {
		err = workflow.SignalExternalWorkflow(ctx, l.admission, "", cloneReleaseSignal, release).Get(ctx, nil)
	}
	if err != nil {
		workflow.GetLogger(ctx).Warn("clone lease not given back; the admission finds it out", "storage", l.storage, "error", err)
	}
	l.held = false
}
