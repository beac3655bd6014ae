package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// The clone admission as pveflow 1.0 ran it. Its runs auto-upgrade, so a run started by a 1.0
// worker replays here on this build: this loop makes the commands 1.0 made (a timer made anew
// on every pass; a queued create told its place on every grant), and at the first event it
// meets live it continues as new, carrying its holders and queue, into the shape of
// CloneAdmission. Remove this file in the release after the one that brought that shape: by
// then every 1.0 run has moved on (testdata/histories/clone-admission-1.0.json shows it still
// replays until then).

// cloneQueuedSignal told a queued create its place; the current shape answers the place to a
// query instead.
const cloneQueuedSignal = "clone-queued"

// queued is what a clone-queued signal carries: how many requests are before this one.
type queued struct {
	Ahead int `json:"ahead"`
}

func (a *admission) run1_0(ctx workflow.Context, acquires, releases workflow.ReceiveChannel) error {
	a.ctx, a.tellPlaces = ctx, true
	for ctx.Err() == nil {
		timerCtx, cancelTimer := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx)
		a.receive(sel, acquires, releases)
		if len(a.st.Holders) > 0 && a.st.CheckEvery > 0 {
			sel.AddFuture(workflow.NewTimer(timerCtx, a.st.CheckEvery), func(workflow.Future) { a.checkHolders() })
		}
		sel.Select(ctx)
		cancelTimer()
		a.grant()
		a.report()
		if !workflow.IsReplaying(ctx) {
			return a.continueAsNew(acquires, releases)
		}
	}
	return temporal.NewCanceledError()
}

// tellPlace tells a queued run how many requests are before it.
func (a *admission) tellPlace(h Holder, ahead int) {
	if a.tellPlaces {
		a.tell(h, cloneQueuedSignal, queued{Ahead: ahead})
	}
}

// tellPlacesAfterGrant tells every queued run its new place, without waiting for the news to
// arrive.
func (a *admission) tellPlacesAfterGrant() {
	if !a.tellPlaces {
		return
	}
	for i, h := range a.st.Waiting {
		workflow.SignalExternalWorkflow(a.ctx, h.WorkflowID, h.RunID, cloneQueuedSignal, queued{Ahead: i})
	}
}
