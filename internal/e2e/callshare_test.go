package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/callshares"
	"github.com/pveflow/pveflow/workflows/core"
)

// The acceptance test of the cluster's cap: three workers, each with a Proxmox client of its
// own, share proxmox.calls (callshares.CallShares), and the simulator's request log, which
// counts what reaches Proxmox from all three, never shows more calls in flight than the cap's
// concurrency, nor more arrivals in a second than its bucket and its rate allow (a bucket of
// rate N and burst N gives at most 2N in a closed second), while a fleet asks for more: its
// reads take 100 ms, so each worker alone would have several in flight.
func TestE2E_threeWorkersNeverExceedTheClustersCallCap(t *testing.T) {
	const workers, proxies = 3, 9
	callCap := config.Calls{PerSecond: 30, Concurrency: 3}
	cluster := newCluster()
	srv, err := simserver.Start(simserver.Options{API: slowReads{API: cluster, delay: 100 * time.Millisecond}, Dir: t.TempDir(), KeepRequests: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	cfg := fastConfig(t)
	cfg.Proxmox.URL, cfg.Proxmox.CAFile, cfg.Proxmox.TokenFile = srv.URL(), srv.CAFile(), srv.TokenFile()
	cfg.Proxmox.Calls = callCap
	cfg.Clones.PerStorage = 0

	s := newStack(t, nil, cfg, client.Options{})
	ctx, stopKeeping := context.WithCancel(context.Background())
	t.Cleanup(stopKeeping)
	for i := range workers {
		api, err := pve.NewClient(pve.ClientConfig{URL: srv.URL(), CAFile: srv.CAFile(), TokenFile: srv.TokenFile(), SharedLimits: true})
		require.NoError(t, err)
		w := s.server.NewWorkerWithOptions(core.DefaultTaskQueue, func(r worker.Registry) {
			(&workflows.Workflows{Config: cfg}).Register(r)
			r.RegisterActivity(&activities.Activities{API: api, Proxmox: cfg.Proxmox, Runs: s.runs,
				Proxies: starter.EntityProxies{Client: s.starter}, AddressPools: starter.AddressPools{Client: s.starter}})
		}, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activities.CallPriority(core.CareWorkflows...)}})
		require.NotNil(t, w)
		go s.starter.KeepCallShare(ctx, starter.CallShare{Worker: fmt.Sprintf("worker-%d", i), Cap: callCap, Proxmox: api,
			Drain: api.RequestTimeout(), Every: 200 * time.Millisecond, Lease: time.Second})
	}

	errs, _ := createThenDeleteAll(s, proxies, 3*time.Minute)
	for i, err := range errs {
		require.NoError(t, err, "proxy %d", i)
	}
	assert.Empty(t, leftovers(cluster))

	log := srv.Requests()
	require.NotEmpty(t, log)
	arrivals := make([]time.Time, len(log))
	peak := 0
	for i, r := range log {
		arrivals[i] = r.Arrived
		peak = max(peak, r.InFlight)
	}
	assert.LessOrEqual(t, peak, callCap.Concurrency, "calls in flight at Proxmox")
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i, start := range arrivals {
		n := 0
		for _, a := range arrivals[i:] {
			if a.Sub(start) <= time.Second {
				n++
			}
		}
		most = max(most, n)
	}
	assert.LessOrEqual(t, most, 2*int(callCap.PerSecond), "arrivals in a second at Proxmox")
	t.Logf("%d requests from %d workers; at most %d in flight and %d in a second", len(log), workers, peak, most)

	shares := callShares(t, s)
	require.Len(t, shares.Workers, workers, "every worker holds a share")
	for _, w := range shares.Workers {
		assert.Equal(t, 1, w.Given.Concurrency, "%s has one of the three slots", w.Worker)
		assert.Equal(t, 10.0, w.Given.PerSecond, "and a third of the rate", w.Worker)
	}
}

// slowReads answers the reads a fleet makes most after a delay, as a loaded PVE does.
type slowReads struct {
	pve.API
	delay time.Duration
}

func (s slowReads) wait(ctx context.Context) error {
	select {
	case <-time.After(s.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s slowReads) VMConfig(ctx context.Context, node string, vmid int) (pve.VMConfig, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.API.VMConfig(ctx, node, vmid)
}

func (s slowReads) TaskStatus(ctx context.Context, node string, upid pve.UPID) (pve.TaskStatus, error) {
	if err := s.wait(ctx); err != nil {
		return pve.TaskStatus{}, err
	}
	return s.API.TaskStatus(ctx, node, upid)
}

// callShares is what the task queue's call cap answers.
func callShares(t *testing.T, s *stack) callshares.CallSharesState {
	t.Helper()
	return queried[callshares.CallSharesState](t, s, callshares.CallSharesWorkflowID(core.DefaultTaskQueue), callshares.CallSharesQuery)
}
