package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ExtendWaitSignal is the signal that gives a wait of a CreateProxy or DeleteProxy more time,
// with an ExtendWait as its payload. A wait is an activity that polls by failing until what it
// waits for has happened (a Proxmox task, a VM's state, the guest agent's address; see
// waitOptions), within a budget. Temporal holds an activity to the budget it was scheduled
// with, so the workflow holds each wait to a deadline of its own: the signal moves it, and a
// wait whose budget runs out before its deadline is scheduled again with the time left.
//
// A signal is accepted with no worker running; the workflow takes it when a worker runs it
// again, before it decides whether a wait that ran out of budget meanwhile is over. Runs
// started before waits could be extended (extendableWaitsVersion) leave the signal alone.
const ExtendWaitSignal = "extend-wait"

// ExtendWait is the payload of ExtendWaitSignal, as JSON: {"extra": "30m"} to add 30 minutes
// to the deadline of the wait the workflow is in, {"deadline": "2026-05-01T13:00:00Z"} to move
// it to that time, and "activityID" to name the wait by the ID of its pending activity
// ("wait-3"), so that an extension meant for one wait never lands on the next. A deadline only
// moves later: an extension that would bring it earlier, or that names another wait, is logged
// and ignored.
type ExtendWait struct {
	// Extra is added to the deadline: a Go duration such as "30m" or "1h30m".
	Extra string `json:"extra,omitempty"`
	// Deadline becomes the deadline when it is later.
	Deadline time.Time `json:"deadline,omitzero"`
	// ActivityID names the wait by its pending activity's ID; empty means the wait the
	// workflow is in when it takes the signal.
	ActivityID string `json:"activityID,omitempty"`
}

// movedDeadline is the deadline the extension gives a wait whose deadline is deadline.
func (e ExtendWait) movedDeadline(deadline time.Time) (time.Time, error) {
	moved := deadline
	if e.Extra != "" {
		extra, err := time.ParseDuration(e.Extra)
		if err != nil {
			return deadline, fmt.Errorf("extra %q: %w", e.Extra, err)
		}
		moved = deadline.Add(extra)
	}
	if e.Deadline.After(moved) {
		moved = e.Deadline
	}
	if !moved.After(deadline) {
		return deadline, fmt.Errorf("it does not move the deadline %s later", deadline.Format(time.RFC3339))
	}
	return moved, nil
}

// waitActivityIDPrefix begins the activity ID of every wait whose deadline ExtendWaitSignal
// moves.
const waitActivityIDPrefix = "wait-"

// IsExtendableWait reports whether the pending activity with ID activityID is a wait whose
// deadline ExtendWaitSignal moves. Other activities (the calls, and the waits of runs started
// before waits could be extended) have the IDs Temporal's SDK numbers them with.
func IsExtendableWait(activityID string) bool {
	return strings.HasPrefix(activityID, waitActivityIDPrefix)
}

// waits is what a run keeps to extend its waits.
type waits struct {
	// extensions is the channel of ExtendWaitSignal, nil in runs whose waits cannot be extended.
	extensions workflow.ReceiveChannel
	// count counts the waits so far; the nth wait's activity is "wait-n", and "wait-n.k" when it
	// is scheduled again for the kth time.
	count int
}

// wait runs activity with arg, a wait (see waitOptions), within budget, and stores its result
// in out. It returns the activity's own error. In a run whose waits are extendable, the
// status shows the wait's deadline, ExtendWaitSignal moves it while the wait runs, and a wait
// whose budget runs out before its deadline is scheduled again with what is left of it. A wait
// that no extension reached ends as it would without them.
func (t *tracker) wait(ctx workflow.Context, s settings, budget time.Duration, summary string, activity, arg, out any) error {
	opts := s.waitOptions(budget, summary)
	if t.waits.extensions == nil {
		return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activity, arg).Get(ctx, out)
	}
	t.waits.count++
	deadline := workflow.Now(ctx).Add(budget)
	t.status.WaitDeadline = deadline
	defer func() { t.status.WaitDeadline = time.Time{} }()
	var ids []string
	take := func(ext ExtendWait) {
		deadline = t.extend(ids, deadline, ext)
		t.status.WaitDeadline = deadline
	}
	for {
		opts.ActivityID = fmt.Sprintf("%s%d", waitActivityIDPrefix, t.waits.count)
		if len(ids) > 0 {
			opts.ActivityID += fmt.Sprintf(".%d", len(ids))
		}
		ids = append(ids, opts.ActivityID)
		// Temporal gives up on the activity at the end of this budget, or before it when the
		// next poll would not fit.
		budgetEnd := workflow.Now(ctx).Add(opts.ScheduleToCloseTimeout)
		f := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activity, arg)
		for done := false; !done; {
			workflow.NewSelector(ctx).
				AddFuture(f, func(workflow.Future) { done = true }).
				AddReceive(t.waits.extensions, func(c workflow.ReceiveChannel, _ bool) {
					// Not Receive: it drops a payload that is no ExtendWait and blocks for
					// the next signal, which would hold the wait up after its activity ends.
					var ext ExtendWait
					if c.ReceiveAsync(&ext) {
						take(ext)
					}
				}).
				Select(ctx)
		}
		// An extension that reached the workflow together with the wait's end, as one sent
		// while no worker ran does, counts before the end does.
		for {
			var ext ExtendWait
			if !t.waits.extensions.ReceiveAsync(&ext) {
				break
			}
			take(ext)
		}
		err := f.Get(ctx, out)
		left := deadline.Sub(workflow.Now(ctx))
		if !deadline.After(budgetEnd) || left <= 0 || !outOfBudget(err) {
			return err
		}
		workflow.GetLogger(ctx).Info("A wait's budget ran out before its extended deadline: polling again",
			"activityID", opts.ActivityID, "deadline", deadline, "left", left)
		opts = s.waitOptions(left, summary)
	}
}

// extend applies ext to the wait whose activities had ids and whose deadline is deadline, and
// returns its deadline then.
func (t *tracker) extend(ids []string, deadline time.Time, ext ExtendWait) time.Time {
	log := workflow.GetLogger(t.ctx)
	current := ids[len(ids)-1]
	if ext.ActivityID != "" && !slices.Contains(ids, ext.ActivityID) {
		log.Warn("Ignoring an extension of a wait that is not the current one", "activityID", ext.ActivityID, "current", current)
		return deadline
	}
	moved, err := ext.movedDeadline(deadline)
	if err != nil {
		log.Warn("Ignoring an extension of a wait", "activityID", current, "error", err)
		return deadline
	}
	log.Info("A wait's deadline moved", "activityID", current, "from", deadline, "to", moved)
	return moved
}

// outOfBudget reports whether a wait's activity failed because its budget ran out: Temporal
// timed it out, or stopped retrying an error the activity would have tried again. A wait's
// attempts are sized to outlast its budget (attemptsWithin), so nothing else stops those.
func outOfBudget(err error) bool {
	var timeoutErr *temporal.TimeoutError
	var appErr *temporal.ApplicationError
	return errors.As(err, &timeoutErr) || errors.As(err, &appErr) && !appErr.NonRetryable()
}
