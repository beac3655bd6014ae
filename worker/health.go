package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/pve"
)

// readyTimeout bounds each of a readiness probe's checks: a probe that hangs is a failed probe
// to Kubernetes anyway, and a slow one should say which dependency is slow.
const readyTimeout = 3 * time.Second

// readiness answers /readyz. The worker is ready when Temporal lists it among the pollers of its
// task queue (which also says Temporal answers) and Proxmox answers; not ready before it has
// connected, or while either does not answer. Each probe asks both afresh.
type readiness struct {
	checks atomic.Pointer[[]readyCheck]
}

// A readyCheck is one dependency the worker needs, and how to ask it.
type readyCheck struct {
	name string
	ask  func(context.Context) error
}

// watch makes the worker ready once every check passes.
func (r *readiness) watch(checks ...readyCheck) { r.checks.Store(&checks) }

func (r *readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	checks := r.checks.Load()
	if checks == nil {
		http.Error(w, "starting: not connected to Temporal and Proxmox yet", http.StatusServiceUnavailable)
		return
	}
	var report strings.Builder
	ready := true
	for _, c := range *checks {
		ctx, cancel := context.WithTimeout(req.Context(), readyTimeout)
		err := c.ask(ctx)
		cancel()
		if err != nil {
			ready = false
			fmt.Fprintf(&report, "%s: %v\n", c.name, err)
		} else {
			fmt.Fprintf(&report, "%s: ok\n", c.name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprint(w, report.String())
}

// healthz answers /healthz: the process runs and serves. Whether it can work is /readyz's
// question; a liveness probe that asked it would restart workers for Temporal's outages.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// pollingCheck asks Temporal whether the worker identity polls taskQueue.
func pollingCheck(c client.Client, taskQueue, identity string) readyCheck {
	return readyCheck{name: "temporal", ask: func(ctx context.Context) error {
		resp, err := c.DescribeTaskQueue(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err != nil {
			return fmt.Errorf("describe task queue %s: %w", taskQueue, err)
		}
		polls := slices.ContainsFunc(resp.GetPollers(), func(p *taskqueuepb.PollerInfo) bool { return p.GetIdentity() == identity })
		if !polls {
			return fmt.Errorf("%s does not poll task queue %s yet", identity, taskQueue)
		}
		return nil
	}}
}

// proxmoxCheck asks Proxmox for its version, the cheapest authenticated call.
func proxmoxCheck(api pve.API) readyCheck {
	return readyCheck{name: "proxmox", ask: func(ctx context.Context) error {
		_, err := api.Version(ctx)
		return err
	}}
}
