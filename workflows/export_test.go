package workflows

import (
	"time"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
)

// WaitAttempts is the MaximumAttempts of a wait within budget, which the test environment does
// not show its activities (their activity.Info has no retry policy).
func WaitAttempts(budget time.Duration, p config.Poll) int32 { return attemptsWithin(budget, p) }

// ReconciledPool is what the reconcile Update does to a pool's state st at now: the tests'
// stand-in for the AddressPool workflows answers with it.
func ReconciledPool(st AddressPoolState, now time.Time, req activities.AddressReconcile) (AddressPoolState, activities.Reconciled) {
	return reconciled(st, now, req)
}

// RenewCallShareAt is what the renew Update of a CallShares workflow in state st answers at now.
func RenewCallShareAt(st *CallSharesState, req CallShareRequest, now time.Time) CallShareGrant {
	c := &callShares{st: *st}
	g := c.renewAt(req, now)
	*st = c.st
	return g
}
