package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// AddressPools sends requests to AddressPool workflows, which give proxies their static
// addresses; a worker's is an adapter over starter.Client (starter.AddressPools). A workflow
// cannot send an Update, so CreateProxy and DeleteProxy reach a pool through AllocateAddress
// and FreeAddress, which call it, as Rollout reaches a proxy's entity through RequestChange.
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

func missingAddressPools(step string) error {
	return failure(step, pve.Classified(pve.Permanent, errors.New("the worker was built without Activities.AddressPools, so it cannot reach an address pool")))
}
