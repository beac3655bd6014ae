package starter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
)

// KeepSource answers which proxy UIDs the operator keeps: the UIDs of a file, or a Kubernetes
// controller's list of its Proxy objects' UIDs. It is asked once per garbage collection, just
// before the run starts.
type KeepSource func(ctx context.Context) ([]string, error)

// KeepUIDs is the KeepSource of a fixed set.
func KeepUIDs(uids ...string) KeepSource {
	return func(context.Context) ([]string, error) { return uids, nil }
}

// GCOptions are the options of CollectGarbage.
type GCOptions struct {
	// Keep answers the UIDs to keep. Required unless KeepNone.
	Keep KeepSource
	// KeepNone collects every proxy: without it, an empty kept set is refused with
	// ErrEmptyKeep, so that a source that lost its list deletes nothing.
	KeepNone bool
	// DryRun finds the garbage and deletes nothing.
	DryRun bool
	// Grace is how old a VM or seed ISO must be to be collected; zero is
	// reads.DefaultGrace.
	Grace time.Duration
}

// ErrEmptyKeep is what errors.Is finds when the kept set is empty and KeepNone is not set (set
// it to collect every proxy on purpose), or KeepNone is set with a kept set. The call never
// reached Temporal.
var ErrEmptyKeep = errors.New("refusing to collect garbage")

// CollectGarbage asks the kept set of opts.Keep, then runs the CollectGarbage workflow with it
// and waits for its result: the orphan VMs and seed ISOs it found, and what became of each.
// A deletion that failed is in the result (CollectGarbageResult.Failed), not an error. A UID
// the source answers that is not a Proxy UID fails with ErrInvalidUID before Temporal is called.
func (c *Client) CollectGarbage(ctx context.Context, opts GCOptions) (fleet.CollectGarbageResult, error) {
	in := fleet.CollectGarbageInput{KeepNone: opts.KeepNone, DryRun: opts.DryRun, Grace: opts.Grace}
	if opts.Keep != nil {
		keep, err := opts.Keep(ctx)
		if err != nil {
			return fleet.CollectGarbageResult{}, fmt.Errorf("read the kept set: %w", err)
		}
		in.Keep = keep
	}
	switch {
	case opts.Grace < 0:
		return fleet.CollectGarbageResult{}, fmt.Errorf("collect garbage: grace period %s is negative", opts.Grace)
	case len(in.Keep) == 0 && !in.KeepNone:
		return fleet.CollectGarbageResult{}, fmt.Errorf("%w: the kept set is empty, which would delete every proxy", ErrEmptyKeep)
	case len(in.Keep) > 0 && in.KeepNone:
		return fleet.CollectGarbageResult{}, fmt.Errorf("%w: KeepNone with a kept set of %d UIDs", ErrEmptyKeep, len(in.Keep))
	}
	for _, uid := range in.Keep {
		if err := checkUID(uid); err != nil {
			return fleet.CollectGarbageResult{}, fmt.Errorf("kept set: %w", err)
		}
	}
	var res fleet.CollectGarbageResult
	// No execution timeout, unlike a read's: the deletes it waits for wait out locks and tasks
	// within their own budgets.
	start := client.StartWorkflowOptions{ID: core.CollectGarbageWorkflowID(requestID()), TaskQueue: c.taskQueue}
	return res, c.execute(ctx, "collect garbage", start, core.CollectGarbageName, &res, in)
}
