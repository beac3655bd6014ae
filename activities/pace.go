package activities

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/pveflow/pveflow/internal/config"
)

// RecentWaits is how many waits of a kind an expectation is drawn from: their median, so that
// a wait or two slowed down (a worker lost, a busy storage) do not move it.
const RecentWaits = 5

// Remember is recent, the durations of the last waits of a kind, oldest first, with took added
// and the oldest dropped past RecentWaits.
func Remember(recent []time.Duration, took time.Duration) []time.Duration {
	recent = append(recent, took)
	return recent[max(len(recent)-RecentWaits, 0):]
}

// ExpectedWait is how long a wait is expected to last from recent, the durations of the last
// waits of its kind as they saw them (TaskResult.Waited): their median, the lower of the two
// middle ones of an even count (a look too early costs a look, one too late the time between
// the end and the look), zero of none. Drawn from what the waits saw rather than what the
// tasks took, it cannot drift later: a wait expecting E looks from nine tenths of E, so one whose
// task ended sooner sees it sooner and brings the next expectation down.
func ExpectedWait(recent []time.Duration) time.Duration {
	if len(recent) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(recent))
	return sorted[(len(sorted)-1)/2]
}

// taskPaces is how long the tasks of each type on each node took, as this worker's waits saw
// them. A wait that its workflow gives no expectation (every task's but a clone's under
// admission, whose expectation the admission keeps for every worker) expects what the last ones
// of its kind took, so that its looks gather around the task's end: without one, a resize of
// 20 ms is seen at the next look, a second later with the default poll, and a create waits for
// five such tasks in a row.
type taskPaces struct {
	mu     sync.Mutex
	recent map[taskKind][]time.Duration
}

// taskKind is a task's type and node.
type taskKind struct{ typ, node string }

// paced is p with its expectation, if it has none, from the last tasks of kind; nil without p.
func (t *taskPaces) paced(p *Pace, kind taskKind) *Pace {
	if p == nil || p.Expected > 0 {
		return p
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	expected := *p
	expected.Expected = ExpectedWait(t.recent[kind])
	return &expected
}

// saw records that a wait saw a task of kind end after took.
func (t *taskPaces) saw(kind taskKind, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.recent == nil {
		t.recent = map[taskKind][]time.Duration{}
	}
	t.recent[kind] = Remember(t.recent[kind], took)
}

// DefaultLookAgainWithin is the worker's Activities.LookAgainWithin. A look that fails for
// Temporal to retry it waits for the server's retry timer and its dispatch to a worker: a few
// milliseconds on an idle server, and up to a second and a half on a loaded one (a fleet of
// three hundred creates on the embedded server), where a clone slot waits for that look. The
// looks gathered around an expected end come every fortieth of it, so those of clones and
// other tasks under 20 s are made in one attempt, which heartbeats meanwhile.
const DefaultLookAgainWithin = 500 * time.Millisecond

// looksAgainHere reports whether the attempt that made its looks-th look at a running task
// makes the next, next from now, itself: one of the looks gathered around its expected end,
// within a.LookAgainWithin, ExpectedLooks at most in an attempt, and with the attempt's time to
// spare.
func (a *Activities) looksAgainHere(ctx context.Context, pace *Pace, next time.Duration, looks int) bool {
	if a.LookAgainWithin <= 0 || pace == nil || next > a.LookAgainWithin || looks > config.ExpectedLooks ||
		config.PastExpectedEnd(a.now().Sub(pace.Since)+next, pace.Expected) {
		return false
	}
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) > 2*next+time.Second
}

// sleep waits for d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
