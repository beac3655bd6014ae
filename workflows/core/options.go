package core

import (
	"errors"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
)

// Settings is what a run takes from the worker's configuration. It is read once, in a side
// effect, so the run replays with the values it started with whatever the config says later.
type Settings struct {
	Nodes      []string         `json:"nodes"`
	ISOStorage string           `json:"isoStorage"`
	Storage    string           `json:"storage,omitempty"`
	Bridge     string           `json:"bridge,omitempty"`
	Pool       string           `json:"pool,omitempty"`
	Tags       []string         `json:"tags,omitempty"`
	VMIDRange  config.VMIDRange `json:"vmidRange"`
	Budgets    config.Budgets   `json:"budgets"`
	Poll       config.Poll      `json:"poll"`
	Clones     config.Clones    `json:"clones"`
	Entity     config.Entity    `json:"entity"`
	// MachineTypes are what a Proxy entity's checks compare its VM with, and give a create's
	// NICs.
	MachineTypes map[string]config.MachineType `json:"machineTypes,omitempty"`

	// OnBoot is proxmox.onboot.
	OnBoot bool `json:"onBoot"`
	// HA is proxmox.ha.
	HA config.HA `json:"ha,omitzero"`
	// AddressPools are the pools a create allocates from; AddressPoolNames, sorted, the pools
	// a delete frees in.
	AddressPools     map[string]config.AddressPool `json:"addressPools,omitempty"`
	AddressPoolNames []string                      `json:"addressPoolNames,omitempty"`
	// Nameservers go into the seed's network-config.
	Nameservers []string `json:"nameservers,omitempty"`
}

// NICs are a proxy's NICs: its request's own, else its machine type's.
func (s Settings) NICs(own []config.NIC, machineType string) []config.NIC {
	if len(own) > 0 {
		return own
	}
	return s.MachineTypes[machineType].NICs
}

func SettingsOf(c config.Config) Settings {
	return Settings{
		Nodes:      c.Proxmox.Nodes,
		ISOStorage: c.Proxmox.ISOStorage,
		Storage:    c.Proxmox.Storage,
		Bridge:     c.Proxmox.Bridge,
		Pool:       c.Proxmox.Pool,
		Tags:       c.Proxmox.Tags,
		VMIDRange:  c.Proxmox.VMIDRange,
		Budgets:    c.Budgets,
		Poll:       c.Poll,
		Clones:     c.Clones,
		Entity:     c.Entity,
		// Recorded for the entity's checks and a create's NICs: the operations resolve their
		// placement (cores, memory, disk) once, with the image and zone.
		MachineTypes:     c.Proxmox.MachineTypes,
		OnBoot:           c.Proxmox.OnBoot,
		HA:               c.Proxmox.HA,
		AddressPools:     c.Proxmox.AddressPools,
		AddressPoolNames: c.Proxmox.AddressPoolNames(),
		// For the seed's network-config.
		Nameservers: c.Proxmox.Nameservers,
	}
}

// CallOptions are the options of an activity that makes one Proxmox call. A call that PVE
// refuses because the VM or its template is locked (a backup holds the template for minutes),
// or that meets backend trouble, is made again, spaced by the poll policy, within the unlock
// budget; the UI shows the pending call with what it meets as its last failure.
func (s Settings) CallOptions(summary string) workflow.ActivityOptions {
	return s.WaitOptions(s.Budgets.Unlock, summary)
}

// ProbeOptions are the options of a call that reads what a choice is made from, such as a
// node's status: a node that does not answer at once counts as down, rather than holding the
// create up for the unlock budget.
func (s Settings) ProbeOptions(summary string) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout: s.Budgets.Request,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    s.Poll.InitialInterval,
			BackoffCoefficient: 1,
			MaximumAttempts:    2,
		},
		WaitForCancellation: true,
		Summary:             summary,
	}
}

// ReadOptions are the options of a call of a read workflow (GetProxy, ListProxies,
// CheckHealth): a probe's one attempt and one retry for backend trouble, and none for a guest
// agent that does not answer, which is an answer too. A read reports what it finds at once;
// waiting is for its caller to choose.
func (s Settings) ReadOptions(summary string) workflow.ActivityOptions {
	o := s.ProbeOptions(summary)
	o.RetryPolicy.NonRetryableErrorTypes = []string{activities.ErrAgentNotRunning}
	return o
}

// WaitOptions are the options of an activity that waits by failing until what it waits for has
// happened, or by retrying a call PVE refuses for now: the budget bounds the whole wait
// (ScheduleToClose). A wait given a pace (settings.pace) spaces its looks by it, brisk while the
// wait is young and backing off to a cap for long ones; the retry policy spaces the rest, the
// retries of a call PVE refused and of a look that met backend trouble. One attempt takes at most
// attemptTimeout of the budget.
//
// MaximumAttempts is set explicitly: the test environment otherwise stops after 10 attempts
// while the server would go on, and both must behave alike.
//
// Nothing moves a wait's budget once it is scheduled: Temporal's own actions on a pending
// activity (UpdateActivityOptions, from the UI or the CLI) move the next attempt's timer but
// not its ScheduleToClose deadline (server 1.32). A wait that runs out of budget fails the run
// Transient, and starting it again resumes on the same VM.
func (s Settings) WaitOptions(budget time.Duration, summary string) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout:    attemptTimeout(budget, s.Budgets.Request),
		ScheduleToCloseTimeout: budget,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    s.Poll.InitialInterval,
			BackoffCoefficient: s.Poll.BackoffCoefficient,
			MaximumInterval:    s.Poll.MaximumInterval,
			MaximumAttempts:    AttemptsWithin(budget, s.Poll),
		},
		WaitForCancellation: true,
		Summary:             summary,
	}
}

// attemptShare is how many of a wait's attempts at their longest fit into its budget.
const attemptShare = 3

// attemptTimeout is the StartToClose of one attempt of a wait within budget: budgets.request, and
// at most a third of the budget. An attempt lost with its worker (killed, or cut off from
// Temporal) is seen only when its StartToClose ends; were that the whole budget, as when a wait's
// budget is budgets.request, one lost attempt would fail the wait. A third leaves two thirds for
// the attempts after it.
func attemptTimeout(budget, request time.Duration) time.Duration {
	return min(request, budget/attemptShare)
}

// heartbeatTimeout is the heartbeat timeout of a wait's looks that must not outlive their worker
// by long, whose StartToClose is attempt: a few seconds, and at most half the attempt. A look
// heartbeats while it waits for PVE (activities.TaskStatus), so one alive but slow goes on, and
// one lost with its worker (killed, or cut off from Temporal) is made again within seconds, not
// when its StartToClose ends (budgets.request, 30 s by default). A clone's wait has one: its
// lease keeps a slot of the storage busy while creates queue for it.
func heartbeatTimeout(attempt time.Duration) time.Duration {
	return min(maxHeartbeatTimeout, attempt/2)
}

// maxHeartbeatTimeout is how long a look with a heartbeat timeout may go without a heartbeat.
// The SDK sends heartbeats at most every 0.8 of it and the look every third, so a live look's
// heartbeat is never late.
const maxHeartbeatTimeout = 3 * time.Second

// AttemptsWithin is a wait's MaximumAttempts: the looks that fit into budget at its pace
// (config.Poll.LooksWithin), those gathered around an expected end, and one more, so the budget
// and not the attempt count is what ends a wait. The UI shows it as the attempt's "of N": a
// count the wait can reach, where budget/InitialInterval (602 for a clone's 10 minutes) told a
// stalled clone's reader that hundreds of looks were left when fifty were.
func AttemptsWithin(budget time.Duration, p config.Poll) int32 {
	return int32(p.LooksWithin(budget) + config.ExpectedLooks + 1)
}

// Pace is the pace of a wait whose first look is now: the run's poll settings.
func (s Settings) Pace(ctx workflow.Context) *activities.Pace {
	return &activities.Pace{Since: workflow.Now(ctx), Poll: s.Poll}
}

// Execute runs activity with args under opts, as an activity of its own: the waits that outlast
// their local looks (poll; every attempt a look, the pending activity what the UI shows of a
// stalled clone), the calls that meet a lock, and the calls of the long-lived workflows. Every
// activity of the workflows goes through it, or through call and poll. It first upserts the
// search attributes the run's tracker holds back, so that what the run waits in is what a search
// finds.
func Execute(ctx workflow.Context, opts workflow.ActivityOptions, activity any, args ...any) workflow.Future {
	if t, ok := ctx.Value(trackerKey).(*Tracker); ok {
		t.Flush()
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activity, args...)
}

// Call makes one Proxmox call that PVE answers at once unless something makes it wait (a
// lock, backend trouble, a check not yet true): first as a local activity, which costs the
// history one marker and no workflow task of its own, and, if that attempt fails with an error
// opts' retry policy would retry, as an activity under opts (execute) with the budget left,
// which waits it out in sight of the UI. The activity's first attempt is the local one's retry,
// made after the policy's first interval as a retry would be: a call whose answer was lost is
// not made again while PVE may still be taking it (a clone made twice at once onto one VMID
// starts a second clone task, which fails on the first one's lock).
func Call(ctx workflow.Context, opts workflow.ActivityOptions, activity any, args ...any) quickCall {
	return quickCall{ctx: ctx, opts: opts, activity: activity, args: args, localLooks: 1}
}

// CallRecorded is call made as an activity from its first attempt: the workflow task that asks
// for it completes first, which records the local calls before it, and the server records its
// answer. It is for an effect whose run, made again after its worker died, could not tell it
// had made it: a destroy leaves nothing on Proxmox to read, and a delete that found its VM
// gone would answer that it destroyed nothing.
func CallRecorded(ctx workflow.Context, opts workflow.ActivityOptions, activity any, args ...any) quickCall {
	return quickCall{ctx: ctx, opts: opts, activity: activity, args: args}
}

// Poll waits, as a wait under opts, for what is usually over within a second or two: a Proxmox
// task (a seed's upload or deletion, a resize, a start, a stop), the VM running, the guest
// agent's report. While the wait is young its looks are the attempts of one local activity,
// retried in the worker on the poll policy's first interval (youngLooks of them), which costs
// the history one marker where an activity costs six events and a workflow task. A wait not over
// by then goes on as an activity under opts (execute), with the budget left, pending in the UI
// (a stalled boot shows there a second after it began), its first attempt at once (a look is a
// read, and a timer before it would cost the history as much as the activity) and its retries
// where its pace puts them, counted from the wait's first look. A clone's wait is an activity
// from its first look (waitTask, activityFirst).
func Poll(ctx workflow.Context, opts workflow.ActivityOptions, activity any, args ...any) quickCall {
	return quickCall{ctx: ctx, opts: opts, activity: activity, args: args, localLooks: youngLooks, lookAgainAtOnce: true}
}

// youngLooks is how many looks a wait (poll) makes as a local activity: at once, and after the
// poll's initial interval (1 s by default). The local activity holds its workflow task open
// meanwhile; the SDK warns about a workflow task open past 5 s, and a create makes three waits
// in a row (the seed's upload, the resize, the start) in one.
const youngLooks = 2

// quickCall is a call, made when its result is asked for.
type quickCall struct {
	ctx      workflow.Context
	opts     workflow.ActivityOptions
	activity any
	args     []any
	// localLooks is how many attempts the local activity makes; with none, the call is an
	// activity from its first attempt.
	localLooks int32
	// lookAgainAtOnce makes the activity's first attempt at once, where a call's waits the
	// policy's first interval.
	lookAgainAtOnce bool
}

// Get makes the call and decodes its result into out (nil: none wanted).
func (q quickCall) Get(ctx workflow.Context, out any) error {
	begun := workflow.Now(q.ctx)
	policy := q.opts.RetryPolicy
	if q.localLooks == 0 {
		return q.cancelled(Execute(q.ctx, q.opts, q.activity, q.args...).Get(ctx, out), policy)
	}
	if err := workflow.ExecuteLocalActivity(q.localContext(), q.activity, q.args...).Get(ctx, out); err == nil ||
		!retryable(err, policy) || q.ctx.Err() != nil || policy == nil || policy.MaximumAttempts == 1 {
		return q.cancelled(err, policy)
	}
	rest := q.opts
	left := *policy
	left.MaximumAttempts = max(left.MaximumAttempts-q.localLooks, 1)
	if q.lookAgainAtOnce {
		// The activity's first attempt repeats the last local look; its retries go on from there.
		left.InitialInterval = localSchedule(policy, q.localLooks).next
	} else if err := workflow.Sleep(q.ctx, policy.InitialInterval); err != nil {
		return err
	}
	rest.RetryPolicy = &left
	if rest.ScheduleToCloseTimeout > 0 {
		rest.ScheduleToCloseTimeout = max(rest.ScheduleToCloseTimeout-workflow.Now(q.ctx).Sub(begun), rest.StartToCloseTimeout)
	}
	return q.cancelled(Execute(q.ctx, rest, q.activity, q.args...).Get(ctx, out), policy)
}

// cancelled is err, or, when the run was cancelled and err is one policy would have retried (a
// wait not over, a lock), the cancellation that cut the call short: an attempt under way when
// the cancel came ends with its own retryable error, which would otherwise read as a budget
// spent.
func (q quickCall) cancelled(err error, policy *temporal.RetryPolicy) error {
	if err != nil && q.ctx.Err() != nil && !temporal.IsCanceledError(err) && retryable(err, policy) {
		return temporal.NewCanceledError(err.Error())
	}
	return err
}

// localContext is q's context with the options of its local activity: one attempt for a call;
// for a poll, localLooks attempts spaced as the first retries of opts' policy, within the time
// they take.
func (q quickCall) localContext() workflow.Context {
	o := workflow.LocalActivityOptions{
		StartToCloseTimeout: q.opts.StartToCloseTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             q.opts.Summary,
	}
	if p := q.opts.RetryPolicy; q.localLooks > 1 && p != nil {
		o.RetryPolicy = &temporal.RetryPolicy{
			InitialInterval:        p.InitialInterval,
			BackoffCoefficient:     p.BackoffCoefficient,
			MaximumInterval:        p.MaximumInterval,
			MaximumAttempts:        q.localLooks,
			NonRetryableErrorTypes: p.NonRetryableErrorTypes,
		}
		// Room for the last look's own attempt, as long as any attempt may take, not for another
		// look. A tighter bound cut the last look off on a loaded worker, whose timer for it fired
		// late, and sent a wait already over to an activity.
		o.ScheduleToCloseTimeout = localSchedule(p, q.localLooks).last + q.opts.StartToCloseTimeout
	}
	return workflow.WithLocalActivityOptions(q.ctx, o)
}

// lookSchedule is where p puts the last of a wait's first looks, from the first, and the interval
// to the look after it.
type lookSchedule struct{ last, next time.Duration }

func localSchedule(p *temporal.RetryPolicy, looks int32) lookSchedule {
	var s lookSchedule
	interval := p.InitialInterval
	for range looks - 1 {
		s.last += interval
		interval = min(time.Duration(float64(interval)*p.BackoffCoefficient), p.MaximumInterval)
	}
	s.next = interval
	return s
}

// retryable reports whether policy retries err: a timeout, a panic, or an application error
// that is not non-retryable, by its flag or its type.
func retryable(err error, policy *temporal.RetryPolicy) bool {
	if temporal.IsCanceledError(err) {
		return false
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return true
	}
	return !appErr.NonRetryable() && (policy == nil || !slices.Contains(policy.NonRetryableErrorTypes, appErr.Type()))
}

// DescribeRun asks Temporal about the latest run of workflowID, by a call: a new entity asks
// about its three operation IDs before anything else, and as activities the three made three
// workflow tasks per proxy, which in a burst of new proxies queued ahead of every create's first.
func DescribeRun(ctx workflow.Context, s Settings, workflowID string) (activities.RunInfo, error) {
	var a *activities.Activities
	step := "describe workflow " + workflowID
	var run activities.RunInfo
	if err := Call(ctx, s.CallOptions(step), a.DescribeRun, activities.DescribeRunRequest{WorkflowID: workflowID}).Get(ctx, &run); err != nil {
		return run, Fail(step, err)
	}
	return run, nil
}

// HistoryPast is whether a long-lived workflow should continue as new: the server suggests it,
// or its history is past events.
func HistoryPast(ctx workflow.Context, events int) bool {
	info := workflow.GetInfo(ctx)
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() > events
}
