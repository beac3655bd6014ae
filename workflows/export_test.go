package workflows

import (
	"time"

	"github.com/pveflow/pveflow/activities"
)

// ReconciledPool is what the reconcile Update does to a pool's state st at now: the tests'
// stand-in for the AddressPool workflows answers with it.
func ReconciledPool(st AddressPoolState, now time.Time, req activities.AddressReconcile) (AddressPoolState, activities.Reconciled) {
	return reconciled(st, now, req)
}
