package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/addresspool"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// testPool is a pool of both families, of size addresses.
func testPool(size int) config.AddressPool {
	return config.AddressPool{
		IPv4: &config.AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.10", Last: fmt.Sprintf("192.0.2.%d", 10+size-1), Gateway: "192.0.2.1"},
		IPv6: &config.AddressRange{Subnet: "2001:db8::/64", First: "2001:db8::10", Last: fmt.Sprintf("2001:db8::%x", 0x10+size-1), Gateway: "2001:db8::1"},
	}
}

// poolRun runs one AddressPool workflow and sends it requests, one a virtual second, in the
// order they are made; end makes it continue as new after them.
type poolRun struct {
	t       *testing.T
	env     *testsuite.TestWorkflowEnvironment
	pool    config.AddressPool
	next    time.Duration
	answers map[string]*answer
}

func newPoolRun(t *testing.T, pool config.AddressPool) *poolRun {
	env := newWorld(t).env()
	env.SetTestTimeout(30 * time.Second)
	return &poolRun{t: t, env: env, pool: pool, answers: map[string]*answer{}}
}

func (p *poolRun) send(id, name string, arg any) {
	a := &answer{}
	p.answers[id] = a
	p.next += time.Second
	p.env.RegisterDelayedCallback(func() {
		p.env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { a.rejected, a.done = err, true },
			OnComplete: func(res any, err error) { a.result, a.err, a.done = res, err, true },
		}, arg)
	}, p.next)
}

func (p *poolRun) allocate(id, uid string) {
	p.send(id, addresspool.AllocateAddressUpdate, addresspool.AllocateAddressRequest{UID: uid, Range: p.pool})
}

func (p *poolRun) free(id, uid string) {
	p.send(id, addresspool.FreeAddressUpdate, addresspool.FreeAddressRequest{UID: uid})
}

func (p *poolRun) reconcile(id string, req activities.AddressReconcile) {
	p.send(id, addresspool.ReconcileAddressesUpdate, req)
}

// reconciled is what reconcile request id answered.
func (p *poolRun) reconciled(id string) activities.Reconciled {
	a := p.answers[id]
	require.True(p.t, a.done, "request %s was answered", id)
	require.NoError(p.t, a.rejected, "request %s", id)
	require.NoError(p.t, a.err, "request %s", id)
	return a.result.(activities.Reconciled)
}

// run runs the pool from st until it continues as new after the requests, and returns the
// state it carries on.
func (p *poolRun) run(st addresspool.AddressPoolState) addresspool.AddressPoolState {
	p.next += time.Second
	p.env.RegisterDelayedCallback(func() { p.env.SetContinueAsNewSuggested(true) }, p.next)
	p.free("end", "end-of-test") // an event, for the pool to see the suggestion
	p.env.ExecuteWorkflow(addresspool.AddressPoolName, st)
	var can *workflow.ContinueAsNewError
	require.ErrorAs(p.t, p.env.GetWorkflowError(), &can)
	var next addresspool.AddressPoolState
	require.NoError(p.t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	return next
}

// addresses is what request id answered.
func (p *poolRun) addresses(id string) proxy.Addresses {
	a := p.answers[id]
	require.True(p.t, a.done, "request %s was answered", id)
	require.NoError(p.t, a.rejected, "request %s", id)
	require.NoError(p.t, a.err, "request %s", id)
	return a.result.(proxy.Addresses)
}

func TestAddressPool_allocateIsIdempotent(t *testing.T) {
	p := newPoolRun(t, testPool(10))
	p.allocate("first", uid)
	p.allocate("again", uid)

	st := p.run(addresspool.AddressPoolState{Pool: "egress"})

	first := p.addresses("first")
	assert.Equal(t, first, p.addresses("again"))
	assert.Equal(t, "192.0.2.1", first.Gateway4)
	assert.Equal(t, "2001:db8::1", first.Gateway6)
	require.Len(t, st.Allocations, 1)
	assert.Equal(t, uid, st.Allocations[0].UID)
}

func TestAddressPool_bothFamiliesComeFromOnePlace(t *testing.T) {
	p := newPoolRun(t, testPool(10))
	p.allocate("a", uid)

	st := p.run(addresspool.AddressPoolState{Pool: "egress"})

	i := st.Allocations[0].Index
	assert.Equal(t, proxy.Addresses{
		IPv4: fmt.Sprintf("192.0.2.%d/24", 10+i), Gateway4: "192.0.2.1",
		IPv6: fmt.Sprintf("2001:db8::%x/64", 0x10+i), Gateway6: "2001:db8::1",
	}, p.addresses("a"))
}

func TestAddressPool_noTwoProxiesShareAnAddressAndAFullPoolSaysSo(t *testing.T) {
	const size = 20
	p := newPoolRun(t, testPool(size))
	for i := range size + 1 {
		p.allocate(fmt.Sprint(i), fmt.Sprintf("uid-%d", i))
	}

	st := p.run(addresspool.AddressPoolState{Pool: "egress"})

	seen := map[string]bool{}
	for i := range size {
		a := p.addresses(fmt.Sprint(i))
		assert.False(t, seen[a.IPv4] || seen[a.IPv6], "uid-%d got %v, another's", i, a)
		seen[a.IPv4], seen[a.IPv6] = true, true
	}
	full := p.answers[fmt.Sprint(size)]
	require.True(t, full.done)
	require.Error(t, full.err)
	assert.Equal(t, core.FailQuotaExceeded, failureType(t, full.err))
	assert.Contains(t, full.err.Error(), "address pool egress is full: its 20 addresses are given to 20 proxies")
	assert.Len(t, st.Allocations, size)
}

func TestAddressPool_aFreedAddressGoesToTheNextProxy(t *testing.T) {
	p := newPoolRun(t, testPool(1))
	p.allocate("a", "uid-a")
	p.free("free a", "uid-a")
	p.free("free a again", "uid-a")
	p.allocate("b", "uid-b")

	st := p.run(addresspool.AddressPoolState{Pool: "egress"})

	assert.Equal(t, p.addresses("a"), p.addresses("free a"), "a free answers what it freed")
	assert.Zero(t, p.addresses("free a again"), "freeing twice frees nothing the second time")
	assert.Equal(t, p.addresses("a"), p.addresses("b"))
	require.Len(t, st.Allocations, 1)
	assert.Equal(t, "uid-b", st.Allocations[0].UID)
}

func TestAddressPool_continuesAsNewWithItsAllocations(t *testing.T) {
	first := newPoolRun(t, testPool(2))
	first.allocate("a", "uid-a")
	carried := first.run(addresspool.AddressPoolState{Pool: "egress"})

	second := newPoolRun(t, testPool(2))
	second.allocate("a again", "uid-a")
	second.allocate("b", "uid-b")
	second.allocate("c", "uid-c")
	second.run(carried)

	assert.Equal(t, first.addresses("a"), second.addresses("a again"), "the next run knows uid-a's addresses")
	assert.NotEqual(t, first.addresses("a"), second.addresses("b"), "and gives them to nobody else")
	assert.Equal(t, core.FailQuotaExceeded, failureType(t, second.answers["c"].err))
}

func TestAddressPool_neverGivesAnAddressHeldUnderAnotherRange(t *testing.T) {
	// uid-a got 192.0.2.11 when the range began at .10; the range now begins at .11, so
	// index 0 is that same address.
	p := newPoolRun(t, config.AddressPool{IPv4: &config.AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.11", Last: "192.0.2.12"}})
	p.allocate("b", "uid-b")
	p.allocate("c", "uid-c")

	p.run(addresspool.AddressPoolState{Pool: "egress", Allocations: []addresspool.AddressAllocation{{UID: "uid-a", Index: 1, IPv4: "192.0.2.11/24"}}})

	assert.Equal(t, "192.0.2.12/24", p.addresses("b").IPv4)
	assert.Equal(t, core.FailQuotaExceeded, failureType(t, p.answers["c"].err))
}

func TestAddressPool_neverGivesAHeldAddressAfterItsSubnetIsWidened(t *testing.T) {
	// uid-a holds the range's first address under the narrower prefix; the widened range
	// gives that same address with another prefix length.
	for name, tt := range map[string]struct {
		held  addresspool.AddressAllocation
		pool  config.AddressPool
		other func(proxy.Addresses) string
		want  string
	}{
		"ipv4": {
			held:  addresspool.AddressAllocation{UID: "uid-a", IPv4: "192.0.2.11/24"},
			pool:  config.AddressPool{IPv4: &config.AddressRange{Subnet: "192.0.2.0/23", First: "192.0.2.11", Last: "192.0.2.12"}},
			other: func(a proxy.Addresses) string { return a.IPv4 },
			want:  "192.0.2.12/23",
		},
		"ipv6": {
			held:  addresspool.AddressAllocation{UID: "uid-a", IPv6: "2001:db8::11/64"},
			pool:  config.AddressPool{IPv6: &config.AddressRange{Subnet: "2001:db8::/56", First: "2001:db8::11", Last: "2001:db8::12"}},
			other: func(a proxy.Addresses) string { return a.IPv6 },
			want:  "2001:db8::12/56",
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := newPoolRun(t, tt.pool)
			p.allocate("b", "uid-b")
			p.allocate("c", "uid-c")

			p.run(addresspool.AddressPoolState{Pool: "egress", Allocations: []addresspool.AddressAllocation{tt.held}})

			assert.Equal(t, tt.want, tt.other(p.addresses("b")))
			assert.Equal(t, core.FailQuotaExceeded, failureType(t, p.answers["c"].err), "the held address is nobody else's")
		})
	}
}

func TestAddressPool_refusesARequestWithoutAValidRange(t *testing.T) {
	p := newPoolRun(t, config.AddressPool{})
	p.allocate("a", uid)

	p.run(addresspool.AddressPoolState{Pool: "egress"})

	require.True(t, p.answers["a"].done)
	require.Error(t, p.answers["a"].rejected)
	assert.Contains(t, p.answers["a"].rejected.Error(), "address pool egress: the request for proxy "+uid+" gives no valid range")
}

// holding is what uid holds, or a mark says it holds.
func holding(uid, ipv4, ipv6 string) activities.AddressHolding {
	return activities.AddressHolding{UID: uid, IPv4: ipv4, IPv6: ipv6}
}

func TestAddressPool_reconcileRestoresWhatTheVMsHoldUnlessAnotherAllocationHoldsIt(t *testing.T) {
	p := newPoolRun(t, testPool(10))
	start := p.env.Now()
	b := addresspool.AddressAllocation{UID: "uid-b", Index: 1, IPv4: "192.0.2.11/24", IPv6: "2001:db8::11/64"}
	p.reconcile("r", activities.AddressReconcile{Range: testPool(10), Held: []activities.AddressHolding{
		holding("uid-a", "192.0.2.10/24", "2001:db8::10/64"), // lost by the pool: restored
		holding("uid-b", "192.0.2.11/23", "2001:db8::11/64"), // its own, under another prefix length
		holding("uid-b", "192.0.2.13/24", "2001:db8::13/64"), // a second VM of uid-b's, with other addresses
		holding("uid-c", "192.0.2.11/24", ""),                // uid-b's IPv4
		holding("uid-d", "192.0.2.14/24", "2001:db8::11/64"), // uid-b's IPv6
	}})

	st := p.run(addresspool.AddressPoolState{Pool: "egress", Allocations: []addresspool.AddressAllocation{b}})

	res := p.reconciled("r")
	assert.Equal(t, []activities.AddressHolding{holding("uid-a", "192.0.2.10/24", "2001:db8::10/64")}, res.Restored)
	assert.Equal(t, []activities.AddressConflict{
		{Held: holding("uid-b", "192.0.2.13/24", "2001:db8::13/64"), Allocation: holding("uid-b", b.IPv4, b.IPv6)},
		{Held: holding("uid-c", "192.0.2.11/24", ""), Allocation: holding("uid-b", b.IPv4, b.IPv6)},
		{Held: holding("uid-d", "192.0.2.14/24", "2001:db8::11/64"), Allocation: holding("uid-b", b.IPv4, b.IPv6)},
	}, res.Conflicts)
	assert.Empty(t, res.Freed)
	require.Len(t, st.Allocations, 2)
	restored := st.Allocations[0]
	assert.True(t, start.Add(time.Second).Equal(restored.At), "restored young, when the reconcile came: %s", restored.At)
	restored.At = time.Time{}
	assert.Equal(t, addresspool.AddressAllocation{UID: "uid-a", Index: 0, IPv4: "192.0.2.10/24", IPv6: "2001:db8::10/64"}, restored, "at its place in the range")
	assert.Equal(t, b, st.Allocations[1])
}

func TestAddressPool_reconcileFreesOnlyOldUnheldAllocationsOfTheUIDsItIsGiven(t *testing.T) {
	p := newPoolRun(t, testPool(10))
	start := p.env.Now()
	old := func(uid string, i int) addresspool.AddressAllocation {
		v4, v6 := testPool(10).At(i)
		return addresspool.AddressAllocation{UID: uid, Index: i, IPv4: v4, IPv6: v6}
	}
	p.allocate("asked again", "uid-c") // after the collection looked
	p.reconcile("r", activities.AddressReconcile{Range: testPool(10), Held: []activities.AddressHolding{holding("uid-h", "192.0.2.13/24", "2001:db8::13/64")},
		Free: []string{"uid-a", "uid-c", "uid-h"}, Before: start.Add(time.Second / 2)})

	st := p.run(addresspool.AddressPoolState{Pool: "egress", Allocations: []addresspool.AddressAllocation{old("uid-a", 0), old("uid-b", 1), old("uid-c", 2), old("uid-h", 3)}})

	res := p.reconciled("r")
	assert.Equal(t, []activities.AddressHolding{holding("uid-a", "192.0.2.10/24", "2001:db8::10/64")}, res.Freed, "old, unheld, and given")
	assert.Equal(t, []activities.AddressHolding{holding("uid-b", "192.0.2.11/24", "2001:db8::11/64")}, res.Unheld, "old and unheld, not given")
	var left []string
	for _, a := range st.Allocations {
		left = append(left, a.UID)
	}
	assert.Equal(t, []string{"uid-b", "uid-c", "uid-h"}, left, "uid-c was asked for since, uid-h is held")
}

func TestAddressPool_aReconcileDryRunChangesNothing(t *testing.T) {
	p := newPoolRun(t, testPool(10))
	a := addresspool.AddressAllocation{UID: "uid-a", Index: 0, IPv4: "192.0.2.10/24", IPv6: "2001:db8::10/64"}
	p.reconcile("r", activities.AddressReconcile{Range: testPool(10), Held: []activities.AddressHolding{holding("uid-b", "192.0.2.11/24", "2001:db8::11/64")},
		Free: []string{"uid-a"}, Before: p.env.Now().Add(time.Hour), DryRun: true})

	st := p.run(addresspool.AddressPoolState{Pool: "egress", Allocations: []addresspool.AddressAllocation{a}})

	res := p.reconciled("r")
	assert.Equal(t, []activities.AddressHolding{holding("uid-b", "192.0.2.11/24", "2001:db8::11/64")}, res.Restored)
	assert.Equal(t, []activities.AddressHolding{holding("uid-a", a.IPv4, a.IPv6)}, res.Freed)
	assert.Equal(t, []addresspool.AddressAllocation{a}, st.Allocations)
}

func TestAddressPool_refusesAReconcileNamingNoUID(t *testing.T) {
	p := newPoolRun(t, testPool(10))
	p.reconcile("r", activities.AddressReconcile{Held: []activities.AddressHolding{holding("", "192.0.2.11/24", "")}})

	p.run(addresspool.AddressPoolState{Pool: "egress"})

	require.True(t, p.answers["r"].done)
	require.Error(t, p.answers["r"].rejected)
	assert.Contains(t, p.answers["r"].rejected.Error(), "address pool egress: ")
}

// addressPools stands for the AddressPool workflows, which the tests above run on their own:
// a test environment runs one workflow. It keeps each pool's state as its workflow would,
// gives a UID the first address of the pool's range that no other UID holds, reconciles as
// the workflow does (addresspool.Reconciled), and records the requests, "allocate <pool>
// <uid>", "free <pool> <uid>" and "reconcile <pool>" (with " dry-run" for a dry run).
type addressPools struct {
	mu       sync.Mutex
	requests []string
	// full makes every allocation fail as a full pool's does.
	full bool
	// clock is the world's: an allocation is made at its time.
	clock *envClock
	// states are the pools whose workflows run, by pool.
	states map[string]addresspool.AddressPoolState
}

func (p *addressPools) Allocate(_ context.Context, req activities.AddressRequest) (proxy.Addresses, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, "allocate "+req.Pool+" "+req.UID)
	if p.full {
		return proxy.Addresses{}, temporal.NewNonRetryableApplicationError("address pool "+req.Pool+" is full", core.FailQuotaExceeded, nil)
	}
	st := p.states[req.Pool]
	st.Pool = req.Pool
	g4, g6 := req.Range.Gateways()
	if i := slices.IndexFunc(st.Allocations, func(a addresspool.AddressAllocation) bool { return a.UID == req.UID }); i >= 0 {
		st.Allocations[i].At = p.clock.Now()
		p.set(req.Pool, st)
		return proxy.Addresses{IPv4: st.Allocations[i].IPv4, Gateway4: g4, IPv6: st.Allocations[i].IPv6, Gateway6: g6}, nil
	}
	for i := range req.Range.Size() {
		v4, v6 := req.Range.At(i)
		if slices.ContainsFunc(st.Allocations, func(a addresspool.AddressAllocation) bool {
			return v4 != "" && a.IPv4 == v4 || v6 != "" && a.IPv6 == v6
		}) {
			continue
		}
		st.Allocations = append(st.Allocations, addresspool.AddressAllocation{UID: req.UID, Index: i, IPv4: v4, IPv6: v6, At: p.clock.Now()})
		p.set(req.Pool, st)
		return proxy.Addresses{IPv4: v4, Gateway4: g4, IPv6: v6, Gateway6: g6}, nil
	}
	return proxy.Addresses{}, temporal.NewNonRetryableApplicationError("address pool "+req.Pool+" is full", core.FailQuotaExceeded, nil)
}

func (p *addressPools) Free(_ context.Context, req activities.AddressRequest) (proxy.Addresses, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, "free "+req.Pool+" "+req.UID)
	st, runs := p.states[req.Pool]
	if i := slices.IndexFunc(st.Allocations, func(a addresspool.AddressAllocation) bool { return a.UID == req.UID }); runs && i >= 0 {
		a := st.Allocations[i]
		st.Allocations = slices.Delete(st.Allocations, i, i+1)
		p.set(req.Pool, st)
		return proxy.Addresses{IPv4: a.IPv4, IPv6: a.IPv6}, nil
	}
	return proxy.Addresses{}, nil
}

func (p *addressPools) Reconcile(_ context.Context, req activities.ReconcileRequest) (activities.Reconciled, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, "reconcile "+req.Pool+map[bool]string{true: " dry-run"}[req.DryRun])
	st, runs := p.states[req.Pool]
	if !runs && (req.DryRun || len(req.Held) == 0) {
		return activities.Reconciled{}, pve.Classified(pve.NotFound, errors.New("address pool "+req.Pool+" does not run"))
	}
	st.Pool = req.Pool
	next, res := addresspool.Reconciled(st, p.clock.Now(), req.AddressReconcile)
	if !req.DryRun {
		p.set(req.Pool, next)
	}
	return res, nil
}

// set makes st the state of pool, whose workflow runs. Its callers hold p.mu, or call it
// before any workflow runs.
func (p *addressPools) set(pool string, st addresspool.AddressPoolState) {
	if p.states == nil {
		p.states = map[string]addresspool.AddressPoolState{}
	}
	p.states[pool] = st
}

// state is the state of pool, and whether its workflow runs.
func (p *addressPools) state(pool string) (addresspool.AddressPoolState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, runs := p.states[pool]
	return st, runs
}

// terminate ends the workflow of pool, which forgets its allocations.
func (p *addressPools) terminate(pool string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.states, pool)
}

// seen are the requests, sorted: a delete's frees go out together, in no order.
func (p *addressPools) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(slices.Values(p.requests))
}

// withPools configures the pools egress and spare.
func withPools(w *world) *world {
	w.cfg.Proxmox.AddressPools = map[string]config.AddressPool{"egress": testPool(10), "spare": {IPv4: &config.AddressRange{Subnet: "198.51.100.0/24", First: "198.51.100.10", Last: "198.51.100.19"}}}
	return w
}

func TestCreateProxy_allocatesFromItsAddressPool(t *testing.T) {
	w := withPools(newWorld(t))
	in := createInput()
	in.AddressPool = "egress"

	res, err := w.create(in)

	require.NoError(t, err)
	assert.Equal(t, "egress", res.AddressPool)
	assert.Equal(t, []string{"allocate egress " + uid}, w.pools.seen())
	assert.Equal(t, "192.0.2.10", res.IPv4, "the pool's address, not DHCP's")
	assert.Equal(t, "2001:db8::10", res.IPv6)
	assert.Contains(t, seedNetworkConfig(t, w), `      - "192.0.2.10/24"`)
}

func TestCreateProxy_anUnknownAddressPoolFailsPermanentBeforeAnyVM(t *testing.T) {
	w := withPools(newWorld(t))
	in := createInput()
	in.AddressPool = "nope"

	_, err := w.create(in)

	require.Error(t, err)
	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), `address pool "nope" is not configured: proxmox.addressPools has egress, spare`)
	assert.Empty(t, w.vms())
	assert.Empty(t, w.pools.seen())
}

func TestCreateProxy_aFullAddressPoolFailsQuotaExceededBeforeAnyVM(t *testing.T) {
	w := withPools(newWorld(t))
	w.pools.full = true
	in := createInput()
	in.AddressPool = "egress"

	_, err := w.create(in)

	require.Error(t, err)
	assert.Equal(t, core.FailQuotaExceeded, failureType(t, err))
	assert.Contains(t, err.Error(), "address pool egress is full")
	assert.Empty(t, w.vms())
}

func TestCreateProxy_anAddressPoolWithStaticAddressesFailsPermanent(t *testing.T) {
	w := withPools(newWorld(t))
	in := createInput()
	in.AddressPool, in.Addresses = "egress", proxy.Addresses{IPv4: "192.0.2.5/24"}

	_, err := w.create(in)

	require.Error(t, err)
	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), `address pool "egress" and static addresses are both given: choose one`)
	assert.Empty(t, w.vms())
}

func TestDeleteProxy_freesTheProxysAddressesInEveryPool(t *testing.T) {
	w := withPools(newWorld(t))
	in := createInput()
	in.AddressPool = "egress"
	_, err := w.create(in)
	require.NoError(t, err)

	res, err := w.delete(deleteInput())

	require.NoError(t, err)
	require.Len(t, res.Destroyed, 1)
	assert.Equal(t, []string{"allocate egress " + uid, "free egress " + uid, "free spare " + uid}, w.pools.seen())
}

func TestDeleteProxy_freesTheAddressesOfAProxyWithoutAVM(t *testing.T) {
	w := withPools(newWorld(t))

	res, err := w.delete(deleteInput())

	require.NoError(t, err)
	assert.Empty(t, res.Destroyed)
	assert.Equal(t, []string{"free egress " + uid, "free spare " + uid}, w.pools.seen())
}

func TestDeleteProxy_thatBeginsARebuildKeepsTheAddresses(t *testing.T) {
	w := withPools(newWorld(t))
	in := deleteInput()
	in.KeepAddresses = true

	_, err := w.delete(in)

	require.NoError(t, err)
	assert.Empty(t, w.pools.seen())
}

func TestProxy_refusesACreateFromAnAddressPoolNotConfigured(t *testing.T) {
	p := newProxyEntity(t, withPools(newWorld(t)))
	in := createInput()
	in.AddressPool = "nope"
	p.request(0, core.CreateUpdate, "create", in)
	p.at(2*time.Second, func() { p.env.CancelWorkflow() })

	p.env.ExecuteWorkflow(core.ProxyName, proxyvm.ProxyInput{UID: uid})

	a := p.answer("create")
	require.Error(t, a.rejected)
	assert.Contains(t, a.rejected.Error(), `address pool "nope" is not configured`)
	assert.Empty(t, p.w.vms())
}

func TestProxy_aRebuildKeepsTheProxysAddresses(t *testing.T) {
	w := withPools(newWorld(t))
	require.NoError(t, w.cluster.AddVM(pvesim.Template(9002, "pve1", 2)))
	w.cfg.Proxmox.Templates["debian14"] = config.Template{VMID: 9002}
	p := newProxyEntity(t, w)
	in := createInput()
	in.AddressPool = "egress"
	p.request(0, core.CreateUpdate, "create", in)
	p.request(time.Hour, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, Image: "debian14"})
	p.request(3*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	assert.Equal(t, []string{"create:completed", "delete:completed", "create:completed", "delete:completed"}, kinds(st))
	assert.Equal(t, []string{"allocate egress " + uid, "allocate egress " + uid, "free egress " + uid, "free spare " + uid}, w.pools.seen(),
		"the rebuild's delete frees nothing; the proxy's delete frees in every pool")
}

func TestProxy_refusesAStaticAddressInsideAnAddressPoolsRange(t *testing.T) {
	p := newProxyEntity(t, withPools(newWorld(t)))
	in := createInput()
	in.Addresses = proxy.Addresses{IPv4: "192.0.2.12/24", Gateway4: "192.0.2.1"}
	p.request(0, core.CreateUpdate, "create", in)
	p.at(2*time.Second, func() { p.env.CancelWorkflow() })

	p.env.ExecuteWorkflow(core.ProxyName, proxyvm.ProxyInput{UID: uid})

	a := p.answer("create")
	require.Error(t, a.rejected)
	assert.Contains(t, a.rejected.Error(), "static address 192.0.2.12/24 is in the range of address pool egress")
	assert.Empty(t, p.w.vms())
}

func TestAddressPool_servesOnWhenCancelled(t *testing.T) {
	p := newPoolRun(t, testPool(2))
	p.allocate("a", "uid-a")
	p.next += time.Second
	p.env.RegisterDelayedCallback(p.env.CancelWorkflow, p.next)
	p.allocate("b", "uid-b")

	st := p.run(addresspool.AddressPoolState{Pool: "egress"})

	assert.NotEqual(t, p.addresses("a"), p.addresses("b"))
	assert.Len(t, st.Allocations, 2, "it carries its allocations on")
}
