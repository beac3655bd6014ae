package callshares_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/callshares"
)

var (
	testCap    = config.Calls{PerSecond: 20, Concurrency: 3}
	shareLease = 20 * time.Second
	shareDrain = 30 * time.Second
	shareStart = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
)

// renewal is worker's renewal, applying using, with the test's cap, lease and drain.
func renewal(worker string, using callshares.CallShareGrant) callshares.CallShareRequest {
	return callshares.CallShareRequest{Worker: worker, Cap: testCap, Using: using, Lease: shareLease, Drain: shareDrain}
}

func TestCallShares_oneWorkerIsGivenTheWholeCap(t *testing.T) {
	var st callshares.CallSharesState
	g := callshares.RenewCallShareAt(&st, renewal("a", callshares.CallShareGrant{}), shareStart)

	assert.Equal(t, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 20, Burst: 20, Concurrency: 3}, Fair: true, Workers: 1}, g)
}

// A worker that joins is given what the others leave of its fair part, none while they hold
// the whole cap; they shrink at their renewals, and it has its fair part once they have said
// they apply the smaller share.
func TestCallShares_aNewWorkerIsGivenWhatTheOthersLeaveThenItsFairPart(t *testing.T) {
	var st callshares.CallSharesState
	now := shareStart
	a := callshares.RenewCallShareAt(&st, renewal("a", callshares.CallShareGrant{}), now)

	now = now.Add(time.Second)
	b := callshares.RenewCallShareAt(&st, renewal("b", callshares.CallShareGrant{}), now)
	assert.Equal(t, callshares.CallShareGrant{Workers: 2}, b, "a holds the whole cap")

	now = now.Add(time.Second)
	a = callshares.RenewCallShareAt(&st, renewal("a", a), now)
	assert.Equal(t, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 10, Burst: 10, Concurrency: 2}, Fair: true, Workers: 2}, a,
		"a, the first, takes the remainder of the slots")
	now = now.Add(time.Second)
	b = callshares.RenewCallShareAt(&st, renewal("b", b), now)
	assert.Equal(t, callshares.CallShareGrant{Workers: 2}, b, "until a says it applies the smaller share, it counts for the whole")

	now = now.Add(time.Second)
	callshares.RenewCallShareAt(&st, renewal("a", a), now) // a says it applies its half
	now = now.Add(time.Second)
	b = callshares.RenewCallShareAt(&st, renewal("b", b), now)
	assert.Equal(t, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 10, Burst: 10, Concurrency: 1}, Fair: true, Workers: 2}, b)
}

// A worker that stops renewing counts for its rate until its lease ends, and for its calls in
// flight until they can have ended, a drain later; then the others grow into its share.
func TestCallShares_aWorkerThatStopsRenewingGivesItsShareBackWhenItsLeaseAndItsCallsEnd(t *testing.T) {
	var st callshares.CallSharesState
	now := shareStart
	a := callshares.RenewCallShareAt(&st, renewal("a", callshares.CallShareGrant{}), now)
	b := callshares.RenewCallShareAt(&st, renewal("b", callshares.CallShareGrant{}), now)
	a = callshares.RenewCallShareAt(&st, renewal("a", a), now)
	b = callshares.RenewCallShareAt(&st, renewal("b", b), now)
	a = callshares.RenewCallShareAt(&st, renewal("a", a), now)
	b = callshares.RenewCallShareAt(&st, renewal("b", b), now)
	require.Equal(t, 10.0, b.PerSecond)
	dies := now // b's last renewal

	tests := []struct {
		after time.Duration
		want  callshares.CallShareGrant
	}{
		{shareLease - time.Second, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 10, Burst: 10, Concurrency: 2}, Fair: true, Workers: 2}},
		{shareLease, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 20, Burst: 20, Concurrency: 2}, Workers: 1}},
		{shareLease + shareDrain - time.Second, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 20, Burst: 20, Concurrency: 2}, Workers: 1}},
		{shareLease + shareDrain, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 20, Burst: 20, Concurrency: 3}, Fair: true, Workers: 1}},
	}
	for _, tt := range tests {
		a = callshares.RenewCallShareAt(&st, renewal("a", a), dies.Add(tt.after))
		assert.Equal(t, tt.want, a, "a's renewal %s after b's last", tt.after)
	}
	assert.Len(t, st.Workers, 1, "b is forgotten once it counts for nothing")
}

// A worker started again after its predecessor on the host exited (worker.claimSlot) says whom
// it replaces: the predecessor's lease ends then, so its rate is free at once; its calls in
// flight when it died count until they can have ended.
func TestCallShares_aWorkerThatReplacesAnExitedOneHasItsRateAtOnceAndItsSlotsWhenItsCallsEnd(t *testing.T) {
	var st callshares.CallSharesState
	now := shareStart
	a := callshares.RenewCallShareAt(&st, renewal("a", callshares.CallShareGrant{}), now)
	a = callshares.RenewCallShareAt(&st, renewal("a", a), now)
	require.Equal(t, 3, a.Concurrency)

	now = now.Add(2 * time.Second) // a is killed, and a2 starts in its place
	replacing := renewal("a2", callshares.CallShareGrant{})
	replacing.Replaces = "a"
	a2 := callshares.RenewCallShareAt(&st, replacing, now)
	assert.Equal(t, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 20, Burst: 20}, Workers: 1}, a2,
		"a's rate is free, its slots are not: its last calls may still run")

	a2 = callshares.RenewCallShareAt(&st, replacing, now.Add(shareDrain-time.Second))
	assert.Equal(t, 0, a2.Concurrency, "a renewal that says it again does not lengthen a's drain")
	a2 = callshares.RenewCallShareAt(&st, renewal("a2", a2), now.Add(shareDrain))
	assert.Equal(t, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 20, Burst: 20, Concurrency: 3}, Fair: true, Workers: 1}, a2)
}

// When the successor knows from its slot how many calls its predecessor had in flight, only
// those hold slots until they can have ended.
func TestCallShares_aReplacedWorkersCallsInFlightAloneHoldItsSlots(t *testing.T) {
	var st callshares.CallSharesState
	now := shareStart
	a := callshares.RenewCallShareAt(&st, renewal("a", callshares.CallShareGrant{}), now)
	callshares.RenewCallShareAt(&st, renewal("a", a), now)

	now = now.Add(2 * time.Second)
	one := 1
	replacing := renewal("a2", callshares.CallShareGrant{})
	replacing.Replaces, replacing.ReplacedCalls = "a", &one
	a2 := callshares.RenewCallShareAt(&st, replacing, now)
	assert.Equal(t, 2, a2.Concurrency, "a's one call in flight holds one slot")
	a2 = callshares.RenewCallShareAt(&st, renewal("a2", a2), now.Add(shareDrain))
	assert.Equal(t, 3, a2.Concurrency)
}

func TestCallShares_aCapWithoutARateOrSlotsGivesNoLimitOfThem(t *testing.T) {
	tests := []struct {
		name string
		cap  config.Calls
		want callshares.CallShareGrant
	}{
		{"no rate", config.Calls{Concurrency: 4}, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: pve.NoLimit, Burst: pve.NoLimit, Concurrency: 2}, Fair: true, Workers: 2}},
		{"no concurrency", config.Calls{PerSecond: 5}, callshares.CallShareGrant{CallShare: pve.CallShare{PerSecond: 2.5, Burst: 2, Concurrency: pve.NoLimit}, Fair: true, Workers: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st callshares.CallSharesState
			req := func(worker string, using callshares.CallShareGrant) callshares.CallShareRequest {
				r := renewal(worker, using)
				r.Cap = tt.cap
				return r
			}
			// a holds the cap, b joins, a shrinks and says so, b renews.
			a := callshares.RenewCallShareAt(&st, req("a", callshares.CallShareGrant{}), shareStart)
			b := callshares.RenewCallShareAt(&st, req("b", callshares.CallShareGrant{}), shareStart)
			a = callshares.RenewCallShareAt(&st, req("a", a), shareStart)
			callshares.RenewCallShareAt(&st, req("a", a), shareStart)
			b = callshares.RenewCallShareAt(&st, req("b", b), shareStart)
			assert.Equal(t, tt.want, b)
		})
	}
}

func TestCallShares_moreWorkersThanSlotsLeaveTheLastWithoutASlot(t *testing.T) {
	var st callshares.CallSharesState
	workers := []string{"a", "b", "c", "d"}
	given := map[string]callshares.CallShareGrant{}
	for range 3 { // each says what it applies, twice
		for _, w := range workers {
			given[w] = callshares.RenewCallShareAt(&st, renewal(w, given[w]), shareStart)
		}
	}
	for _, w := range workers[:3] {
		assert.Equal(t, 1, given[w].Concurrency, "worker %s", w)
	}
	assert.Zero(t, given["d"].Concurrency)
	assert.True(t, given["d"].Fair, "its fair part of three slots among four")
}

// shareWorker is a worker process in the model of TestCallShares_theSharesNeverAddUpToMoreThanTheCap.
type shareWorker struct {
	name    string
	alive   bool
	applied callshares.CallShareGrant
	lapse   time.Time   // of applied, by the worker's clock: its renewal's sending plus the lease
	calls   []time.Time // when each call in flight ends
	// reply is the answer of a renewal on its way back, and replyAt when it arrives; the
	// worker renews again only once it has arrived or was lost.
	reply    *callshares.CallShareGrant
	replyAt  time.Time
	replyEnd time.Time // the lapse the reply's share will have
	nextAt   time.Time
	replaces string // the killed worker it was started in place of
	// replacedCalls is how many calls that worker had in flight when it died, if it knows.
	replacedCalls *int
}

// The shares never add up to more than the cap, whatever the order of renewals, their answers
// late or lost, workers dying and joining, and shares shrinking under calls in flight: in a
// model of workers that apply their shares as the worker does (starter.KeepCallShare), a
// second at a time, the calls in flight, the rates and the buckets of the shares applied stay
// within the cap at every step.
func TestCallShares_theSharesNeverAddUpToMoreThanTheCap(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var st callshares.CallSharesState
		var workers []*shareWorker
		joined := 0
		join := func(now time.Time) {
			workers = append(workers, &shareWorker{name: string(rune('a' + joined)), alive: true, nextAt: now})
			joined++
		}
		join(shareStart)
		for step := range 300 {
			now := shareStart.Add(time.Duration(step) * time.Second)
			switch r := rng.IntN(100); {
			case r < 3 && joined < 26:
				join(now)
			case r < 5:
				if w := workers[rng.IntN(len(workers))]; w.alive && len(workers) > 1 {
					w.alive = false
					if rng.IntN(2) == 0 && joined < 26 { // started again at once, in its place
						join(now)
						successor := workers[len(workers)-1]
						successor.replaces = w.name
						if rng.IntN(2) == 0 { // its slot says how many calls w had in flight
							successor.replacedCalls = new(len(w.calls))
						}
					}
				}
			}
			for _, w := range workers {
				w.calls = slices.DeleteFunc(w.calls, func(end time.Time) bool { return !end.After(now) })
				if !w.alive {
					continue
				}
				if w.reply != nil && !w.replyAt.After(now) {
					w.applied, w.lapse, w.reply = *w.reply, w.replyEnd, nil
				}
				if w.reply == nil && !w.nextAt.After(now) {
					using := w.applied
					using.Concurrency = max(using.Concurrency, len(w.calls))
					req := renewal(w.name, using)
					if w.lapse.IsZero() {
						req.Replaces, req.ReplacedCalls = w.replaces, w.replacedCalls // until its first share
					}
					g := callshares.RenewCallShareAt(&st, req, now)
					if rng.IntN(10) > 0 { // one answer in ten is lost
						w.reply, w.replyAt, w.replyEnd = &g, now.Add(time.Duration(rng.IntN(3))*time.Second), now.Add(shareLease)
					}
					w.nextAt = now.Add(time.Duration(1+rng.IntN(6)) * time.Second)
				}
				if now.Before(w.lapse) {
					for range rng.IntN(3) {
						if len(w.calls) < w.applied.Concurrency {
							w.calls = append(w.calls, now.Add(time.Duration(1+rng.IntN(int(shareDrain/time.Second)))*time.Second))
						}
					}
				}
			}
			calls, burst, rate := 0, 0, 0.0
			for _, w := range workers {
				calls += len(w.calls)
				if w.alive && now.Before(w.lapse) {
					burst += w.applied.Burst
					rate += w.applied.PerSecond
				}
			}
			require.LessOrEqual(t, calls, testCap.Concurrency, "seed %d, step %d: calls in flight", seed, step)
			require.LessOrEqual(t, burst, 20, "seed %d, step %d: tokens the buckets hold", seed, step)
			require.LessOrEqual(t, rate, testCap.PerSecond+1e-9, "seed %d, step %d: rate", seed, step)
		}
	}
}

func TestCallShares_refusesARenewalThatNamesNoWorkerOrLease(t *testing.T) {
	tests := []struct {
		name string
		req  callshares.CallShareRequest
	}{
		{"no worker", renewal("", callshares.CallShareGrant{})},
		{"no lease", callshares.CallShareRequest{Worker: "a", Cap: testCap}},
		{"a negative cap", callshares.CallShareRequest{Worker: "a", Cap: config.Calls{PerSecond: -1}, Lease: shareLease}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv()
			var rejected error
			env.RegisterDelayedCallback(func() {
				env.UpdateWorkflow(callshares.RenewCallShareUpdate, "r", &testsuite.TestUpdateCallback{
					OnAccept:   func() {},
					OnReject:   func(err error) { rejected = err },
					OnComplete: func(any, error) {},
				}, tt.req)
			}, time.Second)
			env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 2*time.Second)
			env.ExecuteWorkflow(callshares.CallSharesName, callshares.CallSharesState{})
			assert.Error(t, rejected)
		})
	}
}

func TestCallShares_continuesAsNewWithItsShares(t *testing.T) {
	env := newEnv()
	given := map[string]callshares.CallShareGrant{}
	for i, w := range []string{"a", "b"} {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(callshares.RenewCallShareUpdate, w, &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(err error) { t.Error(err) },
				OnComplete: func(res any, err error) {
					require.NoError(t, err)
					given[w] = res.(callshares.CallShareGrant)
				},
			}, renewal(w, callshares.CallShareGrant{}))
		}, time.Duration(i+1)*time.Second)
	}
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 3*time.Second)

	env.ExecuteWorkflow(callshares.CallSharesName, callshares.CallSharesState{})

	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	var next callshares.CallSharesState
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	assert.Equal(t, 20.0, given["a"].PerSecond)
	assert.Equal(t, testCap, next.Cap)
	require.Len(t, next.Workers, 2)
	for i, w := range []string{"a", "b"} {
		assert.Equal(t, w, next.Workers[i].Worker)
		assert.Equal(t, given[w], next.Workers[i].Given, "the next run knows %s's share", w)
	}
}

// newEnv is a test environment with the CallShares workflow registered under its name.
func newEnv() *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions((&callshares.Workflows{}).CallShares, workflow.RegisterOptions{Name: callshares.CallSharesName})
	return env
}
