package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/pve"
)

// Proxies sends requests to Proxy entities; a worker's is an adapter over starter.Client. A
// workflow cannot send an Update, so Rollout and CollectGarbage reach a proxy's entity through
// RequestChange and RequestDelete, which call it.
//
// Each method blocks until the entity's operation that serves the request has closed, and
// returns its result. The entity's answer, when it is a failure (its validator refused the
// request, the request was superseded, the operation failed), is returned as the SDK returns it:
// a *temporal.ApplicationError, possibly inside the child workflow's error. A failure on the way
// to the entity (Temporal unreachable or busy) is returned classified as pve.Classified does,
// or unclassified, which counts as Transient.
type Proxies interface {
	ChangeProxy(ctx context.Context, req ProxyChange) (ProxyChangeOutcome, error)
	DeleteProxy(ctx context.Context, req ProxyDelete) (ProxyDeleteOutcome, error)
}

// ProxyChange asks the entity of UID to change its proxy: the change Update. An empty Image or
// MachineType leaves that part as it is.
type ProxyChange struct {
	UID         string `json:"uid"`
	Image       string `json:"image,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	// RequestID is the Update's ID: an attempt that is retried sends the same ID, and so joins
	// the update the attempt before it sent rather than sending a second one.
	RequestID string `json:"requestID"`
}

// ProxyChangeOutcome is what the change Update answered: the proxy's VM once the change closed,
// with its IPv4 again.
type ProxyChangeOutcome struct {
	VMID int    `json:"vmid"`
	Node string `json:"node"`
	IPv4 string `json:"ipv4"`
	// Changed says what changed, one entry each; empty when the VM already matched.
	Changed   []string `json:"changed"`
	Restarted bool     `json:"restarted"`
	Rebuilt   bool     `json:"rebuilt,omitempty"`
}

// ProxyDelete asks the entity of UID for its proxy to be absent: the delete Update.
type ProxyDelete struct {
	UID string `json:"uid"`
	// RequestID is the Update's ID, as ProxyChange's.
	RequestID string `json:"requestID"`
	// UnlessWantedSince, when set, makes the entity refuse the delete (ErrSuperseded) if it
	// accepted a create or change of the proxy after it: a garbage collection gives the time it
	// began looking, so a proxy created again since is not destroyed.
	UnlessWantedSince time.Time `json:"unlessWantedSince,omitzero"`
}

// ProxyDeleteOutcome is what the delete Update answered.
type ProxyDeleteOutcome struct {
	// Destroyed lists the VMs destroyed; empty when there was nothing to destroy.
	Destroyed []VMRef `json:"destroyed"`
}

// ErrSuperseded is the type of the failure of a request that a later one superseded (a delete
// stops a running create), or of a delete refused for a create or change accepted after its
// UnlessWantedSince: the entity's, kept as the activity's.
const ErrSuperseded = "Superseded"

// answerTypes are the failure types of an entity's answer that an activity keeps; any other
// answer (a validator's refusal of its own type, a cancelled or terminated operation) is
// Permanent.
var answerTypes = []string{ErrPermanent, ErrTransient, ErrQuotaExceeded, ErrNotFound, ErrSuperseded}

// heartbeatEvery spaces the heartbeats of a request when its activity has no heartbeat
// timeout to derive them from.
const heartbeatEvery = 10 * time.Second

// RequestChange sends a change to the entity of req.UID and waits, heartbeating, until the
// change has closed.
func (a *Activities) RequestChange(ctx context.Context, req ProxyChange) (ProxyChangeOutcome, error) {
	step := fmt.Sprintf("change of proxy %s (request %s)", req.UID, req.RequestID)
	if a.Proxies == nil {
		return ProxyChangeOutcome{}, missingProxies(step)
	}
	return awaitEntity(ctx, step, func(ctx context.Context) (ProxyChangeOutcome, error) { return a.Proxies.ChangeProxy(ctx, req) })
}

// RequestDelete sends a delete to the entity of req.UID and waits, heartbeating, until the
// delete has closed.
func (a *Activities) RequestDelete(ctx context.Context, req ProxyDelete) (ProxyDeleteOutcome, error) {
	step := fmt.Sprintf("delete of proxy %s (request %s)", req.UID, req.RequestID)
	if a.Proxies == nil {
		return ProxyDeleteOutcome{}, missingProxies(step)
	}
	return awaitEntity(ctx, step, func(ctx context.Context) (ProxyDeleteOutcome, error) { return a.Proxies.DeleteProxy(ctx, req) })
}

func missingProxies(step string) error {
	return failure(step, pve.Classified(pve.Permanent, errors.New("the worker was built without Activities.Proxies, so it cannot send a request to a Proxy entity")))
}

// awaitEntity calls call, which blocks until an entity's operation has closed (minutes), and
// heartbeats meanwhile: a worker that dies is found out within the heartbeat timeout, and the
// retried attempt sends the same request ID.
func awaitEntity[T any](ctx context.Context, step string, call func(context.Context) (T, error)) (T, error) {
	out, err := beating(ctx, call)
	if err != nil {
		var zero T
		return zero, entityFailure(step, err)
	}
	return out, nil
}

// beating makes call, heartbeating meanwhile every third of the attempt's heartbeat timeout, or
// every heartbeatEvery when it has none.
func beating[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	every := heartbeatEvery
	if t := activity.GetInfo(ctx).HeartbeatTimeout; t > 0 {
		every = t / 3
	}
	var beats sync.WaitGroup
	done := make(chan struct{})
	beats.Go(func() { heartbeat(ctx, every, done) })
	out, err := call(ctx)
	close(done)
	beats.Wait()
	return out, err
}

func heartbeat(ctx context.Context, every time.Duration, done <-chan struct{}) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			activity.RecordHeartbeat(ctx)
		}
	}
}

// entityFailure is the activity's failure for an error of a request. The entity's answer is
// never retried: a retry would send the same Update ID, and Temporal answers an update ID it
// has seen with that update's outcome again; the caller decides whether to ask again, with a
// new request ID. A failure on the way to the entity is retried as activities.failure says.
func entityFailure(step string, err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		errType := appErr.Type()
		if !slices.Contains(answerTypes, errType) {
			errType = ErrPermanent
		}
		return temporal.NewNonRetryableApplicationError(step+": "+appErr.Message(), errType, nil)
	}
	var (
		canceled   *temporal.CanceledError
		terminated *temporal.TerminatedError
		timeout    *temporal.TimeoutError
	)
	if errors.As(err, &canceled) || errors.As(err, &terminated) || errors.As(err, &timeout) {
		return temporal.NewNonRetryableApplicationError(step+": "+err.Error(), ErrPermanent, nil)
	}
	return failure(step, err)
}
