package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// A proxy's create and delete never act on Proxmox at the same time, and the one started later
// wins: a delete stops a create that started before it, and a create waits for a delete that
// started before it. Each run, when it starts, announces itself to the other operation's
// workflow ID with its start time (as recorded by Temporal), and the two compare: start order,
// not the order in which their first steps happen to run, decides. The earlier one, when it
// closes, tells the later one. A message can be lost only in the instant the earlier run closes;
// the waiting run therefore announces itself again from time to time, and an announcement that
// fails means the other run has closed.

// opStarted is what a create and a delete of one proxy announce to each other.
type opStarted struct {
	StartedAt time.Time `json:"startedAt"`
}

// stopsCreate reports whether a delete that announced d stops a create that started at
// created: it does when it started later. A tie goes to the delete.
func (d opStarted) stopsCreate(created time.Time) bool {
	return !d.StartedAt.Before(created)
}

// maxAnnounceInterval caps the backoff between a waiting run's announcements. They matter only
// when the other run's closing message was lost, so they can be rare.
const maxAnnounceInterval = 2 * time.Minute

// peer is the other operation of the same proxy, as a run that may have to wait for it sees it.
type peer struct {
	// workflowID is the other operation's.
	workflowID string
	// announce is the signal by which this run announces itself.
	announce string
	self     opStarted
	// closed is the signal by which the other run says it has closed.
	closed string
	// theirs, when set, is the signal by which the other run announces itself, and onTheirs
	// says whether that ends the wait: it does when the other run turns out to be the later.
	theirs   string
	onTheirs func(opStarted) (stopWaiting bool)
	// phase and step are what this run shows while it waits.
	phase, step string
}

// await announces this run to the other operation, and if that one runs, waits until it has
// closed. A cancelled ctx ends the wait with a cancellation.
func (p peer) await(ctx workflow.Context, s settings, t *tracker) error {
	if !p.tell(ctx) {
		return nil // the other operation does not run
	}
	t.phase(p.phase, p.step)
	every := s.Poll.MaximumInterval
	for done := false; !done; every = min(2*every, maxAnnounceInterval) {
		timerCtx, cancelTimer := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx).
			AddReceive(workflow.GetSignalChannel(ctx, p.closed), func(ch workflow.ReceiveChannel, _ bool) {
				ch.Receive(ctx, nil)
				done = true
			}).
			AddFuture(workflow.NewTimer(timerCtx, every), func(workflow.Future) {
				done = ctx.Err() != nil || !p.tell(ctx)
			})
		if p.theirs != "" {
			sel.AddReceive(workflow.GetSignalChannel(ctx, p.theirs), func(ch workflow.ReceiveChannel, _ bool) {
				var theirs opStarted
				ch.Receive(ctx, &theirs)
				done = p.onTheirs(theirs)
			})
		}
		sel.Select(ctx)
		cancelTimer()
	}
	if ctx.Err() != nil {
		return temporal.NewCanceledError(p.step)
	}
	return nil
}

// tell announces this run; it fails when the other operation does not run.
func (p peer) tell(ctx workflow.Context) bool {
	return workflow.SignalExternalWorkflow(ctx, p.workflowID, "", p.announce, p.self).Get(ctx, nil) == nil
}

// tellClosed tells the other operation of the same proxy, waiting for this run, that it has
// closed. It runs on a disconnected context, so a cancelled run still says so.
func tellClosed(ctx workflow.Context, workflowID, signal string, payload any) {
	ctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	if err := workflow.SignalExternalWorkflow(ctx, workflowID, "", signal, payload).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("the run waiting for this one could not be told that it closed", "workflowID", workflowID, "error", err)
	}
}
