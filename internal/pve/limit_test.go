package pve

import (
	"context"
	"errors"
	"math"
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
	assert.Equal(t, 1, CallLimits{PerSecond: 0.5}.burst())
	assert.Equal(t, 3, CallLimits{PerSecond: 2.5}.burst())
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
				assert.Len(t, l.slots, 1, "the cancelled call took no slot")
			}
		})
	}
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
