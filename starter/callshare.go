package starter

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/callshares"
)

// SharedCap is a Proxmox client whose cap is a share (pve.ClientConfig.SharedLimits).
type SharedCap interface {
	SetCallShare(s pve.CallShare, until time.Time)
	CallsInFlight() int
}

// CallShare keeps a worker's share of its task queue's call cap (callshares.Workflows.CallShares).
type CallShare struct {
	// Worker names the worker process (Identity).
	Worker string
	// Cap is proxmox.calls.
	Cap config.Calls
	// Proxmox is the worker's client, to which each share is applied.
	Proxmox SharedCap
	// Drain is how long a call may stay in flight: proxmox.requestTimeoutSeconds.
	Drain time.Duration
	// Replaces names the worker this one was started in place of, on its host, which has
	// exited (its slot's predecessor: the worker's claimSlot); empty when none. The first
	// renewal that is answered says so, which ends that worker's lease at once.
	Replaces string
	// ReplacedCalls is how many calls the replaced worker had in flight when it died, if its
	// slot says: only those count until they can have ended, not its whole share.
	ReplacedCalls *int
	// Every spaces the renewals, and Lease is how long a share holds after the renewal that
	// gave it was sent; zero: CallShareEvery and CallShareLease.
	Every, Lease time.Duration
	Logger       *slog.Logger
}

// CallShareEvery and CallShareLease are how often a worker renews its share of the call cap, and
// how long a share holds: a worker that stops renewing gives its share back within a lease (the
// others grow into it at their next renewals), and a renewal held up by the workflow's worker
// dying (its sticky queue's 5 s) still comes in time.
const (
	CallShareEvery = 2 * time.Second
	CallShareLease = 5 * CallShareEvery
)

// shareSoon is how soon a worker renews after a renewal that failed, or that gave it less than
// its fair part: the others shrink at their own renewals.
const shareSoon = 500 * time.Millisecond

// KeepCallShare renews s's share, and applies it, until ctx ends. Until the first share comes,
// and whenever a share lapses before it is renewed, the worker's client sends nothing.
func (c *Client) KeepCallShare(ctx context.Context, s CallShare) {
	every, lease := cmp.Or(s.Every, CallShareEvery), cmp.Or(s.Lease, CallShareLease)
	logger := cmp.Or(s.Logger, slog.New(slog.DiscardHandler))
	var using callshares.CallShareGrant
	var lapses time.Time // of the share applied
	failing := false
	for {
		sent := time.Now()
		req := callshares.CallShareRequest{Worker: s.Worker, Cap: s.Cap, Using: using, Lease: lease, Drain: s.Drain}
		if lapses.IsZero() {
			req.Replaces, req.ReplacedCalls = s.Replaces, s.ReplacedCalls
		}
		req.Using.Concurrency = max(using.Concurrency, s.Proxmox.CallsInFlight())
		renewCtx, cancel := context.WithTimeout(ctx, lease/2)
		g, err := c.renewCallShare(renewCtx, req)
		cancel()
		wait := every
		switch {
		case err == nil:
			if g != using || failing {
				logger.Info("proxmox call share", "worker", s.Worker, "perSecond", g.PerSecond, "burst", g.Burst,
					"concurrency", g.Concurrency, "fair", g.Fair, "workers", g.Workers)
			}
			if !g.Fair || shrunk(g, using) {
				wait = shareSoon
			}
			using, lapses, failing = g, sent.Add(lease), false
			s.Proxmox.SetCallShare(g.CallShare, lapses)
		case ctx.Err() == nil:
			wait = shareSoon
			if failing {
				break
			}
			logger.Warn("proxmox call share not renewed; the worker stops sending to Proxmox when its share lapses",
				"worker", s.Worker, "lapses", lapses, "error", err)
			failing = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// shrunk is whether share g is smaller than was in any of its parts: a worker given less than
// it applied renews soon, to say it applies the smaller share, which frees the rest for the
// others; and one given less than its fair part, to grow into what they leave.
func shrunk(g, was callshares.CallShareGrant) bool {
	return g.PerSecond < was.PerSecond || g.Burst < was.Burst || g.Concurrency < was.Concurrency
}

// renewCallShare sends req to the call cap of the Client's task queue, starting it when none
// runs, and returns the share it gives.
func (c *Client) renewCallShare(ctx context.Context, req callshares.CallShareRequest) (callshares.CallShareGrant, error) {
	var g callshares.CallShareGrant
	start := c.temporal.NewWithStartWorkflowOperation(callshares.CallSharesOptions(c.taskQueue), callshares.CallSharesName, callshares.CallSharesState{})
	handle, err := c.temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName:   callshares.RenewCallShareUpdate,
			Args:         []any{req},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return g, fmt.Errorf("renew the call share of %s at %s: %w", req.Worker, callshares.CallSharesWorkflowID(c.taskQueue), err)
	}
	return g, handle.Get(ctx, &g)
}
