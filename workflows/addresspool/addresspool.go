package addresspool

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"

	"github.com/pveflow/pveflow/workflows/core"
)

// Address pools. A proxy created with an address pool (ProxySpec.AddressPool) gets its
// static addresses from that configured pool (proxmox.addressPools), one allocation per UID,
// until the proxy is deleted. One AddressPool workflow per pool keeps the allocations: it is
// the one place that sees every request in order, so no two proxies are ever given one
// address, and its state is durable, so an allocation outlives any worker or server restart.
//
// The pool answers two Updates, allocate and free, and a query of its state. A workflow cannot
// send an Update, so a create and a delete reach the pool through an activity
// (AllocateAddress, FreeAddress) that sends it with the worker's client, by UpdateWithStart
// for an allocation: the pool that runs takes it, and one is started when none runs. An
// Update is a request with an answer, which a signal is not: the admission's
// signal-and-signal-back protocol (package admission) exists because a lease is waited for, where
// an address is answered at once.
//
// An allocation is the UID's own the way a VMID is: allocate is idempotent (the same UID gets
// the addresses it has), the index tried first is the UID's home, FNV-1a of the UID over the
// pool's size as proxy.VMIDFor has it, then the next ones, so a UID gets the same addresses
// back after a free whenever nobody took them meanwhile. The pool's record is the authority on
// whose an address is; it never gives an address that an allocation holds, whatever index and
// prefix length that allocation had (the pool's range or subnet may have changed in the config
// since).
//
// A third Update, reconcile, brings the record back to what the VMs hold, which the mark of
// every proxy's VM records (proxy.Spec's AddressPool and Addresses): CollectGarbage, which
// reads every VM's mark, sends each configured pool the addresses the marked VMs hold in it.
// The pool restores an allocation it lost (its workflow was terminated or reset, or the pool
// renamed in the config, so creates began from an empty pool) unless another UID holds one of
// its addresses, which it reports as a conflict and leaves; and frees the allocations of the
// UIDs the collection names, whose VMs it found none of and whose entities do not run (a VM
// destroyed by hand, a delete that failed after its destroy), only when they are older than
// the collection's grace. The pool is the one writer of its record, and an allocation made or
// answered again after the collection looked is younger than that, so a create that runs
// meanwhile keeps what it was given.

// AddressPoolName is the workflow type of an address pool; it is recorded in histories.
const AddressPoolName = "AddressPool"

// The Updates and the query of an AddressPool workflow.
const (
	// AllocateAddressUpdate gives a UID its addresses (an AllocateAddressRequest); its result
	// is a proxy.Addresses.
	AllocateAddressUpdate = "allocate"
	// FreeAddressUpdate takes a UID's addresses back (a FreeAddressRequest); its result is the
	// proxy.Addresses freed, empty when the UID held none.
	FreeAddressUpdate = "free"
	// ReconcileAddressesUpdate brings the pool's allocations back to what the VMs hold (an
	// activities.AddressReconcile); its result is an activities.Reconciled.
	ReconcileAddressesUpdate = "reconcile"
	// AddressPoolQuery answers the pool's AddressPoolState.
	AddressPoolQuery = "address-pool"
)

// AddressPoolWorkflowID is the ID of the workflow of one address pool for the workers of one
// task queue: another installation on the same Temporal namespace has pools of its own.
func AddressPoolWorkflowID(taskQueue, pool string) string {
	return "address-pool/" + taskQueue + "/" + pool
}

// AddressPoolOptions are the start options of the workflow of a pool, for UpdateWithStart.
func AddressPoolOptions(taskQueue, pool string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       AddressPoolWorkflowID(taskQueue, pool),
		TaskQueue:                taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}
}

// AddressPoolState is a pool's state, carried across continue-as-new, and what
// AddressPoolQuery answers.
type AddressPoolState struct {
	Pool string `json:"pool"`
	// Range is the pool as the latest allocation's requester had it configured.
	Range config.AddressPool `json:"range,omitzero"`
	// Allocations are the addresses given, by index.
	Allocations []AddressAllocation `json:"allocations"`
	// HistoryEvents is the history length past which the pool continues as new; zero is
	// defaultAddressPoolHistoryEvents.
	HistoryEvents int `json:"historyEvents,omitempty"`
}

// AddressAllocation is the addresses, as address/prefix-length, a proxy is given.
type AddressAllocation struct {
	UID string `json:"uid"`
	// Index is the place of the addresses in the pool's range when they were given.
	Index int    `json:"index"`
	IPv4  string `json:"ipv4,omitempty"`
	IPv6  string `json:"ipv6,omitempty"`
	// At is when the allocation was made, restored, or last answered again to its UID: a
	// reconcile frees none made after its collection looked. An allocation from before pools
	// kept it has none, and counts as old.
	At time.Time `json:"at,omitzero"`
}

// AllocateAddressRequest is the argument of the allocate Update.
type AllocateAddressRequest struct {
	UID string `json:"uid"`
	// Range is the pool as the requester's config has it; the pool takes the latest.
	Range config.AddressPool `json:"range"`
}

// FreeAddressRequest is the argument of the free Update.
type FreeAddressRequest struct {
	UID string `json:"uid"`
}

// defaultAddressPoolHistoryEvents is the history length past which a pool continues as new,
// if the server has not suggested it before. An allocation is some five events.
const defaultAddressPoolHistoryEvents = 10000

// AddressPool keeps the allocations of one address pool. It runs for as long as the pool is
// used, continuing as new with its allocations when its history grows long. It ignores a
// cancellation: its allocations are addresses proxies use, and a new run would not know them.
// Terminating it forgets them all.
func (w *Workflows) AddressPool(ctx workflow.Context, st AddressPoolState) error {
	p := &addressPool{st: st}
	if err := workflow.SetQueryHandler(ctx, AddressPoolQuery, func() (AddressPoolState, error) { return p.st, nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, AllocateAddressUpdate, p.allocate,
		workflow.UpdateHandlerOptions{Validator: p.validateAllocate}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, FreeAddressUpdate, p.free,
		workflow.UpdateHandlerOptions{Validator: validateFree}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, ReconcileAddressesUpdate, p.reconcile,
		workflow.UpdateHandlerOptions{Validator: p.validateReconcile}); err != nil {
		return err
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if err := workflow.Await(ctx, func() bool { return p.historyIsLong(ctx) }); err != nil {
		return err
	}
	// The handlers block on nothing, so every Update taken so far has its answer by now.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, AddressPoolName, p.st)
}

type addressPool struct{ st AddressPoolState }

func (p *addressPool) historyIsLong(ctx workflow.Context) bool {
	return core.HistoryPast(ctx, cmp.Or(p.st.HistoryEvents, defaultAddressPoolHistoryEvents))
}

func (p *addressPool) validateAllocate(req AllocateAddressRequest) error {
	if err := proxy.ValidateUID(req.UID); err != nil {
		return fmt.Errorf("address pool %s: %w", p.st.Pool, err)
	}
	if req.Range.Size() == 0 {
		return fmt.Errorf("address pool %s: the request for proxy %s gives no valid range", p.st.Pool, req.UID)
	}
	return nil
}

func validateFree(req FreeAddressRequest) error { return proxy.ValidateUID(req.UID) }

func (p *addressPool) validateReconcile(req activities.AddressReconcile) error {
	uids := slices.Clone(req.Free)
	for _, h := range req.Held {
		uids = append(uids, h.UID)
	}
	for _, uid := range uids {
		if err := proxy.ValidateUID(uid); err != nil {
			return fmt.Errorf("address pool %s: %w", p.st.Pool, err)
		}
	}
	return nil
}

// allocate gives req.UID the addresses it holds, or the first free ones along its probe
// sequence. It fails QuotaExceeded when every address is taken. Either way the allocation is
// made young again: a create or change that asks is using it.
func (p *addressPool) allocate(ctx workflow.Context, req AllocateAddressRequest) (proxy.Addresses, error) {
	p.st.Range = req.Range
	if i := slices.IndexFunc(p.st.Allocations, func(a AddressAllocation) bool { return a.UID == req.UID }); i >= 0 {
		p.st.Allocations[i].At = workflow.Now(ctx)
		return p.addresses(p.st.Allocations[i]), nil
	}
	// Held is by address, not by address/prefix-length: a subnet widened or narrowed in the
	// config since gives a held address again with another prefix length.
	taken := make(map[netip.Addr]bool, 2*len(p.st.Allocations))
	for _, a := range p.st.Allocations {
		taken[hostAddr(a.IPv4)], taken[hostAddr(a.IPv6)] = true, true
	}
	taken[netip.Addr{}] = false // a family the pool does not give is nobody's
	size := p.st.Range.Size()
	indexes := config.VMIDRange{Min: 0, Max: size - 1} // the VMIDs' probe sequence, over the pool's indexes
	for attempt := range size {
		i := proxy.VMIDFor(req.UID, indexes, attempt)
		v4, v6 := p.st.Range.At(i)
		if taken[hostAddr(v4)] || taken[hostAddr(v6)] {
			continue
		}
		a := AddressAllocation{UID: req.UID, Index: i, IPv4: v4, IPv6: v6, At: workflow.Now(ctx)}
		p.st.insert(a)
		workflow.GetLogger(ctx).Info("addresses allocated", "pool", p.st.Pool, "uid", req.UID, "ipv4", v4, "ipv6", v6)
		return p.addresses(a), nil
	}
	return proxy.Addresses{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"address pool %s is full: its %d addresses are given to %d proxies; delete one, or create proxy %s from another pool",
		p.st.Pool, size, len(p.st.Allocations), req.UID), core.FailQuotaExceeded, nil)
}

// insert adds allocation a, in the order of the indexes.
func (st *AddressPoolState) insert(a AddressAllocation) {
	at, _ := slices.BinarySearchFunc(st.Allocations, a, func(x, y AddressAllocation) int {
		return cmp.Or(cmp.Compare(x.Index, y.Index), strings.Compare(x.UID, y.UID))
	})
	st.Allocations = slices.Insert(st.Allocations, at, a)
}

// hostAddr is the address of s, an address/prefix-length as the pool gives it; the zero
// Addr for none.
func hostAddr(s string) netip.Addr {
	p, _ := netip.ParsePrefix(s)
	return p.Addr()
}

// free takes req.UID's addresses back and returns them; a UID that holds none frees nothing.
func (p *addressPool) free(ctx workflow.Context, req FreeAddressRequest) (proxy.Addresses, error) {
	i := slices.IndexFunc(p.st.Allocations, func(a AddressAllocation) bool { return a.UID == req.UID })
	if i < 0 {
		return proxy.Addresses{}, nil
	}
	a := p.st.Allocations[i]
	p.st.Allocations = slices.Delete(p.st.Allocations, i, i+1)
	workflow.GetLogger(ctx).Info("addresses freed", "pool", p.st.Pool, "uid", req.UID, "ipv4", a.IPv4, "ipv6", a.IPv6)
	return p.addresses(a), nil
}

// reconcile brings the pool's allocations back to what the VMs hold, as reconciled says, and
// answers what it did; a dry run answers what it would do, and changes nothing.
func (p *addressPool) reconcile(ctx workflow.Context, req activities.AddressReconcile) (activities.Reconciled, error) {
	st, res := Reconciled(p.st, workflow.Now(ctx), req)
	if req.DryRun {
		return res, nil
	}
	p.st = st
	logger := workflow.GetLogger(ctx)
	for _, a := range res.Restored {
		logger.Info("addresses restored from a VM's mark", "pool", p.st.Pool, "uid", a.UID, "ipv4", a.IPv4, "ipv6", a.IPv6)
	}
	for _, a := range res.Freed {
		logger.Info("addresses freed: no VM holds them", "pool", p.st.Pool, "uid", a.UID, "ipv4", a.IPv4, "ipv6", a.IPv6)
	}
	for _, c := range res.Conflicts {
		logger.Warn("a VM's mark holds addresses the pool gives another way", "pool", p.st.Pool, "uid", c.Held.UID, "ipv4", c.Held.IPv4, "ipv6", c.Held.IPv6,
			"allocatedTo", c.Allocation.UID, "allocatedIPv4", c.Allocation.IPv4, "allocatedIPv6", c.Allocation.IPv6)
	}
	return res, nil
}

// Reconciled is st after the reconcile req at now, and what it did:
//   - an address req.Held holds that no allocation does is allocated to its UID again, young
//     (At now), unless its UID holds other addresses in the pool, or another UID holds one of
//     them: a conflict, left as it is;
//   - an allocation of a UID in req.Free is freed when nothing in req.Held is its UID's and it
//     was made before req.Before; one of a UID not in req.Free that would be is Unheld.
//
// Addresses are compared by address, not address/prefix-length, as allocate compares them.
func Reconciled(st AddressPoolState, now time.Time, req activities.AddressReconcile) (AddressPoolState, activities.Reconciled) {
	st.Allocations = slices.Clone(st.Allocations)
	var res activities.Reconciled
	owners := make(map[netip.Addr]AddressAllocation, 2*len(st.Allocations))
	own := func(a AddressAllocation) {
		for _, addr := range []netip.Addr{hostAddr(a.IPv4), hostAddr(a.IPv6)} {
			if addr.IsValid() {
				owners[addr] = a
			}
		}
	}
	for _, a := range st.Allocations {
		own(a)
	}
	held := make(map[string]bool, len(req.Held))
	for _, h := range req.Held {
		held[h.UID] = true
		v4, v6 := hostAddr(h.IPv4), hostAddr(h.IPv6)
		if i := slices.IndexFunc(st.Allocations, func(a AddressAllocation) bool { return a.UID == h.UID }); i >= 0 {
			if a := st.Allocations[i]; hostAddr(a.IPv4) != v4 || hostAddr(a.IPv6) != v6 {
				res.Conflicts = append(res.Conflicts, activities.AddressConflict{Held: h, Allocation: holding(a)})
			}
			continue
		}
		if !v4.IsValid() && !v6.IsValid() {
			continue
		}
		if o, taken := owners[v4]; taken {
			res.Conflicts = append(res.Conflicts, activities.AddressConflict{Held: h, Allocation: holding(o)})
			continue
		}
		if o, taken := owners[v6]; taken {
			res.Conflicts = append(res.Conflicts, activities.AddressConflict{Held: h, Allocation: holding(o)})
			continue
		}
		a := AddressAllocation{UID: h.UID, Index: req.Range.IndexOf(cmp.Or(h.IPv4, h.IPv6)), IPv4: h.IPv4, IPv6: h.IPv6, At: now}
		st.insert(a)
		own(a)
		res.Restored = append(res.Restored, h)
	}
	kept := st.Allocations[:0]
	for _, a := range st.Allocations {
		switch {
		case held[a.UID] || !a.At.Before(req.Before):
		case !slices.Contains(req.Free, a.UID):
			res.Unheld = append(res.Unheld, holding(a))
		default:
			res.Freed = append(res.Freed, holding(a))
			continue
		}
		kept = append(kept, a)
	}
	st.Allocations = kept
	return st, res
}

func holding(a AddressAllocation) activities.AddressHolding {
	return activities.AddressHolding{UID: a.UID, IPv4: a.IPv4, IPv6: a.IPv6}
}

// addresses are an allocation's addresses with the gateways of their families.
func (p *addressPool) addresses(a AddressAllocation) proxy.Addresses {
	g4, g6 := p.st.Range.Gateways()
	out := proxy.Addresses{IPv4: a.IPv4, IPv6: a.IPv6}
	if a.IPv4 != "" {
		out.Gateway4 = g4
	}
	if a.IPv6 != "" {
		out.Gateway6 = g6
	}
	return out
}
