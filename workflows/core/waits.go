package core

import (
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// BootStorage is the storage of cfg's boot disk, which a clone without a target storage
// allocates on.
func BootStorage(cfg pve.VMConfig) (string, error) {
	disk, err := proxy.BootDisk(cfg)
	if err != nil {
		return "", err
	}
	storage, _, _ := strings.Cut(cfg[disk], ":")
	return storage, nil
}

// WaitTask waits for a Proxmox task within budget, showing it as the current step, and records
// the task's warnings in t. It returns the activity's own error: a caller acts on how the task
// failed, or wraps it with fail.
func WaitTask(ctx workflow.Context, s Settings, t *Tracker, first FirstLooks, upid pve.UPID, budget time.Duration, summary string) error {
	_, err := WaitFor(ctx, s, t, first, activities.TaskStatusRequest{UPID: upid}, budget, summary)
	return err
}

// WaitFor is waitTask for a request of its own (one with a signal to send at the task's end, or
// a pace of its own), returning its result.
func WaitFor(ctx workflow.Context, s Settings, t *Tracker, first FirstLooks, req activities.TaskStatusRequest, budget time.Duration, summary string) (activities.TaskResult, error) {
	var a *activities.Activities
	t.Step(summary)
	t.task(req.UPID)
	if req.Pace == nil {
		req.Pace = s.Pace(ctx)
	}
	opts := s.WaitOptions(budget, summary+", "+string(req.UPID))
	if first == ActivityFirst {
		opts.HeartbeatTimeout = heartbeatTimeout(opts.StartToCloseTimeout)
		// Its looks say when the next one comes, and so do those that meet Proxmox's trouble
		// (activities.TaskStatus): the policy spaces only the retries of a look lost with its
		// worker, which is made again the poll's first interval after its heartbeat stopped,
		// not after the interval the attempt count has grown to (up to 10 s by default).
		retry := *opts.RetryPolicy
		retry.BackoffCoefficient = 1
		opts.RetryPolicy = &retry
	}
	wait := Poll(ctx, opts, a.TaskStatus, req)
	if first == ActivityFirst {
		wait.localLooks = 0
	}
	var res activities.TaskResult
	if err := wait.Get(ctx, &res); err != nil {
		return res, err
	}
	t.warned(res.WarningTexts)
	return res, nil
}

// FirstLooks says where a task's wait makes its first looks.
type FirstLooks int

const (
	// LocalLooksFirst makes them in the worker, as poll does: most tasks end within them.
	LocalLooksFirst FirstLooks = iota
	// ActivityFirst makes the wait an activity from its first look, so the workflow task that
	// started the task completes at once and records its answer. A clone's wait is: a clone
	// outlasts the local looks anyway, and a worker lost while they ran would lose the Clone
	// call's answer with the open workflow task; replayed, the create would find the VMID held by
	// its own clone, not yet marked, and clone again onto the next one. Its looks heartbeat
	// (heartbeatTimeout), and the one that sees the clone end gives the lease back
	// (lease.giveBack): the clone holds a lease of its storage that creates queue for.
	ActivityFirst
)
