package pve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// CallLimits cap the requests a Client sends to Proxmox. Every request counts, whatever it
// asks: a read, a write, a task poll, an upload.
type CallLimits struct {
	// PerSecond is the rate of a token bucket that holds a second's worth of tokens (burst
	// ceil(PerSecond), at least 1): a request is sent no sooner than its token is due, and the
	// tokens come at most burst + PerSecond*T in any span of T seconds, 1/PerSecond apart while
	// requests queue. The burst lets the calls a create or a delete makes back to back go at
	// once while the cluster's load stays below the rate: a bucket of one token spaced them
	// 1/PerSecond apart and cost one proxy alone 4% of its time. (A request sent late, its
	// goroutine woken late, may leave nearer the next one than that.) Zero means no rate limit.
	PerSecond float64
	// Concurrency is how many requests may be in flight at once, from sending one to having
	// read its whole answer. Zero means no limit.
	Concurrency int
}

// Validate reports limits that cannot be applied: a negative, infinite or NaN rate, or a
// negative concurrency.
func (l CallLimits) Validate() error {
	if l.PerSecond < 0 || math.IsInf(l.PerSecond, 0) || math.IsNaN(l.PerSecond) {
		return fmt.Errorf("calls per second %v: want a finite number >= 0 (0: no limit)", l.PerSecond)
	}
	if l.Concurrency < 0 {
		return fmt.Errorf("concurrent calls %d: want >= 0 (0: no limit)", l.Concurrency)
	}
	return nil
}

// burst is how many tokens the rate's bucket holds: a second's worth, at least one.
func (l CallLimits) burst() int { return max(1, int(math.Ceil(l.PerSecond))) }

// limiter applies CallLimits. The zero limiter, or one of zero limits, lets every call through.
type limiter struct {
	rate  *rate.Limiter // nil: no rate limit
	slots chan struct{} // nil: no concurrency limit; a call holds one element while in flight
}

func newLimiter(l CallLimits) *limiter {
	lim := &limiter{}
	if l.PerSecond > 0 {
		lim.rate = rate.NewLimiter(rate.Limit(l.PerSecond), l.burst())
	}
	if l.Concurrency > 0 {
		lim.slots = make(chan struct{}, l.Concurrency)
	}
	return lim
}

// errLimiterWait is what acquire returns when ctx ends before the call may be sent.
var errLimiterWait = errors.New("waiting for the proxmox call limit")

// acquire waits until a call may be sent: first for a slot, then for a token, so that calls
// that waited long for a slot still leave no sooner than their tokens allow. It returns the
// func that frees the slot once the call's answer is read, how long the call was held back (0
// when it went at once, never 0 when it waited) and, if ctx ended first, an error wrapping
// ctx's.
func (l *limiter) acquire(ctx context.Context) (release func(), held time.Duration, err error) {
	start := time.Now()
	waited := false
	release = func() {}
	if l.slots != nil {
		select {
		case l.slots <- struct{}{}:
		default:
			waited = true
			select {
			case l.slots <- struct{}{}:
			case <-ctx.Done():
				return nil, time.Since(start), fmt.Errorf("%w: %w", errLimiterWait, context.Cause(ctx))
			}
		}
		release = func() { <-l.slots }
	}
	if l.rate != nil {
		r := l.rate.Reserve() // a burst of at least 1 and one token per call: always possible
		if delay := r.Delay(); delay > 0 {
			waited = true
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				r.Cancel() // hand the token back to the calls behind this one
				release()
				return nil, time.Since(start), fmt.Errorf("%w: %w", errLimiterWait, context.Cause(ctx))
			}
		}
	}
	if !waited {
		return release, 0, nil
	}
	return release, max(time.Since(start), time.Nanosecond), nil
}
