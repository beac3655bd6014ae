// Package starter is what an operator uses to drive pveflow: ask a proxy, by its UID, to be
// created, changed or deleted, follow the operation that serves the request, read the proxy's
// status, and list proxies by phase; and, through the short read workflows, get what a proxy's
// VM is doing, list the VMs carrying pveflow's mark, and check the cluster's health (read.go). A
// Kubernetes controller imports it; the pveflow CLI (starter/cmd/pveflow) is a thin shell
// around it.
//
// Everything is keyed by the Proxy UID. A proxy is one long-lived workflow, its entity
// (core.ProxyWorkflowID): Create, Change and Delete send it Updates with UpdateWithStart
// (request.go), and it runs each operation as a child workflow under an ID of its own
// (core.CreateWorkflowID, ChangeWorkflowID, DeleteWorkflowID). Progress, Status and the
// wait operations act on the latest run of the child an Op names; ProxyProgress on the entity.
//
// A Proxy UID is 1 to 128 bytes of ASCII letters, digits, '-', '_' and '.', starting with a
// letter or digit: Kubernetes UIDs (UUIDs), ULIDs and Kubernetes object names up to 128
// characters fit. Every method that takes a UID refuses any other with an error that wraps
// ErrInvalidUID, before it calls Temporal.
package starter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/workflows/admission"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// What errors.Is finds in the error of a method given input it refuses before it calls Temporal:
// the same refusals, with the same messages, as the CLI's and the proxy's entity's
// (proxyvm.SpecError). Each is bad input: no workflow was started or asked.
var (
	// ErrInvalidUID: a UID that is not a Proxy UID: empty, longer than 128 bytes, with a
	// character besides ASCII letters, digits, '-', '_' and '.', or not starting with a letter
	// or digit. The message quotes it.
	ErrInvalidUID = proxyvm.ErrInvalidUID
	// ErrUserDataTooLarge: user-data over proxyvm.MaxUserDataBytes. The message gives the
	// user-data's size and the limit, never the user-data.
	ErrUserDataTooLarge = proxyvm.ErrUserDataTooLarge
	// ErrInvalidName: a name that is not a DNS label. The message quotes it.
	ErrInvalidName = proxyvm.ErrInvalidName
	// ErrInvalidNetwork: static addresses or NICs that are not valid, or an address pool
	// beside static addresses. The message says what is wrong with each.
	ErrInvalidNetwork = proxyvm.ErrInvalidNetwork
	// ErrNothingToChange: a change that sets nothing.
	ErrNothingToChange = proxyvm.ErrNothingToChange
)

// refused is the error of a request refused before or by the entity: its message is the
// refusal's, and it is its sentinel (ErrInvalidUID, ErrRejected) to errors.Is.
type refused struct{ err, sentinel error }

func (e refused) Error() string        { return e.err.Error() }
func (e refused) Unwrap() error        { return e.err }
func (e refused) Is(target error) bool { return target == e.sentinel }

// checkUID returns an error wrapping ErrInvalidUID when uid is not a Proxy UID.
func checkUID(uid string) error {
	if err := proxy.ValidateUID(uid); err != nil {
		return refused{err, ErrInvalidUID}
	}
	return nil
}

// Op names one of the operations of a proxy: the child workflows its entity runs.
type Op string

// The operations on a proxy.
const (
	Create Op = proxyvm.OpCreate
	Change Op = proxyvm.OpChange
	Delete Op = proxyvm.OpDelete
)

// workflowID is the ID of the workflow op of uid, or an error wrapping ErrInvalidUID.
func (op Op) workflowID(uid string) (string, error) {
	if err := checkUID(uid); err != nil {
		return "", err
	}
	switch op {
	case Create:
		return core.CreateWorkflowID(uid), nil
	case Change:
		return core.ChangeWorkflowID(uid), nil
	case Delete:
		return core.DeleteWorkflowID(uid), nil
	}
	return "", fmt.Errorf("unknown operation %q: want %q, %q or %q", op, Create, Change, Delete)
}

// Client starts and follows proxy workflows on one task queue. It is safe for concurrent use.
type Client struct {
	temporal  client.Client
	taskQueue string
	// dc is the data converter of temporal's client.Options, for what the SDK leaves encoded:
	// the last failure of a pending activity.
	dc converter.DataConverter
	// namespace is the namespace of temporal's client.Options, which the calls of the workflow
	// service that the SDK does not wrap (the activity operations of RetryWait, ...) name.
	namespace string
}

// An Option changes a Client New makes.
type Option func(*Client)

// WithDataConverter tells the Client the data converter its Temporal client was made with (the
// DataConverter of the options ClientOptions returns), so that Progress can decrypt the last
// failure of a pending activity whose message a worker before pveflow left failure messages
// plain encrypted: the SDK decodes workflow results and errors itself, but not what
// DescribeWorkflowExecution returns. A nil dc is the SDK's default.
func WithDataConverter(dc converter.DataConverter) Option {
	return func(c *Client) {
		if dc != nil {
			c.dc = dc
		}
	}
}

// WithNamespace tells the Client the namespace its Temporal client was dialled with (the
// Namespace of the options ClientOptions returns), which RetryWait, PauseWait and ResumeWait
// name in their calls. An empty namespace is the SDK's default, "default".
func WithNamespace(namespace string) Option {
	return func(c *Client) {
		if namespace != "" {
			c.namespace = namespace
		}
	}
}

// New returns a Client that starts workflows on taskQueue through c. Closing c is the
// caller's business.
func New(c client.Client, taskQueue string, opts ...Option) *Client {
	s := &Client{temporal: c, taskQueue: taskQueue, dc: converter.GetDefaultDataConverter(), namespace: client.DefaultNamespace}
	for _, o := range opts {
		o(s)
	}
	return s
}

// CreateResult waits for the latest CreateProxy of uid to close and returns its result: one the
// entity of uid has yet to start (its request waits for a worker, or for the operation before
// it) is waited for while the entity runs. A failure keeps its type: see FailureType. An
// invalid uid fails with ErrInvalidUID, a UID without entity with ErrNoProxy.
func (c *Client) CreateResult(ctx context.Context, uid string) (proxyvm.CreateProxyResult, error) {
	var res proxyvm.CreateProxyResult
	return res, c.result(ctx, uid, Create, &res)
}

// DeleteResult waits for the latest DeleteProxy of uid to close and returns its result, as
// CreateResult does for the create.
func (c *Client) DeleteResult(ctx context.Context, uid string) (proxyvm.DeleteProxyResult, error) {
	var res proxyvm.DeleteProxyResult
	return res, c.result(ctx, uid, Delete, &res)
}

// operationPoll is how often result looks again for an operation its entity has yet to start.
const operationPoll = time.Second

func (c *Client) result(ctx context.Context, uid string, op Op, res any) error {
	id, err := op.workflowID(uid)
	if err != nil {
		return err
	}
	for awaited := false; ; awaited = true {
		// Get long-polls the history for the close event: no describe loop.
		err := c.temporal.GetWorkflow(ctx, id, "").Get(ctx, res)
		if _, ok := errors.AsType[*serviceerror.NotFound](err); !ok {
			if err != nil {
				return fmt.Errorf("%s of proxy %s: %w", op, uid, err)
			}
			return nil
		}
		coming, err := c.operationComing(ctx, uid, op)
		switch {
		case err != nil:
			return fmt.Errorf("%s of proxy %s: %w", op, uid, err)
		case !coming && awaited:
			// Looked for once more: it may have started and closed since the last look.
			return fmt.Errorf("%s of proxy %s: there is none (workflow %s), and its entity neither runs one nor has one asked", op, uid, id)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s of proxy %s: not started yet: %w", op, uid, ctx.Err())
		case <-time.After(operationPoll):
		}
	}
}

// operationComing says whether the entity of uid may start its operation op: it runs and, when
// a live worker answers its status query, runs op or has a request that op serves (a change
// with a new image rebuilds with a create). An entity that no longer runs is an error.
func (c *Client) operationComing(ctx context.Context, uid string, op Op) (bool, error) {
	id := core.ProxyWorkflowID(uid)
	desc, err := c.temporal.DescribeWorkflowExecution(ctx, id, "")
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return false, noProxy(uid)
	}
	if err != nil {
		return false, fmt.Errorf("describe %s: %w", id, err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return false, fmt.Errorf("there is none: the proxy's entity %s is %s", id, activities.RunStatus(st))
	}
	w, err := c.workersOf(ctx, desc)
	if err != nil {
		return false, err
	}
	var st proxyvm.ProxyStatus
	if why, err := c.askStatus(ctx, id, &w, &st); err != nil || why != "" {
		return true, err // no worker to tell: it may come once one runs
	}
	serves := func(kind string) bool {
		return kind == string(op) || (op == Create && kind == proxyvm.OpChange)
	}
	return (st.Operation != nil && serves(st.Operation.Kind)) ||
		slices.ContainsFunc(st.Requests, func(r proxyvm.PendingRequest) bool { return serves(r.Kind) }), nil
}

// Status asks the latest run of the workflow op of uid where it is. A closed run answers too,
// as long as a worker runs to replay it. An invalid uid fails with ErrInvalidUID.
func (c *Client) Status(ctx context.Context, uid string, op Op) (core.Status, error) {
	id, err := op.workflowID(uid)
	if err != nil {
		return core.Status{}, err
	}
	st, err := c.query(ctx, id)
	if err != nil {
		return core.Status{}, fmt.Errorf("status of %s of proxy %s: %w", op, uid, err)
	}
	return st, nil
}

func (c *Client) query(ctx context.Context, workflowID string) (core.Status, error) {
	val, err := c.temporal.QueryWorkflow(ctx, workflowID, "", core.StatusQuery)
	if err != nil {
		return core.Status{}, err
	}
	var st core.Status
	return st, val.Get(&st)
}

// askStatus asks the latest run of workflowID its status query into out, within queryTimeout,
// when workers says a live one polls. why is empty when a worker answered, and says why none did
// otherwise; err is ctx's end. A query no worker answered within queryTimeout, with no poll of
// the task queue since it was asked, is a task of the workflow that waits unserved: workers says
// so. With a poll since, a worker lives and was busy: a workflow task that runs local
// activities (a create's calls held by the call cap, say) holds the workflow's queries until
// it completes.
func (c *Client) askStatus(ctx context.Context, workflowID string, workers *Workers, out any) (why string, err error) {
	if !workers.Live() {
		return workers.NoLiveWorker(time.Now()), nil
	}
	asked := time.Now()
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	val, err := c.temporal.QueryWorkflow(qctx, workflowID, "", core.StatusQuery)
	if err == nil {
		err = val.Get(out)
	}
	switch {
	case err == nil:
		return "", nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	case qctx.Err() != nil || errors.As(err, new(*serviceerror.DeadlineExceeded)):
		// The server answers before the deadline with one of its own, in a few wordings.
		if !c.busy(ctx, workflowID, workers.TaskQueue, asked) {
			workers.Unserved = "status query"
		}
		return fmt.Sprintf("no worker answered the status query within %s", queryTimeout), nil
	}
	return err.Error(), nil
}

// busy says whether a live worker holds workflowID's workflow task, or polled taskQueue since
// asked: a query that no worker answered then waited for a busy worker, not for a dead one.
// A worker that dies holding the task loses it at the task's timeout, and the rescheduled task
// waits unserved (workersOf).
func (c *Client) busy(ctx context.Context, workflowID, taskQueue string, asked time.Time) bool {
	desc, err := c.temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	if err == nil && desc.GetPendingWorkflowTask().GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED {
		return true
	}
	polled, err := c.workers(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	return err == nil && !unserved(asked, polled.LastPoll, time.Now())
}

// Where a Progress's Status comes from.
const (
	// SourceQuery is a Status a worker answered the status query with: all of it.
	SourceQuery = "query"
	// SourceDescribed is a Status read from what Temporal itself keeps of the run, because no
	// worker answered: the UID, name, phase, node and VMID of its search attributes and its start
	// time, without step, task or error.
	SourceDescribed = "described"
)

// Progress is a workflow's Status together with what Temporal knows of its run: whether it
// still runs, how the wait it is in goes, and whether a worker polls its task queue. A wait
// polls by failing until its Proxmox task ends, so the attempt and the last failure say how long
// it has been waiting and for what.
type Progress struct {
	core.Status
	// State is the run's state: running, completed, failed, canceled, terminated,
	// continued-as-new, timed-out or paused.
	State string `json:"state"`
	// Source is SourceQuery or SourceDescribed.
	Source string `json:"source"`
	// QueryError says why no worker answered the status query when Source is SourceDescribed.
	QueryError string `json:"queryError,omitempty"`
	// Wait is the pending activity; its fields are empty when none is pending.
	Wait
	// Workers says who polls the run's task queue.
	Workers Workers `json:"workers"`
}

// Wait is a workflow's pending activity: for pveflow's workflows, which run one activity at a
// time, the wait or call they are in.
type Wait struct {
	ActivityID   string `json:"activityID,omitempty"`
	ActivityType string `json:"activityType,omitempty"`
	// ActivityState is scheduled (waiting for its next attempt or for a worker to take it),
	// started (an attempt runs), cancel-requested, paused or pause-requested.
	ActivityState string `json:"activityState,omitempty"`
	// ActivityAttempt is the attempt of the pending activity, 0 when none is pending.
	ActivityAttempt int32 `json:"activityAttempt,omitempty"`
	// LastFailure is the message of the pending activity's last failed attempt, such as
	// "clone task UPID:... still running on node pve1 (for 12s)": plain with payload encryption
	// on too (codec.Converters).
	LastFailure string `json:"lastFailure,omitempty"`
	// NextAttempt is when the pending activity is tried again, zero when it is not waiting
	// for a retry.
	NextAttempt time.Time `json:"nextAttempt,omitzero"`
	// Budget is how long the pending activity may take in all, retries included (its
	// ScheduleToClose timeout).
	Budget time.Duration `json:"budget,omitempty"`
	// RetryDeadline is the end of Budget, from the activity's first attempt: Temporal retries no
	// failed attempt past it, and the run fails Transient; starting it again resumes.
	RetryDeadline time.Time `json:"retryDeadline,omitzero"`
}

// Workers is what the Temporal server knows of the workers polling a task queue for workflow
// tasks, and whether a task of the workflow asked about waits for one.
type Workers struct {
	TaskQueue string `json:"taskQueue"`
	// Pollers counts the workers that poll it: those that polled within pollerLiveness. Temporal
	// lists a worker that stopped or was killed for minutes after its last poll, so a worker
	// counted here may be gone: Unserved tells.
	Pollers int `json:"pollers"`
	// LastPoll is when one of them last began or ended a poll, zero when none did. A live
	// worker polls again as soon as a poll ends, and a poll waits up to a minute for a task.
	LastPoll time.Time `json:"lastPoll,omitzero"`
	// Unserved names, when Pollers counts one, a task of the workflow that has been due for
	// unservedAfter or longer with no poll of its queue since, such as "workflow task" or
	// "activity TaskStatus": a live worker takes a due task at once, its poll ending then, so
	// none of them is live however recently Temporal saw it poll. Empty when no task waits so.
	Unserved string `json:"unserved,omitempty"`
}

// Live says whether a live worker polls the task queue: one polled within pollerLiveness and
// no task of the workflow waits unserved.
func (w Workers) Live() bool {
	return w.Pollers > 0 && w.Unserved == ""
}

// NoLiveWorker says that no live worker polls, for Workers that are not Live: "no worker polls
// task queue q", with "the last poll was 2m0s ago" when one ever did, and "none took its
// workflow task, the last poll was 40s ago" when Temporal lists one that polled lately.
func (w Workers) NoLiveWorker(now time.Time) string {
	text := "no worker polls task queue " + w.TaskQueue
	ago := now.Sub(w.LastPoll).Truncate(time.Second)
	switch {
	case w.LastPoll.IsZero():
		return text
	case w.Unserved != "":
		return fmt.Sprintf("%s: none took its %s, the last poll was %s ago", text, w.Unserved, ago)
	}
	return fmt.Sprintf("%s: the last poll was %s ago", text, ago)
}

// unservedAfter is how long a due task may wait before no worker taking it means that none
// polls: a live worker takes it within milliseconds.
const unservedAfter = 500 * time.Millisecond

// queryTimeout bounds the status query that Progress and ProxyProgress make: a worker that was killed still
// counts as a poller for a few minutes, and the query would wait for it in vain.
const queryTimeout = 3 * time.Second

// Progress returns where the latest run of the workflow op of uid is: its Status from the
// status query when a worker answers it, else from DescribeWorkflowExecution (Source says
// which), its run state, its pending activity, and the pollers of its task queue. It works
// with no worker running, which is when a wait stalls for want of one. An invalid uid fails
// with ErrInvalidUID.
func (c *Client) Progress(ctx context.Context, uid string, op Op) (Progress, error) {
	id, err := op.workflowID(uid)
	if err != nil {
		return Progress{}, err
	}
	desc, err := c.temporal.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return Progress{}, fmt.Errorf("describe %s of proxy %s: %w", op, uid, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	p := Progress{State: activities.RunStatus(info.GetStatus())}
	// The workflows run one activity at a time.
	if pending := desc.GetPendingActivities(); len(pending) > 0 {
		p.Wait = c.waitOf(pending[0])
	}
	if p.Workers, err = c.workersOf(ctx, desc); err != nil {
		return Progress{}, fmt.Errorf("%s of proxy %s: %w", op, uid, err)
	}
	why, err := c.askStatus(ctx, id, &p.Workers, &p.Status)
	switch {
	case err != nil:
		return Progress{}, fmt.Errorf("status of %s of proxy %s: %w", op, uid, err)
	case why == "":
		p.Source = SourceQuery
		c.placeInQueue(ctx, &p.Status, info.GetExecution())
		return p, nil
	}
	p.QueryError = why
	p.Source = SourceDescribed
	described, err := proxyOf(info)
	if err != nil {
		return Progress{}, fmt.Errorf("describe %s of proxy %s: %w", op, uid, err)
	}
	p.Status = core.Status{
		UID: described.UID, Name: described.Name, Phase: described.Phase,
		Node: described.Node, VMID: described.VMID, StartedAt: described.StartTime,
	}
	return p, nil
}

// placeInQueue fills in how many creates are before the run in the queue of the clone
// admission it waits in, which the admission knows, not the create. An admission that does not
// answer leaves it out.
func (c *Client) placeInQueue(ctx context.Context, st *core.Status, run *commonpb.WorkflowExecution) {
	if st.Admission == "" {
		return
	}
	val, err := c.temporal.QueryWorkflow(ctx, st.Admission, "", admission.AdmissionQuery)
	var adm admission.AdmissionState
	if err != nil || val.Get(&adm) != nil {
		return
	}
	if i := slices.Index(adm.Waiting, admission.Holder{WorkflowID: run.GetWorkflowId(), RunID: run.GetRunId()}); i >= 0 {
		st.QueuedBehind = i
		st.Step += fmt.Sprintf(": %d ahead", i)
	}
}

// workers describes who polls taskQueue for tasks of type kind (workflow or activity): the
// status query needs a workflow poller, and pveflow's workers poll for both.
func (c *Client) workers(ctx context.Context, taskQueue string, kind enumspb.TaskQueueType) (Workers, error) {
	resp, err := c.temporal.DescribeTaskQueue(ctx, taskQueue, kind)
	if err != nil {
		return Workers{}, fmt.Errorf("describe task queue %s: %w", taskQueue, err)
	}
	return pollersOf(taskQueue, resp.GetPollers(), time.Now()), nil
}

// workersOf describes who polls the task queue of the workflow desc describes, and names its
// task that waits unserved, if one does: its workflow task, or an activity due to run.
func (c *Client) workersOf(ctx context.Context, desc *workflowservice.DescribeWorkflowExecutionResponse) (Workers, error) {
	taskQueue := desc.GetExecutionConfig().GetTaskQueue().GetName()
	w, err := c.workers(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return Workers{}, err
	}
	if w.Pollers == 0 {
		return w, nil // none to tell from a live one
	}
	now := time.Now()
	if t := desc.GetPendingWorkflowTask(); t.GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED &&
		unserved(t.GetScheduledTime().AsTime(), w.LastPoll, now) {
		w.Unserved = "workflow task"
		return w, nil
	}
	for _, a := range desc.GetPendingActivities() {
		due := a.GetScheduledTime().AsTime()
		if next := a.GetNextAttemptScheduleTime(); next != nil && next.AsTime().After(due) {
			due = next.AsTime()
		}
		if a.GetState() != enumspb.PENDING_ACTIVITY_STATE_SCHEDULED || now.Sub(due) < unservedAfter {
			continue
		}
		// Activities have pollers of their own, which a worker keeps polling through a long
		// wait when its workflow pollers have no task.
		polled, err := c.workers(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		if err != nil {
			return Workers{}, err
		}
		if unserved(due, polled.LastPoll, now) {
			w.Unserved = "activity " + a.GetActivityType().GetName()
		}
		return w, nil
	}
	return w, nil
}

// unserved says whether a task due at due is unserved as of now: due unservedAfter or longer
// ago, with no poll of its queue since (lastPoll before due).
func unserved(due, lastPoll, now time.Time) bool {
	return now.Sub(due) >= unservedAfter && lastPoll.Before(due)
}

// pollerLiveness is how recently a worker must have polled to count as polling: a live worker
// polls again as soon as a poll ends, and a poll waits up to a minute for a task.
const pollerLiveness = 75 * time.Second

// pollersOf describes the pollers Temporal lists for taskQueue, as of now.
func pollersOf(taskQueue string, pollers []*taskqueuepb.PollerInfo, now time.Time) Workers {
	w := Workers{TaskQueue: taskQueue}
	for _, poller := range pollers {
		last := poller.GetLastAccessTime().AsTime()
		if now.Sub(last) <= pollerLiveness {
			w.Pollers++
		}
		if last.After(w.LastPoll) {
			w.LastPoll = last
		}
	}
	return w
}

// waitOf is what a pending activity tells of the wait it is.
func (c *Client) waitOf(a *workflowpb.PendingActivityInfo) Wait {
	w := Wait{
		ActivityID:      a.GetActivityId(),
		ActivityType:    a.GetActivityType().GetName(),
		ActivityState:   activityStates[a.GetState()],
		ActivityAttempt: a.GetAttempt(),
		LastFailure:     c.failureMessage(a.GetLastFailure()),
		Budget:          a.GetActivityOptions().GetScheduleToCloseTimeout().AsDuration(),
	}
	if next := a.GetNextAttemptScheduleTime(); next != nil {
		w.NextAttempt = next.AsTime()
	}
	if exp := a.GetExpirationTime(); exp != nil {
		w.RetryDeadline = exp.AsTime()
	}
	return w
}

var activityStates = map[enumspb.PendingActivityState]string{
	enumspb.PENDING_ACTIVITY_STATE_SCHEDULED:        "scheduled",
	enumspb.PENDING_ACTIVITY_STATE_STARTED:          "started",
	enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED: "cancel-requested",
	enumspb.PENDING_ACTIVITY_STATE_PAUSED:           "paused",
	enumspb.PENDING_ACTIVITY_STATE_PAUSE_REQUESTED:  "pause-requested",
}

// failureMessage is f's message, decrypted when a failure converter with EncodeCommonAttributes
// (a worker's with PVEFLOW_CODEC_KEY_FILE, before codec.Converters left messages plain) left
// "Encoded failure" in its place. A message c's data converter
// cannot decrypt reads as the converter's reason: which key it needs, and what to set.
func (c *Client) failureMessage(f *failurepb.Failure) string {
	if f.GetEncodedAttributes() == nil {
		return f.GetMessage()
	}
	var attrs struct {
		Message string `json:"message"`
	}
	if err := c.dc.FromPayload(f.GetEncodedAttributes(), &attrs); err != nil {
		return "the failure's message: " + err.Error()
	}
	return attrs.Message
}

// Proxy is a proxy as its entity's search attributes show it.
type Proxy struct {
	UID string `json:"uid"`
	// Name is the VM's name.
	Name string `json:"name,omitempty"`
	// Phase is one of proxyvm.ProxyAbsent, ProxyCreating, ProxyPresent, ...
	Phase string `json:"phase"`
	Node  string `json:"node,omitempty"`
	VMID  int    `json:"vmid,omitempty"`
	// Status is the state of the entity's run, as Progress.State: running while it holds the
	// proxy, completed once it closed, absent and idle.
	Status     string    `json:"status"`
	WorkflowID string    `json:"workflowID"`
	RunID      string    `json:"runID"`
	StartTime  time.Time `json:"startTime"`
}

// List returns the proxies, one per entity, whose ProxyPhase is phase, or all of them when
// phase is empty, newest first: of an entity that continued as new, its latest run. An entity
// that closed before it had a phase (a request its worker could not read) never held a proxy
// and is left out. Visibility lags the entities by a moment.
func (c *Client) List(ctx context.Context, phase string) ([]Proxy, error) {
	query := fmt.Sprintf("WorkflowType = %s AND ExecutionStatus != 'ContinuedAsNew'", strconv.Quote(core.ProxyName))
	if phase != "" {
		query += " AND ProxyPhase = " + strconv.Quote(phase)
	}
	var proxies []Proxy
	var token []byte
	for {
		resp, err := c.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list proxies (%s): %w", query, err)
		}
		for _, info := range resp.GetExecutions() {
			p, err := proxyOf(info)
			if err != nil {
				return nil, fmt.Errorf("list proxies: workflow %s: %w", info.GetExecution().GetWorkflowId(), err)
			}
			if p.Phase == "" && info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				continue
			}
			proxies = append(proxies, p)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	// SQL visibility sorts running runs first; the newest start is what an operator looks for.
	slices.SortStableFunc(proxies, func(a, b Proxy) int { return b.StartTime.Compare(a.StartTime) })
	// An entity that closed and was started again by a later request has a run of each.
	seen := map[string]bool{}
	return slices.DeleteFunc(proxies, func(p Proxy) bool {
		dup := seen[p.WorkflowID]
		seen[p.WorkflowID] = true
		return dup
	}), nil
}

// dataConverter decodes search attributes, which are stored as plain JSON payloads whatever
// codec the client uses.
var dataConverter = converter.GetDefaultDataConverter()

func proxyOf(info *workflowpb.WorkflowExecutionInfo) (Proxy, error) {
	p := Proxy{
		Status:     activities.RunStatus(info.GetStatus()),
		WorkflowID: info.GetExecution().GetWorkflowId(),
		RunID:      info.GetExecution().GetRunId(),
		StartTime:  info.GetStartTime().AsTime(),
	}
	var vmid int64
	fields := info.GetSearchAttributes().GetIndexedFields()
	for key, into := range map[string]any{
		core.ProxyUIDKey.GetName():   &p.UID,
		core.ProxyNameKey.GetName():  &p.Name,
		core.ProxyPhaseKey.GetName(): &p.Phase,
		core.PveNodeKey.GetName():    &p.Node,
		core.PveVMIDKey.GetName():    &vmid,
	} {
		payload, ok := fields[key]
		if !ok {
			continue
		}
		if err := dataConverter.FromPayload(payload, into); err != nil {
			return Proxy{}, fmt.Errorf("search attribute %s: %w", key, err)
		}
	}
	p.VMID = int(vmid)
	return p, nil
}

// FailCanceled is the FailureType of a workflow that was cancelled.
const FailCanceled = "Canceled"

// FailureType says what kind of failure err, from a Request's Get, CreateResult, DeleteResult or
// a read, reports: core.FailPermanent, core.FailTransient, core.FailQuotaExceeded,
// core.FailNotFound, FailSuperseded, FailCanceled, or "" for anything else (the workflow
// was terminated, the call itself failed).
func FailureType(err error) string {
	if temporal.IsCanceledError(err) {
		return FailCanceled
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return ""
	}
	switch t := appErr.Type(); t {
	case core.FailPermanent, core.FailTransient, core.FailQuotaExceeded, core.FailNotFound, FailSuperseded:
		return t
	}
	return ""
}
