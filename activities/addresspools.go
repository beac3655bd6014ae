package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// AddressPools sends requests to AddressPool workflows, which give proxies their static
// addresses; a worker's is an adapter over starter.Client (starter.AddressPools). A workflow
// cannot send an Update, so CreateProxy and DeleteProxy reach a pool through AllocateAddress
// and FreeAddress, and CollectGarbage through ReconcileAddresses, which call it, as Rollout
// reaches a proxy's entity through RequestChange.
//
// The pool's answer, when it is a failure (the pool is full, its validator refused the
// request), is returned as the SDK returns it: a *temporal.ApplicationError. A failure on the
// way to the pool is returned classified as pve.Classified does, or unclassified, which counts
// as Transient.
type AddressPools interface {
	// Allocate gives req.UID its addresses in the pool, the ones it has if it has any, starting
	// the pool's workflow when none runs.
	Allocate(ctx context.Context, req AddressRequest) (proxy.Addresses, error)
	// Free takes req.UID's addresses back, and returns them; a UID that holds none, or a pool
	// whose workflow does not run, frees nothing.
	Free(ctx context.Context, req AddressRequest) (proxy.Addresses, error)
	// Reconcile sends the pool what the VMs hold in it, and returns what it restored, freed and
	// found in conflict. It starts the pool's workflow when none runs and there is something
	// to restore; a pool that does not run, asked for a dry run or with nothing held, is a
	// NotFound error: it holds nothing, and the caller knows what an empty pool answers.
	Reconcile(ctx context.Context, req ReconcileRequest) (Reconciled, error)
}

// AddressRequest asks the AddressPool workflow of Pool on TaskQueue about UID's addresses.
type AddressRequest struct {
	// TaskQueue is the task queue of the pool's workflow, the requesting run's: another
	// installation on the same namespace, with a task queue of its own, has pools of its own.
	TaskQueue string `json:"taskQueue"`
	Pool      string `json:"pool"`
	UID       string `json:"uid"`
	// Range is the pool as the requesting run's config has it; an allocation takes it.
	Range config.AddressPool `json:"range,omitzero"`
	// HistoryEvents is the history length past which the pool continues as new.
	HistoryEvents int `json:"historyEvents,omitempty"`
}

// AddressHolding is the addresses, as address/prefix-length, that UID holds in a pool: by its
// VM's mark, or by the pool's allocation.
type AddressHolding struct {
	UID  string `json:"uid"`
	IPv4 string `json:"ipv4,omitempty"`
	IPv6 string `json:"ipv6,omitempty"`
}

// AddressReconcile is the argument of a pool's reconcile Update: what a garbage collection
// found the VMs hold in the pool, and which allocations it may free.
type AddressReconcile struct {
	// Range is the pool as the collection's config has it: a restored allocation's index is
	// its place in it.
	Range config.AddressPool `json:"range,omitzero"`
	// Held are the addresses the marked VMs hold in the pool, by their marks. The pool
	// restores each it has no allocation for, unless another UID holds one of them there.
	Held []AddressHolding `json:"held,omitempty"`
	// Free are the UIDs whose allocations the pool frees, when Held has nothing of theirs and
	// they were made, or last answered again, before Before: the collection found no VM of
	// theirs and their entity not running.
	Free   []string  `json:"free,omitempty"`
	Before time.Time `json:"before,omitzero"`
	// DryRun answers what the pool would do, and changes nothing.
	DryRun bool `json:"dryRun,omitempty"`
}

// AddressConflict is an address a VM holds by its mark that its pool gives to another UID, or
// a VM's addresses whose UID holds others in the pool: a person decides which is right.
type AddressConflict struct {
	// Held is what the VM's mark says its UID holds.
	Held AddressHolding `json:"held"`
	// Allocation is the pool's allocation in its way.
	Allocation AddressHolding `json:"allocation"`
}

// Reconciled is what a pool's reconcile Update did, or in a dry run would do.
type Reconciled struct {
	// Restored are the allocations made again from Held.
	Restored []AddressHolding `json:"restored,omitempty"`
	// Freed are the allocations of the UIDs in Free, freed.
	Freed     []AddressHolding  `json:"freed,omitempty"`
	Conflicts []AddressConflict `json:"conflicts,omitempty"`
	// Unheld are the allocations made before Before that nothing in Held is of, of UIDs not
	// in Free, left as they are: the ones the collection asks about before it frees any.
	Unheld []AddressHolding `json:"unheld,omitempty"`
}

// ReconcileRequest sends the AddressPool workflow of Pool on TaskQueue the reconcile Update
// AddressReconcile.
type ReconcileRequest struct {
	TaskQueue string `json:"taskQueue"`
	Pool      string `json:"pool"`
	AddressReconcile
}

// AllocateAddress asks the pool for req.UID's addresses.
func (a *Activities) AllocateAddress(ctx context.Context, req AddressRequest) (proxy.Addresses, error) {
	step := fmt.Sprintf("allocate the addresses of proxy %s from address pool %s", req.UID, req.Pool)
	if a.AddressPools == nil {
		return proxy.Addresses{}, missingAddressPools(step)
	}
	addrs, err := a.AddressPools.Allocate(ctx, req)
	if err != nil {
		return proxy.Addresses{}, entityFailure(step, err)
	}
	return addrs, nil
}

// FreeAddress asks the pool to take req.UID's addresses back.
func (a *Activities) FreeAddress(ctx context.Context, req AddressRequest) (proxy.Addresses, error) {
	step := fmt.Sprintf("free the addresses of proxy %s in address pool %s", req.UID, req.Pool)
	if a.AddressPools == nil {
		return proxy.Addresses{}, missingAddressPools(step)
	}
	addrs, err := a.AddressPools.Free(ctx, req)
	if err != nil {
		return proxy.Addresses{}, entityFailure(step, err)
	}
	return addrs, nil
}

// ReconcileAddresses sends the pool what the VMs hold in it, for it to restore the allocations
// it lost and free the ones nobody holds.
func (a *Activities) ReconcileAddresses(ctx context.Context, req ReconcileRequest) (Reconciled, error) {
	step := "reconcile address pool " + req.Pool
	if a.AddressPools == nil {
		return Reconciled{}, missingAddressPools(step)
	}
	res, err := a.AddressPools.Reconcile(ctx, req)
	if err != nil {
		return Reconciled{}, entityFailure(step, err)
	}
	return res, nil
}

func missingAddressPools(step string) error {
	return failure(step, pve.Classified(pve.Permanent, errors.New("the worker was built without Activities.AddressPools, so it cannot reach an address pool")))
}
