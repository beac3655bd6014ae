package pve

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLimiter_zeroLimitsSendEveryCallAtOnce(t *testing.T) {
	l := newLimiter(CallLimits{})
	for range 100 {
		release, held, err := l.acquire(t.Context())
		require.NoError(t, err)
		assert.Zero(t, held)
		defer release()
	}
}

// A second's worth of calls goes at once, and the tokens of the next ones come 1/PerSecond
// apart, so k calls beyond the burst take at least k/PerSecond however late each wakes.
func TestLimiter_rateLetsASecondsWorthGoThenOneCallPerOneOverTheRate(t *testing.T) {
	const perSecond, calls = 20, 24
	l := newLimiter(CallLimits{PerSecond: perSecond})
	start := time.Now()
	var held []time.Duration
	for range calls {
		release, h, err := l.acquire(t.Context())
		require.NoError(t, err)
		release()
		held = append(held, h)
	}

	assert.GreaterOrEqual(t, time.Since(start), (calls-perSecond)*time.Second/perSecond)
	for i := range perSecond {
		assert.Zero(t, held[i], "call %d finds a token of the burst", i)
	}
	assert.Positive(t, held[perSecond], "the call after the burst waits for its token")
}

func TestLimiter_aRateBelowOneHoldsOneToken(t *testing.T) {
	assert.Equal(t, 1, CallLimits{PerSecond: 0.5}.Burst())
	assert.Equal(t, 3, CallLimits{PerSecond: 2.5}.Burst())
}

func TestLimiter_concurrencyHoldsACallUntilOneEnds(t *testing.T) {
	l := newLimiter(CallLimits{Concurrency: 2})
	r1, _, err := l.acquire(t.Context())
	require.NoError(t, err)
	r2, _, err := l.acquire(t.Context())
	require.NoError(t, err)
	defer r2()

	got := make(chan time.Duration)
	go func() {
		r3, held, err := l.acquire(t.Context())
		assert.NoError(t, err)
		r3()
		got <- held
	}()
	select {
	case <-got:
		t.Fatal("a third call went while two were in flight")
	case <-time.After(50 * time.Millisecond):
	}
	r1()
	// Only "it waited" is certain: the goroutine may begin its acquire well after the 50 ms
	// above began, so no lower bound on the wait holds.
	assert.Positive(t, <-got, "a held call reports that it was held")
}

// The calls in flight are told before a call goes and after it ends, queued or not, so that what
// was told last is never fewer than the calls that may be in flight (a worker's slot records it).
func TestClient_tellsTheCallsInFlightBeforeACallGoesAndAfterItEnds(t *testing.T) {
	c := &Client{limit: newLimiter(CallLimits{Concurrency: 1})}
	var told []int
	c.TellCallsInFlight(func(n int) { told = append(told, n) })
	r1, _, err := c.limit.acquire(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []int{1}, told)

	queued := make(chan func())
	go func() {
		r2, _, err := c.limit.acquire(t.Context())
		assert.NoError(t, err)
		queued <- r2
	}()
	require.Eventually(t, func() bool {
		c.limit.mu.Lock()
		defer c.limit.mu.Unlock()
		return len(c.limit.queue) == 1
	}, time.Second, time.Millisecond)
	r1()
	r2 := <-queued
	r2()
	c.limit.mu.Lock()
	defer c.limit.mu.Unlock()
	assert.Equal(t, []int{1, 0, 1, 0}, told)
}

func TestLimiter_waitEndsWithTheContextAndGivesUpItsPlace(t *testing.T) {
	tests := []struct {
		name   string
		limits CallLimits
	}{
		{"waiting for a slot", CallLimits{Concurrency: 1}},
		{"waiting for a token", CallLimits{PerSecond: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLimiter(tt.limits)
			release, _, err := l.acquire(t.Context())
			require.NoError(t, err)
			release()
			if tt.limits.Concurrency > 0 {
				// Hold the only slot.
				release, _, err = l.acquire(t.Context())
				require.NoError(t, err)
				defer release()
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
			defer cancel()

			_, held, err := l.acquire(ctx)

			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.True(t, errors.Is(err, errLimiterWait))
			assert.Equal(t, Transient, Classify(err))
			assert.Positive(t, held)
			if tt.limits.Concurrency > 0 {
				assert.Equal(t, 1, l.inFlight, "the cancelled call took no slot")
				assert.Empty(t, l.queue, "nor kept its place")
			}
		})
	}
}

// waitFor starts a call of priority p on l in a goroutine; its channel gets the call's error
// once it is sent (nil) or given up, and the call's slot is freed at once.
func waitFor(ctx context.Context, l *limiter, p Priority) <-chan error {
	done := make(chan error, 1)
	go func() {
		release, _, err := l.acquire(WithPriority(ctx, p))
		if err == nil {
			release()
		}
		done <- err
	}()
	return done
}

// queued waits until n calls wait in l's queue.
func queued(t *testing.T, l *limiter, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue) == n
	}, 5*time.Second, time.Millisecond)
}

func TestLimiter_aCallOfDefaultPriorityGoesBeforeEveryCareCallThatWaits(t *testing.T) {
	l := newLimiter(CallLimits{Concurrency: 1})
	hold, _, err := l.acquire(t.Context())
	require.NoError(t, err)
	sent := make(chan Priority, 21)
	call := func(p Priority) {
		release, _, err := l.acquire(WithPriority(t.Context(), p))
		if assert.NoError(t, err) {
			sent <- p
			release()
		}
	}
	for i := range 20 {
		go call(PriorityCare)
		queued(t, l, i+1)
	}
	go call(PriorityDefault)
	queued(t, l, 21)

	hold()

	assert.Equal(t, PriorityDefault, <-sent, "the call that came last, of default priority, goes first")
	for range 20 {
		assert.Equal(t, PriorityCare, <-sent, "then every care call")
	}
}

// A clone slot's call goes before the waiting calls of operations started before its own: the
// slot stands free until it is sent.
func TestLimiter_aSlotsCallGoesBeforeTheCallsOfEarlierOperations(t *testing.T) {
	l := newLimiter(CallLimits{Concurrency: 1})
	hold, _, err := l.acquire(t.Context())
	require.NoError(t, err)
	sent := make(chan Priority, 11)
	call := func(p Priority, started time.Time) {
		release, _, err := l.acquire(WithOrder(WithPriority(t.Context(), p), started))
		if assert.NoError(t, err) {
			sent <- p
			release()
		}
	}
	earlier := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	for i := range 10 {
		go call(PriorityDefault, earlier)
		queued(t, l, i+1)
	}
	go call(PrioritySlot, earlier.Add(time.Minute))
	queued(t, l, 11)

	hold()

	assert.Equal(t, PrioritySlot, <-sent, "the slot's call, of the latest operation, goes first")
	for range 10 {
		assert.Equal(t, PriorityDefault, <-sent)
	}
}

// Among waiting calls of one priority, a call of an operation started earlier goes before the
// calls of later ones that came before it: the first create's clone before the other creates'
// checks.
func TestLimiter_callsOfAnEarlierOperationGoBeforeThoseOfLaterOnes(t *testing.T) {
	l := newLimiter(CallLimits{Concurrency: 1})
	hold, _, err := l.acquire(t.Context())
	require.NoError(t, err)
	started := time.Now().Add(-time.Minute)
	order := make(chan string, 3)
	for i, call := range []struct {
		name string
		ctx  context.Context
	}{
		{"a later operation's", WithOrder(t.Context(), started.Add(time.Second))},
		{"a call of no operation", t.Context()},
		{"the first operation's", WithOrder(t.Context(), started)},
	} {
		go func() {
			release, _, err := l.acquire(call.ctx)
			if assert.NoError(t, err) {
				order <- call.name
				release()
			}
		}()
		queued(t, l, i+1)
	}

	hold()

	assert.Equal(t, "the first operation's", <-order)
	assert.Equal(t, "a later operation's", <-order)
	assert.Equal(t, "a call of no operation", <-order, "counts as come when it came, after both operations started")
}

func TestLimiter_callsOfOnePriorityGoInTheOrderTheyCame(t *testing.T) {
	l := newLimiter(CallLimits{Concurrency: 1})
	hold, _, err := l.acquire(t.Context())
	require.NoError(t, err)
	order := make(chan int, 10)
	for i := range 10 {
		go func() {
			release, _, err := l.acquire(WithPriority(t.Context(), PriorityCare))
			if assert.NoError(t, err) {
				order <- i
				release()
			}
		}()
		queued(t, l, i+1)
	}

	hold()

	for i := range 10 {
		assert.Equal(t, i, <-order)
	}
}

func TestLimiter_aCallWhoseDeadlineIsTooNearAtItsTurnIsDroppedNotSent(t *testing.T) {
	l := newLimiter(CallLimits{Concurrency: 1})
	// Calls take 200 ms.
	release, _, err := l.acquire(t.Context())
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	release()
	hold, _, err := l.acquire(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	late := waitFor(ctx, l, PriorityDefault)
	behind := waitFor(t.Context(), l, PriorityDefault)
	queued(t, l, 2)
	time.Sleep(150 * time.Millisecond) // 150 ms left of 300: less than a call takes

	hold()

	err = <-late
	require.ErrorIs(t, err, errLimiterDropped)
	assert.Equal(t, Transient, Classify(err), "a dropped call is tried again")
	assert.NoError(t, <-behind, "the call behind it has its turn")
}

func TestLimiter_careCallsWaitForTokensBehindDefaultOnes(t *testing.T) {
	const perSecond = 20
	l := newLimiter(CallLimits{PerSecond: perSecond})
	for range perSecond { // spend the burst
		release, _, err := l.acquire(t.Context())
		require.NoError(t, err)
		release()
	}
	var care []<-chan error
	for i := range 40 { // two seconds of tokens
		care = append(care, waitFor(t.Context(), l, PriorityCare))
		queued(t, l, i+1)
	}
	start := time.Now()

	require.NoError(t, <-waitFor(t.Context(), l, PriorityDefault))

	assert.Less(t, time.Since(start), time.Second, "the default call takes the next token, not the 41st")
	for _, c := range care {
		assert.NoError(t, <-c)
	}
}

func TestLimiter_careCallsNeverTakeTheLastSlot(t *testing.T) {
	l := newLimiter(CallLimits{Concurrency: 2})
	care, _, err := l.acquire(WithPriority(t.Context(), PriorityCare))
	require.NoError(t, err)
	defer care()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()

	_, _, err = l.acquire(WithPriority(ctx, PriorityCare))
	require.ErrorIs(t, err, errLimiterWait, "a second care call waits: one slot is left to the others")

	op, held, err := l.acquire(t.Context())
	require.NoError(t, err)
	op()
	assert.Less(t, held, 20*time.Millisecond, "a default call takes the slot the care calls leave")
}

func TestLimiter_careCallsLeaveHalfTheBucketToDefaultOnes(t *testing.T) {
	const perSecond = 10
	l := newLimiter(CallLimits{PerSecond: perSecond})
	stop := make(chan struct{})
	var cares sync.WaitGroup
	for range 4 { // more care calls than the rate lets through
		cares.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				release, _, err := l.acquire(WithPriority(t.Context(), PriorityCare))
				if err == nil {
					release()
				}
			}
		})
	}
	time.Sleep(time.Second) // the care calls drain the bucket to their headroom
	start := time.Now()
	for range perSecond / 2 {
		release, _, err := l.acquire(t.Context())
		require.NoError(t, err)
		release()
	}
	took := time.Since(start)
	close(stop)
	cares.Wait()

	assert.Less(t, took, 100*time.Millisecond, "half a second's worth of default calls goes at once, not one per token")
}

func TestPriorityOf_isDefaultWithoutOne(t *testing.T) {
	assert.Equal(t, PriorityDefault, PriorityOf(context.Background()))
	assert.Equal(t, PriorityCare, PriorityOf(WithPriority(context.Background(), PriorityCare)))
}

func TestCallLimits_validate(t *testing.T) {
	tests := []struct {
		limits CallLimits
		ok     bool
	}{
		{CallLimits{}, true},
		{CallLimits{PerSecond: 0.5, Concurrency: 3}, true},
		{CallLimits{PerSecond: -1}, false},
		{CallLimits{PerSecond: math.Inf(1)}, false},
		{CallLimits{PerSecond: math.NaN()}, false},
		{CallLimits{Concurrency: -1}, false},
	}
	for _, tt := range tests {
		err := tt.limits.Validate()
		if tt.ok {
			assert.NoError(t, err, "%+v", tt.limits)
		} else {
			assert.Error(t, err, "%+v", tt.limits)
		}
	}
}

// tryAcquire is whether a call of l goes within d; one that goes frees its slot at once.
func tryAcquire(t *testing.T, l *limiter, d time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	release, _, err := l.acquire(ctx)
	if err != nil {
		require.True(t, errors.Is(err, errLimiterWait) || errors.Is(err, errNoShare), "%v", err)
		return false
	}
	release()
	return true
}

func TestLimiter_aSharedClientSendsNothingBeforeItsFirstShare(t *testing.T) {
	l := newSharedLimiter()
	assert.False(t, tryAcquire(t, l, 30*time.Millisecond))

	got := waitFor(t.Context(), l, PriorityDefault)
	l.setShare(CallShare{PerSecond: NoLimit, Burst: NoLimit, Concurrency: 1}, time.Now().Add(time.Minute))

	select {
	case err := <-got:
		require.NoError(t, err, "the waiting call goes once the share comes")
	case <-time.After(time.Second):
		t.Fatal("the waiting call did not go when the share came")
	}
}

func TestLimiter_aLapsedShareSendsNothingUntilTheNext(t *testing.T) {
	l := newSharedLimiter()
	l.setShare(CallShare{PerSecond: NoLimit, Burst: NoLimit, Concurrency: NoLimit}, time.Now().Add(50*time.Millisecond))
	require.True(t, tryAcquire(t, l, 10*time.Millisecond))
	time.Sleep(60 * time.Millisecond)

	assert.False(t, tryAcquire(t, l, 30*time.Millisecond), "a call after the lapse")
	l.setShare(CallShare{PerSecond: NoLimit, Burst: NoLimit, Concurrency: NoLimit}, time.Now().Add(time.Minute))
	assert.True(t, tryAcquire(t, l, 30*time.Millisecond), "a call once renewed")
}

func TestLimiter_aShareOfNoneSendsNothing(t *testing.T) {
	tests := []struct {
		name  string
		share CallShare
	}{
		{"no slot", CallShare{PerSecond: NoLimit, Burst: NoLimit, Concurrency: 0}},
		{"no rate", CallShare{PerSecond: 0, Burst: 1, Concurrency: NoLimit}},
		{"no bucket", CallShare{PerSecond: 10, Burst: 0, Concurrency: NoLimit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newSharedLimiter()
			l.setShare(tt.share, time.Now().Add(time.Minute))
			assert.False(t, tryAcquire(t, l, 50*time.Millisecond))
		})
	}
}

// A share that shrinks below the calls in flight sends the next call only once enough of them
// have ended: the shares of the other workers count on it.
func TestLimiter_aShrunkShareWaitsForTheCallsInFlight(t *testing.T) {
	l := newSharedLimiter()
	until := time.Now().Add(time.Minute)
	l.setShare(CallShare{PerSecond: NoLimit, Burst: NoLimit, Concurrency: 2}, until)
	r1, _, err := l.acquire(t.Context())
	require.NoError(t, err)
	r2, _, err := l.acquire(t.Context())
	require.NoError(t, err)

	l.setShare(CallShare{PerSecond: NoLimit, Burst: NoLimit, Concurrency: 1}, until)
	r1()
	assert.False(t, tryAcquire(t, l, 30*time.Millisecond), "one call in flight, a share of one")
	assert.Equal(t, 1, l.calls())
	r2()
	assert.True(t, tryAcquire(t, l, 30*time.Millisecond))
}

// A share's bucket keeps no more tokens than its new burst, and fills at its new rate.
func TestLimiter_aShrunkShareKeepsNoMoreTokensThanItsBurst(t *testing.T) {
	l := newSharedLimiter()
	until := time.Now().Add(time.Minute)
	l.setShare(CallShare{PerSecond: 1000, Burst: 10, Concurrency: NoLimit}, until)
	time.Sleep(20 * time.Millisecond) // the bucket fills
	l.setShare(CallShare{PerSecond: 0.5, Burst: 2, Concurrency: NoLimit}, until)

	assert.True(t, tryAcquire(t, l, 10*time.Millisecond))
	assert.True(t, tryAcquire(t, l, 10*time.Millisecond))
	assert.False(t, tryAcquire(t, l, 30*time.Millisecond), "the third call finds the bucket empty")
}

// A call of a worker that has no share gives up after noShareWait, for a worker with one to make
// it, rather than waiting until its deadline.
func TestLimiter_aCallWithoutAShareFailsSoonForAnotherWorkerToMakeIt(t *testing.T) {
	l := newSharedLimiter()
	start := time.Now()
	_, _, err := l.acquire(t.Context())

	require.ErrorIs(t, err, errNoShare)
	assert.Equal(t, Transient, Classify(err))
	assert.GreaterOrEqual(t, time.Since(start), noShareWait)
}

func TestLimiter_aCareCallWithoutAShareWaitsForOneUntilItsDeadline(t *testing.T) {
	l := newSharedLimiter()
	got := waitFor(t.Context(), l, PriorityCare)
	select {
	case err := <-got:
		t.Fatalf("the care call gave up at once: %v", err)
	case <-time.After(noShareWait + 200*time.Millisecond):
	}
	l.setShare(CallShare{PerSecond: NoLimit, Burst: NoLimit, Concurrency: 2}, time.Now().Add(time.Minute))
	require.NoError(t, <-got, "it goes once a share comes")
}
