package callshares

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
)

// The call cap of a cluster. proxmox.calls caps the requests that every worker of a task queue
// sends to its Proxmox cluster together: one CallShares workflow per task queue divides it
// among the workers that reach the cluster, each of which applies its share to its own client
// (pve.CallShare). A worker renews its share by an Update every few seconds (starter.CallShare);
// a share lapses a lease after the renewal that gave it, and the worker then sends nothing until
// it renews. So a worker that dies or loses Temporal gives its share back within a lease, and
// the workers that remain grow into it at their next renewals.
//
// The shares never add up to more than the cap, at any moment. A worker's renewal says the
// share it applies while it waits for the answer (and, of its concurrency, the calls it has in
// flight), and until its next renewal it counts for the larger of that and what it was given:
// a share shrinks at once, and the room it leaves goes to the others only once its worker has
// said it applies the smaller one. A worker that stops renewing counts for its rate until its
// lease ends, and for its calls in flight a request timeout longer (drain), as long as a call
// it had sent may still run. A worker is given all that the others leave while every worker has
// its fair part (the cap over the workers with a lease, the first ones taking the remainder of
// the slots and tokens), so that a worker beside dead ones sends at what they leave; a new worker
// is given what is left of its fair part, and the others shrink to theirs at their next
// renewals, so that it has its fair part within two of them. With more workers than the cap has
// slots, the later ones get no slot, and send nothing until a worker leaves.
//
// A rival to this workflow would be a task queue of Proxmox calls rate-limited by the server
// (TaskQueueActivitiesPerSecond): it bounds a rate across workers, not the calls in flight, and
// most calls are local activities, which no task queue sees.

// CallSharesName is the workflow type of a task queue's call cap; it is recorded in histories.
const CallSharesName = "CallShares"

// The Update and the query of a CallShares workflow.
const (
	// RenewCallShareUpdate renews a worker's share (a CallShareRequest); its result is a
	// CallShareGrant.
	RenewCallShareUpdate = "renew-call-share"
	// CallSharesQuery answers the workflow's CallSharesState.
	CallSharesQuery = "call-shares"
)

// CallSharesWorkflowID is the ID of the call cap of the workers of one task queue, which reach
// one Proxmox cluster.
func CallSharesWorkflowID(taskQueue string) string { return "call-shares/" + taskQueue }

// CallSharesOptions are the start options of a task queue's call cap, for UpdateWithStart.
func CallSharesOptions(taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       CallSharesWorkflowID(taskQueue),
		TaskQueue:                taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}
}

// CallShareRequest is a worker's renewal of its share.
type CallShareRequest struct {
	// Worker names the worker process; a restarted process is a new worker.
	Worker string `json:"worker"`
	// Cap is proxmox.calls as the worker has it; the workflow takes the latest.
	Cap config.Calls `json:"cap"`
	// Using is the share the worker applies until it has the answer, its concurrency at least
	// the calls it has in flight; the zero share before its first.
	Using CallShareGrant `json:"using"`
	// Lease is how long after it sent this renewal the worker applies the share it is given.
	Lease time.Duration `json:"lease"`
	// Drain is how long a call the worker sent may stay in flight: its request timeout.
	Drain time.Duration `json:"drain"`
	// Replaces names a worker that has exited, which this one succeeds on its host: its lease
	// ends now, so that a worker killed and started again gets its share back at once, not a
	// lease later. Its calls in flight when it died still count until its drain ends: those
	// ReplacedCalls says, else its whole share.
	Replaces      string `json:"replaces,omitempty"`
	ReplacedCalls *int   `json:"replacedCalls,omitempty"`
}

// CallShareGrant is a worker's share of the cap: pve.NoLimit where the cap has no rate or no
// concurrency.
type CallShareGrant struct {
	pve.CallShare
	// Fair is whether the share is the worker's fair part, not less: a worker given less
	// renews soon.
	Fair bool `json:"fair,omitempty"`
	// Workers is how many workers share the cap.
	Workers int `json:"workers,omitempty"`
}

// CallSharesState is the cap and its shares, carried across continue-as-new, and what
// CallSharesQuery answers.
type CallSharesState struct {
	Cap config.Calls `json:"cap"`
	// Workers are the workers that hold a share, or whose calls may still be in flight, in the
	// order they came.
	Workers []CallShareHolder `json:"workers"`
	// HistoryEvents is the history length past which the workflow continues as new; zero is
	// defaultCallSharesHistoryEvents.
	HistoryEvents int `json:"historyEvents,omitempty"`
}

// CallShareHolder is one worker's share and what it counts for.
type CallShareHolder struct {
	Worker  string         `json:"worker"`
	Given   CallShareGrant `json:"given"`
	Using   CallShareGrant `json:"using"`
	Renewed time.Time      `json:"renewed"`
	Lease   time.Duration  `json:"lease"`
	Drain   time.Duration  `json:"drain"`
}

// defaultCallSharesHistoryEvents is the history length past which the workflow continues as
// new. A renewal is five events; a worker renews every few seconds.
const defaultCallSharesHistoryEvents = 4000

// CallShares divides a task queue's call cap among its workers. It runs as long as they do,
// continuing as new with the shares when its history grows long.
func (w *Workflows) CallShares(ctx workflow.Context, st CallSharesState) error {
	c := &callShares{st: st}
	if err := workflow.SetQueryHandler(ctx, CallSharesQuery, func() (CallSharesState, error) { return c.st, nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, RenewCallShareUpdate, c.renew,
		workflow.UpdateHandlerOptions{Validator: validateCallShareRequest}); err != nil {
		return err
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if err := workflow.Await(ctx, func() bool {
		return core.HistoryPast(ctx, cmp.Or(c.st.HistoryEvents, defaultCallSharesHistoryEvents))
	}); err != nil {
		return err
	}
	// The handler blocks on nothing, so every renewal taken so far has its answer by now.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, CallSharesName, c.st)
}

func validateCallShareRequest(req CallShareRequest) error {
	if req.Worker == "" {
		return fmt.Errorf("call share renewal names no worker")
	}
	if err := (pve.CallLimits{PerSecond: req.Cap.PerSecond, Concurrency: req.Cap.Concurrency}).Validate(); err != nil {
		return fmt.Errorf("call share renewal of worker %s: %w", req.Worker, err)
	}
	if req.Lease <= 0 || req.Drain < 0 {
		return fmt.Errorf("call share renewal of worker %s: lease %s, drain %s: want a lease > 0 and a drain >= 0", req.Worker, req.Lease, req.Drain)
	}
	return nil
}

type callShares struct{ st CallSharesState }

// renew gives req.Worker its share (grant).
func (c *callShares) renew(ctx workflow.Context, req CallShareRequest) (CallShareGrant, error) {
	return c.renewAt(req, workflow.Now(ctx)), nil
}

// renewAt is renew at now.
func (c *callShares) renewAt(req CallShareRequest, now time.Time) CallShareGrant {
	c.st.Cap = req.Cap
	if req.Replaces != req.Worker {
		if i := slices.IndexFunc(c.st.Workers, func(h CallShareHolder) bool { return h.Worker == req.Replaces }); i >= 0 {
			c.st.Workers[i].exited(now, req.ReplacedCalls)
		}
	}
	c.st.Workers = slices.DeleteFunc(c.st.Workers, func(h CallShareHolder) bool { return h.Worker != req.Worker && h.gone(now) })
	i := slices.IndexFunc(c.st.Workers, func(h CallShareHolder) bool { return h.Worker == req.Worker })
	if i < 0 {
		i = len(c.st.Workers)
		c.st.Workers = append(c.st.Workers, CallShareHolder{Worker: req.Worker})
	}
	h := &c.st.Workers[i]
	h.Using, h.Renewed, h.Lease, h.Drain = req.Using, now, req.Lease, req.Drain
	h.Given = c.grant(i, now)
	return h.Given
}

// grant is the share of the holder at i: while another holder has less than its fair part, its
// own fair part, and otherwise all that the others leave, so that a worker alone, or beside
// dead ones whose leases still run, sends at the whole cap; never more than the others leave.
// A holder given less than its fair part (a new worker) so makes the others shrink to theirs at
// their next renewals, and grows into what they leave.
func (c *callShares) grant(i int, now time.Time) CallShareGrant {
	live := 0
	index := 0 // i's place among the holders with a lease
	short := false
	var others CallShareGrant
	for j, h := range c.st.Workers {
		if j == i || h.holds(now) {
			if j < i {
				index++
			}
			live++
		}
		if j != i {
			short = short || (h.holds(now) && !h.Given.Fair)
			o := h.countsFor(now)
			others.PerSecond += o.PerSecond
			others.Burst += o.Burst
			others.Concurrency += o.Concurrency
		}
	}
	limit := c.st.Cap
	g := CallShareGrant{CallShare: pve.CallShare{PerSecond: pve.NoLimit, Burst: pve.NoLimit, Concurrency: pve.NoLimit}, Fair: true, Workers: live}
	if limit.PerSecond > 0 {
		burst := pve.CallLimits{PerSecond: limit.PerSecond}.Burst()
		fairRate, fairBurst := limit.PerSecond/float64(live), part(burst, live, index)
		wantRate, wantBurst := limit.PerSecond, burst
		if short {
			wantRate, wantBurst = fairRate, fairBurst
		}
		g.PerSecond = max(0, min(wantRate, limit.PerSecond-others.PerSecond))
		g.Burst = max(0, min(wantBurst, burst-others.Burst))
		g.Fair = g.PerSecond >= fairRate && g.Burst >= fairBurst
	}
	if limit.Concurrency > 0 {
		fair, want := part(limit.Concurrency, live, index), limit.Concurrency
		if short {
			want = fair
		}
		g.Concurrency = max(0, min(want, limit.Concurrency-others.Concurrency))
		g.Fair = g.Fair && g.Concurrency >= fair
	}
	return g
}

// part is the index-th of n parts of whole, the first ones taking the remainder.
func part(whole, n, index int) int {
	p := whole / n
	if index < whole%n {
		p++
	}
	return p
}

// holds is whether the holder's lease runs at now.
func (h CallShareHolder) holds(now time.Time) bool { return now.Before(h.Renewed.Add(h.Lease)) }

// exited ends the holder's lease at now, if it runs: the holder has exited, with calls in
// flight, if its successor knows, which alone count for its slots from then on.
func (h *CallShareHolder) exited(now time.Time, calls *int) {
	if h.holds(now) {
		h.Lease = now.Sub(h.Renewed)
	}
	if calls != nil {
		h.Given.Concurrency = min(h.Given.Concurrency, *calls)
		h.Using.Concurrency = min(h.Using.Concurrency, *calls)
	}
}

// gone is whether the holder counts for nothing at now: its lease ended, and its last call may
// have ended too.
func (h CallShareHolder) gone(now time.Time) bool {
	return !now.Before(h.Renewed.Add(h.Lease + h.Drain))
}

// countsFor is what the holder may use at now, of the cap's rate, bucket and slots: the larger
// of what it was given and what it said it used, while its lease runs; its calls in flight
// while they may still run.
func (h CallShareHolder) countsFor(now time.Time) CallShareGrant {
	var c CallShareGrant
	if h.gone(now) {
		return c
	}
	c.Concurrency = max(h.Given.Concurrency, h.Using.Concurrency, 0)
	if h.holds(now) {
		c.PerSecond = max(h.Given.PerSecond, h.Using.PerSecond, 0)
		c.Burst = max(h.Given.Burst, h.Using.Burst, 0)
	}
	return c
}
