package fleet

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"

	"github.com/pveflow/pveflow/workflows/core"
)

// RolloutInput is the input of Rollout: change the proxies UIDs names, MaxUnavailable at a time.
type RolloutInput struct {
	UIDs []string `json:"uids"`
	// Image and MachineType are the change; empty leaves that part of a proxy as it is.
	Image       string `json:"image,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	// MaxUnavailable is how many proxies may be changing (and so without their IPv4) at once.
	MaxUnavailable int `json:"maxUnavailable"`
	// Selector is how the UIDs were chosen, for the status and the UI; Rollout does not read it.
	Selector string `json:"selector,omitempty"`
	// Progress is where the run before this one left off, when Rollout continued as new; nil
	// for a new rollout.
	Progress *RolloutStatus `json:"progress,omitempty"`
}

// ResumeUpdate is the Update that resumes a paused Rollout: the changes that failed are made
// again, and the rollout goes on. Its validator refuses it while the rollout is not paused. Its
// result is the RolloutStatus once resumed. The name is recorded in histories.
const ResumeUpdate = "resume"

// RolloutStatus is where a Rollout is: what its status query answers, what it returns, and the
// progress it carries when it continues as new.
type RolloutStatus struct {
	Total int `json:"total"`
	// Done are the proxies changed, in the order their changes closed.
	Done []RolloutDone `json:"done"`
	// InFlight are the proxies changing now, without their IPv4 until their change closes.
	InFlight []string `json:"inFlight"`
	// Pending are the proxies still to change, in order.
	Pending []string `json:"pending"`
	// Paused is set from the first failed change until the resume Update: no change starts
	// meanwhile.
	Paused bool `json:"paused"`
	// Failures are the changes that failed since the rollout last went on, the one that paused
	// it first. Their UIDs are at the head of Pending again, for the resume to retry.
	Failures []RolloutFailure `json:"failures,omitempty"`
	// Requests counts the change requests sent; the nth has request ID "<workflow ID>/<n>".
	Requests int `json:"requests"`
	// Runs counts the rollout's runs: one more at each continue-as-new.
	Runs      int       `json:"runs"`
	StartedAt time.Time `json:"startedAt"`
}

// RolloutDone is a proxy a Rollout changed, as the change left it.
type RolloutDone struct {
	UID string `json:"uid"`
	activities.ProxyChangeOutcome
}

// RolloutFailure is a change of a Rollout that failed.
type RolloutFailure struct {
	UID   string    `json:"uid"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

// Rollout changes the image or machine type of the proxies in.UIDs through their Proxy
// entities, in order, at most in.MaxUnavailable at a time. A change closes once the proxy has
// its IPv4 again, so at most MaxUnavailable proxies are without it at once. On the first change
// that fails it starts no other, lets those that run finish, and pauses, saying so in its status
// and the UI; the resume Update makes the failed changes again and goes on. It continues as new
// when Temporal suggests it, once the changes that run have closed, carrying its progress.
//
// It lives as long as its rollout, paused for as long as nobody resumes it, so it auto-upgrades
// (package workflows, deployment.go): a change to its commands goes behind a version marker.
func (w *Workflows) Rollout(ctx workflow.Context, in RolloutInput) (RolloutStatus, error) {
	if err := in.validate(); err != nil {
		return RolloutStatus{}, err
	}
	var s core.Settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return core.SettingsOf(w.Config) }).Get(&s); err != nil {
		return RolloutStatus{}, err
	}
	r := &rollout{ctx: ctx, s: s, in: in}
	if in.Progress != nil {
		r.st = *in.Progress
		r.st.Runs++
	} else {
		r.st = RolloutStatus{Total: len(in.UIDs), Done: []RolloutDone{}, InFlight: []string{}, Pending: slices.Clone(in.UIDs), Runs: 1, StartedAt: workflow.Now(ctx)}
	}
	if err := workflow.SetQueryHandler(ctx, core.StatusQuery, func() (RolloutStatus, error) { return r.st, nil }); err != nil {
		return RolloutStatus{}, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, ResumeUpdate, r.resume, workflow.UpdateHandlerOptions{
		Validator: func() error {
			if !r.st.Paused {
				return core.Permanentf("rollout %s is not paused: nothing to resume", workflow.GetInfo(ctx).WorkflowExecution.ID)
			}
			return nil
		},
	}); err != nil {
		return RolloutStatus{}, err
	}
	return r.run()
}

// validate refuses a rollout that could change nothing, or could change a proxy twice.
func (in RolloutInput) validate() error {
	switch {
	case in.MaxUnavailable < 1:
		return core.Permanentf("rollout: max unavailable is %d: want at least 1", in.MaxUnavailable)
	case len(in.UIDs) == 0:
		return core.Permanentf("rollout: no proxies to change")
	case in.Image == "" && in.MachineType == "":
		return core.Permanentf("rollout: nothing to change: give an image, a machine type or both")
	}
	seen := make(map[string]bool, len(in.UIDs))
	for _, uid := range in.UIDs {
		if err := proxy.ValidateUID(uid); err != nil {
			return core.Permanentf("rollout: %v", err)
		}
		if seen[uid] {
			return core.Permanentf("rollout: proxy %s is listed twice", uid)
		}
		seen[uid] = true
	}
	return nil
}

type rollout struct {
	ctx workflow.Context
	s   core.Settings
	in  RolloutInput
	st  RolloutStatus
	// moved is set when a change closes or the rollout resumes: the loop looks again.
	moved bool
}

func (r *rollout) run() (RolloutStatus, error) {
	for {
		// Once Temporal suggests a new run, no change starts: those that run close in this one.
		draining := workflow.GetInfo(r.ctx).GetContinueAsNewSuggested()
		for !r.st.Paused && !draining && len(r.st.InFlight) < r.in.MaxUnavailable && len(r.st.Pending) > 0 {
			r.start()
		}
		r.report()
		if len(r.st.InFlight) == 0 {
			if len(r.st.Pending) == 0 {
				return r.st, nil
			}
			if draining {
				return r.st, r.continueAsNew()
			}
		}
		r.moved = false
		if err := workflow.Await(r.ctx, func() bool { return r.moved }); err != nil {
			return r.st, err
		}
	}
}

// start sends the change of the first pending proxy, and takes its answer when it comes.
func (r *rollout) start() {
	uid := r.st.Pending[0]
	r.st.Pending = r.st.Pending[1:]
	r.st.InFlight = append(r.st.InFlight, uid)
	r.st.Requests++
	req := activities.ProxyChange{
		UID: uid, Image: r.in.Image, MachineType: r.in.MachineType,
		RequestID: workflow.GetInfo(r.ctx).WorkflowExecution.ID + "/" + strconv.Itoa(r.st.Requests),
	}
	workflow.Go(r.ctx, func(ctx workflow.Context) {
		var a *activities.Activities
		var out activities.ProxyChangeOutcome
		err := core.Execute(ctx, requestOptions(r.s, changeBudget(r.s), "change proxy "+uid), a.RequestChange, req).Get(ctx, &out)
		r.closed(uid, out, err)
	})
}

// closed takes the answer to the change of uid.
func (r *rollout) closed(uid string, out activities.ProxyChangeOutcome, err error) {
	r.st.InFlight = slices.DeleteFunc(r.st.InFlight, func(u string) bool { return u == uid })
	r.moved = true
	logger := workflow.GetLogger(r.ctx)
	switch {
	case err == nil:
		r.st.Done = append(r.st.Done, RolloutDone{UID: uid, ProxyChangeOutcome: out})
		logger.Info("proxy changed", "uid", uid, "vmid", out.VMID, "changed", out.Changed, "restarted", out.Restarted, "rebuilt", out.Rebuilt)
		return
	case temporal.IsCanceledError(err) && r.ctx.Err() != nil:
		return // the rollout itself was cancelled
	}
	failure := RolloutFailure{UID: uid, Error: core.FailureText("change of proxy "+uid, err), At: workflow.Now(r.ctx)}
	// Behind the changes that failed before it, ahead of those that never started.
	r.st.Pending = slices.Insert(r.st.Pending, len(r.st.Failures), uid)
	r.st.Failures = append(r.st.Failures, failure)
	r.st.Paused = true
	logger.Warn("change failed: rollout paused", "uid", uid, "error", failure.Error)
}

// resume is the resume Update's handler: the changes that failed are pending again, at the
// head, and the rollout goes on.
func (r *rollout) resume(workflow.Context) (RolloutStatus, error) {
	r.st.Paused = false
	r.st.Failures = nil
	r.moved = true
	workflow.GetLogger(r.ctx).Info("rollout resumed", "pending", len(r.st.Pending))
	return r.st, nil
}

// report shows where the rollout is in the UI's current details.
func (r *rollout) report() {
	progress := fmt.Sprintf("%d of %d changed, %d changing, %d pending", len(r.st.Done), r.st.Total, len(r.st.InFlight), len(r.st.Pending))
	if r.st.Paused {
		first := r.st.Failures[0]
		progress = fmt.Sprintf("paused: %s; %s. Resume with the %q update (pveflow rollout resume --id %s)",
			first.Error, progress, ResumeUpdate, workflow.GetInfo(r.ctx).WorkflowExecution.ID)
	}
	workflow.SetCurrentDetails(r.ctx, progress)
}

// continueAsNew is the error that continues the rollout in a new run, with its progress, once
// no resume Update is being handled.
func (r *rollout) continueAsNew() error {
	if err := workflow.Await(r.ctx, func() bool { return workflow.AllHandlersFinished(r.ctx) }); err != nil {
		return err
	}
	next := r.in
	progress := r.st
	next.Progress = &progress
	return workflow.NewContinueAsNewError(r.ctx, core.RolloutName, next)
}

// requestHeartbeat is the heartbeat timeout of a request to a Proxy entity: a worker that died
// while its request waited is found out this soon, and the request is sent again, with the same
// request ID, so it joins the update the lost attempt sent.
const requestHeartbeat = 30 * time.Second

// requestOptions are the options of a request to a Proxy entity (RequestChange, RequestDelete):
// an attempt waits for the entity's operation to close, within budget, heartbeating; an attempt
// lost on the way (Temporal unreachable, a worker gone) is made again, spaced by the poll policy.
// The entity's own answer is never retried (see activities.Proxies).
func requestOptions(s core.Settings, budget time.Duration, summary string) workflow.ActivityOptions {
	o := s.WaitOptions(budget, summary)
	o.StartToCloseTimeout = budget
	o.HeartbeatTimeout = requestHeartbeat
	return o
}

// deleteWaits add up the waits of a DeleteProxy: a lock to clear, the stop, the destroy and the
// seed ISO's removal.
func deleteWaits(s core.Settings) time.Duration {
	b := s.Budgets
	return b.Unlock + b.Stop + b.Destroy + b.Request
}

// deleteBudget bounds a request to delete a proxy: the delete's waits, twice over, as the
// entity may first stop the operation it runs.
func deleteBudget(s core.Settings) time.Duration { return 2 * deleteWaits(s) }

// changeBudget bounds a request to change a proxy, generously: a rebuild, which is a delete
// and then a create's clone, seed upload, resize, start and waits for the VM to run and report
// its IPv4 (and cloud-init's end, for a machine type that waits for it: counted for all, as
// the bound is generous anyway), twice over, as the entity may first finish an operation it runs
// (a heal, an earlier change).
func changeBudget(s core.Settings) time.Duration {
	b := s.Budgets
	return 2 * (deleteWaits(s) + b.Clone + b.Upload + b.Resize + b.Start + b.Running + b.Agent + b.CloudInit)
}
