package core

import (
	"go.temporal.io/sdk/workflow"
)

// ReadTracker is the tracker of a read workflow: it shows the current step in the UI, and
// keeps no status query or search attributes, as a read has nothing to follow.
func ReadTracker(ctx workflow.Context) *Tracker {
	return &Tracker{Ctx: ctx, Status: Status{Phase: PhaseLookingUp}}
}
