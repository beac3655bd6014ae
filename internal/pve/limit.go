package pve

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
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

// Burst is how many tokens the rate's bucket holds: a second's worth, at least one.
func (l CallLimits) Burst() int { return max(1, int(math.Ceil(l.PerSecond))) }

// Priority orders the calls that wait for the call limits: a waiting call of a higher priority
// is sent first, and among calls of one priority the first to wait. A call's priority is its
// context's (WithPriority), PriorityDefault without one.
type Priority int

const (
	// PriorityCare is that of the calls that look after proxies between their operations (their
	// checks, the observer's listing): they wait behind every other call, so that a backlog of
	// them never holds up a create, a change or a delete.
	PriorityCare Priority = -1
	// PriorityDefault is every other call's.
	PriorityDefault Priority = 0
	// PrioritySlot is that of the calls a storage's clone slot waits on while creates queue for
	// it: a create's clone, and the looks at the clone's task whose end hands the slot on. They
	// go before every other call: in the order of their operations' starts, a create's looks at
	// its clone's end waited behind the later steps of every create that had cloned before it,
	// and its slot stood free meanwhile.
	PrioritySlot Priority = 1
)

func (p Priority) String() string {
	switch p {
	case PriorityCare:
		return "care"
	case PrioritySlot:
		return "slot"
	}
	return "default"
}

type priorityKey struct{}

// WithPriority is ctx with the priority p for the calls made with it.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityOf is the priority of the calls made with ctx (WithPriority).
func PriorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

type orderKey struct{}

// WithOrder is ctx with the calls made with it ordered, among the waiting calls of their
// priority, as calls that came at at: the start of the operation they are part of, so that an
// operation's later calls go before those of operations started after it. A hundred creates
// started at once each read what they check before they may clone: in the order the calls came,
// the first create's clone, granted a slot, waited behind every other create's checks (15 s
// in the as-shipped fleet); started first, it goes first, and the clone slots turn.
func WithOrder(ctx context.Context, at time.Time) context.Context {
	return context.WithValue(ctx, orderKey{}, at)
}

// OrderOf is when the calls made with ctx count as come (WithOrder), and whether ctx says.
func OrderOf(ctx context.Context) (time.Time, bool) {
	at, ok := ctx.Value(orderKey{}).(time.Time)
	return at, ok && !at.IsZero()
}

// orderOf is when a call made with ctx counts as come: WithOrder's, else now.
func orderOf(ctx context.Context, now time.Time) time.Time {
	if at, ok := OrderOf(ctx); ok {
		return at
	}
	return now
}

// limiter applies CallLimits, or the shares of a cap that several clients share (CallShare).
// Calls that cannot go at once wait in a queue ordered by priority, then by when they count as
// come (WithOrder: their operation's start), then by arrival, and are sent from its head as
// slots and tokens come. A call whose turn comes with less time left before its context's
// deadline than a call takes (tookEWMA) is dropped, not sent: its answer would come too late,
// and its token and slot go to the next call. The zero limiter, or one of
// zero limits, lets every call through.
type limiter struct {
	rated       bool // whether a rate applies: perSecond and burst
	perSecond   float64
	burst       float64
	slotted     bool // whether a concurrency applies
	concurrency int
	// shared is set on the limiter of a share: no call goes from lapse on (zero, before the
	// first share) until a new share comes.
	shared bool
	lapse  time.Time
	// shareCame is closed, and replaced, when a share comes.
	shareCame chan struct{}

	mu       sync.Mutex
	tokens   float64   // the bucket's tokens at filled
	filled   time.Time // when tokens was counted
	inFlight int       // calls sent whose answer is not read yet
	// onCalls, when set, is told inFlight whenever it changes, before a call is sent and once
	// its answer is read.
	onCalls  func(int)
	queue    waitQueue
	arrivals uint64
	wake     *time.Timer // set while a wait for a token is pending
	wakeAt   time.Time   // when wake fires
	// took is the moving average of a call's time in flight, from sending it to reading its
	// answer: how much of its deadline a call needs left to be worth sending.
	took time.Duration
}

func newLimiter(l CallLimits) *limiter {
	lim := &limiter{rated: l.PerSecond > 0, perSecond: l.PerSecond, slotted: l.Concurrency > 0, concurrency: l.Concurrency}
	if lim.rated {
		lim.burst = float64(l.Burst())
		lim.tokens = lim.burst
		lim.filled = time.Now()
	}
	return lim
}

// newSharedLimiter is the limiter of a client whose cap is a share (ClientConfig.SharedLimits):
// it sends nothing until its first share.
func newSharedLimiter() *limiter {
	return &limiter{shared: true, filled: time.Now(), shareCame: make(chan struct{})}
}

// NoLimit, as a CallShare's PerSecond, Burst or Concurrency, is a share of a cap that limits
// neither: the cap has no rate or no concurrency.
const NoLimit = -1

// A CallShare is one client's part of a call cap that several clients share: the workers of one
// Proxmox cluster, each of which is given a share so that together they never send more than
// the cap (callshares.CallShares). A zero PerSecond, Burst or Concurrency is none at all: the
// share lets no call go until a larger one comes; NoLimit is no limit.
type CallShare struct {
	// PerSecond is the rate of the client's bucket, and Burst how many tokens it holds.
	PerSecond float64 `json:"perSecond"`
	Burst     int     `json:"burst"`
	// Concurrency is how many requests the client may have in flight at once.
	Concurrency int `json:"concurrency"`
}

// setShare applies s until until, by this process's clock: from then on no call goes until a
// new share comes, since the share's grantor gives it to others after it lapses. The bucket keeps
// the tokens it has, up to the new burst, and fills at the new rate from now; calls already in
// flight count against the new concurrency. A limiter that is not shared ignores it.
func (l *limiter) setShare(s CallShare, until time.Time) {
	if !l.shared {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.fill(now)
	l.rated, l.perSecond, l.burst = s.PerSecond != NoLimit, max(s.PerSecond, 0), float64(max(s.Burst, 0))
	l.tokens = min(l.tokens, l.burst)
	l.filled = now
	l.slotted, l.concurrency = s.Concurrency != NoLimit, max(s.Concurrency, 0)
	l.lapse = until
	close(l.shareCame)
	l.shareCame = make(chan struct{})
	if l.wake != nil {
		l.wake.Stop()
		l.wake = nil
	}
	l.dispatch(now)
}

// calls is how many calls are in flight.
func (l *limiter) calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}

// lapsed is whether a shared limiter's share has lapsed at now.
func (l *limiter) lapsed(now time.Time) bool { return l.shared && !now.Before(l.lapse) }

// errNoShare is what acquire returns for a call of a client whose share lets nothing go (none
// yet, lapsed, or without a slot or a rate) noShareWait after the call came: a worker with a
// share makes it sooner (a local activity's call goes on as an activity, which any worker may
// take), where waiting would hold it, and the workflow task it is part of, until its deadline.
// A care call, which is in no hurry, waits for a share until its deadline.
var errNoShare = errors.New("this worker has no share of the cluster's call cap now (proxmox.calls)")

const noShareWait = time.Second

// lets is whether a shared limiter's share lets a call go at all at now, given time.
func (l *limiter) lets(now time.Time) bool {
	return !l.lapsed(now) && (!l.slotted || l.concurrency > 0) && (!l.rated || (l.perSecond > 0 && l.burst >= 1))
}

// awaitShare waits, with l.mu held, for a share that lets a call of priority p go, a care
// call until ctx ends and any other at most noShareWait from start, and returns with l.mu held:
// errNoShare when none came, or ctx's error.
func (l *limiter) awaitShare(ctx context.Context, p Priority, start time.Time) error {
	for !l.lets(time.Now()) {
		var giveUp <-chan time.Time
		if p >= PriorityDefault {
			left := noShareWait - time.Since(start)
			if left <= 0 {
				return errNoShare
			}
			giveUp = time.After(left)
		}
		came := l.shareCame
		l.mu.Unlock()
		select {
		case <-came:
		case <-giveUp:
		case <-ctx.Done():
			l.mu.Lock()
			return fmt.Errorf("%w: %w", errLimiterWait, context.Cause(ctx))
		}
		l.mu.Lock()
	}
	return nil
}

// errLimiterWait is what acquire returns when ctx ends before the call may be sent.
var errLimiterWait = errors.New("waiting for the proxmox call limit")

// errLimiterDropped is what acquire returns for a call dropped at its turn: too little was left
// of its deadline for an answer to come in time.
var errLimiterDropped = errors.New("dropped before it was sent")

// waiter is a call waiting in the limiter's queue.
type waiter struct {
	priority Priority
	order    time.Time // when the call counts as come (orderOf)
	arrival  uint64
	deadline time.Time // zero: none
	index    int       // in the queue; -1 once out of it
	// decided is closed once the call may go (err nil) or was dropped (err set).
	decided chan struct{}
	err     error
}

// acquire waits until a call may be sent, by its priority (PriorityOf(ctx)): until a slot is
// free and a token due, and the calls before it in the queue went. It returns the func that
// frees the slot once the call's answer is read, how long the call was held back (0 when it
// went at once, never 0 when it waited) and, if ctx ended first or the call was dropped at its
// turn, an error: one wrapping ctx's, errLimiterDropped, or errNoShare.
func (l *limiter) acquire(ctx context.Context) (release func(), held time.Duration, err error) {
	start := time.Now()
	if !l.shared && !l.rated && !l.slotted { // what is not shared never changes
		return func() {}, 0, nil
	}
	l.mu.Lock()
	priority := PriorityOf(ctx)
	if l.shared {
		if err := l.awaitShare(ctx, priority, start); err != nil {
			l.mu.Unlock()
			return nil, max(time.Since(start), time.Nanosecond), err
		}
	}
	if len(l.queue) == 0 && l.mayGo(priority, start) {
		l.take()
		l.mu.Unlock()
		return l.releaser(start), 0, nil
	}
	deadline, _ := ctx.Deadline()
	w := &waiter{priority: priority, order: orderOf(ctx, start), arrival: l.arrivals, deadline: deadline, decided: make(chan struct{})}
	l.arrivals++
	heap.Push(&l.queue, w)
	l.dispatch(start)
	l.mu.Unlock()

	select {
	case <-w.decided:
	case <-ctx.Done():
		l.mu.Lock()
		if w.index >= 0 {
			// Its place goes to the calls behind it.
			heap.Remove(&l.queue, w.index)
			l.dispatch(time.Now())
			l.mu.Unlock()
			return nil, max(time.Since(start), time.Nanosecond), fmt.Errorf("%w: %w", errLimiterWait, context.Cause(ctx))
		}
		l.mu.Unlock()
		// Decided as ctx ended: the call goes, or was dropped, as decided.
	}
	held = max(time.Since(start), time.Nanosecond)
	if w.err != nil {
		return nil, held, w.err
	}
	return l.releaser(time.Now()), held, nil
}

// mayGo reports whether a call of priority p may be sent at now: a slot free and a token in the
// bucket, beyond the headroom a care call leaves (headroom).
func (l *limiter) mayGo(p Priority, now time.Time) bool {
	if l.lapsed(now) {
		return false
	}
	slots, tokens := l.headroom(p)
	if l.slotted && l.inFlight >= l.concurrency-slots {
		return false
	}
	return !l.rated || l.fill(now) >= 1+tokens
}

// headroom is what a call of priority p leaves to the calls of higher ones, of the slots and of
// the bucket's tokens: a care call leaves one slot (when there are two or more) and half the
// bucket. Calls of the default priority that come while care calls keep the cap busy so find a
// slot and tokens at once, where they would otherwise wait for the next token each; and the
// care calls, alone, still go at the full rate, as the bucket fills past the headroom at it.
func (l *limiter) headroom(p Priority) (slots int, tokens float64) {
	if p >= PriorityDefault {
		return 0, 0
	}
	if l.concurrency > 1 {
		slots = 1
	}
	return slots, math.Floor(l.burst / 2)
}

// fill counts the tokens come since the bucket was last counted, up to its size.
func (l *limiter) fill(now time.Time) float64 {
	if l.rated && now.After(l.filled) {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.filled).Seconds()*l.perSecond)
		l.filled = now
	}
	return l.tokens
}

// told tells onCalls the calls in flight.
func (l *limiter) told() {
	if l.onCalls != nil {
		l.onCalls(l.inFlight)
	}
}

// take spends a slot and a token on a call sent.
func (l *limiter) take() {
	l.inFlight++
	l.told()
	if l.rated {
		l.tokens--
	}
}

// dispatch sends the calls at the head of the queue that may go at now, drops those whose
// deadline is too near, and, when the head waits for a token, wakes itself when it is due. A
// lapsed share, and a share without a rate or a bucket for the head's token, send nothing until
// the next share (setShare dispatches again).
func (l *limiter) dispatch(now time.Time) {
	for len(l.queue) > 0 {
		if l.lapsed(now) {
			return
		}
		w := l.queue[0]
		slots, tokens := l.headroom(w.priority)
		if l.slotted && l.inFlight >= l.concurrency-slots {
			return // a release dispatches again
		}
		if l.rated && l.fill(now) < 1+tokens {
			if l.perSecond == 0 || l.burst < 1+tokens {
				return
			}
			// A call of the default priority that came before a care call's wake needs fewer
			// tokens: it is woken sooner.
			due := now.Add(max(time.Duration((1+tokens-l.tokens)/l.perSecond*float64(time.Second)), time.Millisecond))
			if l.wake != nil && l.wakeAt.After(due) {
				l.wake.Stop()
				l.wake = nil
			}
			if l.wake == nil {
				l.wakeAt = due
				l.wake = time.AfterFunc(due.Sub(now), func() {
					l.mu.Lock()
					defer l.mu.Unlock()
					l.wake = nil
					l.dispatch(time.Now())
				})
			}
			return
		}
		heap.Pop(&l.queue)
		if left := w.deadline.Sub(now); !w.deadline.IsZero() && left < l.took {
			w.err = fmt.Errorf("%w: %s left before its deadline, and a call takes %s", errLimiterDropped,
				left.Round(time.Millisecond), l.took.Round(time.Millisecond))
		} else {
			l.take()
		}
		close(w.decided)
	}
}

// releaser is the func that ends a call sent at sent: it frees its slot once, and counts its
// time in flight into took.
func (l *limiter) releaser(sent time.Time) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			now := time.Now()
			l.mu.Lock()
			defer l.mu.Unlock()
			l.inFlight--
			l.told()
			if d := now.Sub(sent); l.took == 0 {
				l.took = d
			} else {
				l.took += (d - l.took) / 5
			}
			l.dispatch(now)
		})
	}
}

// waitQueue is a heap of waiters: the highest priority first, then the earliest to count as
// come, then the earliest arrival.
type waitQueue []*waiter

func (q waitQueue) Len() int { return len(q) }
func (q waitQueue) Less(i, j int) bool {
	if q[i].priority != q[j].priority {
		return q[i].priority > q[j].priority
	}
	if !q[i].order.Equal(q[j].order) {
		return q[i].order.Before(q[j].order)
	}
	return q[i].arrival < q[j].arrival
}
func (q waitQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *waitQueue) Push(x any) {
	w := x.(*waiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *waitQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*q = old[:len(old)-1]
	return w
}
