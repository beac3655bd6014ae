package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The ceiling is what the stack's Temporal server does at most on this machine: workflows that
// do nothing but run activities that do nothing, as many side by side as a fleet benchmark's
// proxies. A benchmark measures it on its own server and reports its own rate against it, so
// that the ratio, not a machine's speed, is the figure.
const (
	ceilingTaskQueue = "ceiling"
	// ceilingWorkflowIDPrefix starts the no-op workflows' IDs, so that what a fleet cost leaves
	// them out.
	ceilingWorkflowIDPrefix = "ceiling-"
	ceilingWorkflows        = 100
	ceilingActivities       = 10
)

// ceilingWorkflow runs n no-op activities one after another.
func ceilingWorkflow(ctx workflow.Context, n int) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	for range n {
		if err := workflow.ExecuteActivity(ctx, "CeilingNoop").Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

func ceilingNoop(context.Context) error { return nil }

// ceiling is the server's rate on the no-op workflows, and how busy it was: the cores of its
// process's processor time per second of wall time.
type ceiling struct {
	executionsPerSecond, eventsPerSecond, serverCores, processCores float64
}

// serverClock reads how busy s's server and this test process (the worker, the simulator and
// the clients) are over a stretch of wall time.
type serverClock struct {
	s                 *stack
	start             time.Time
	server, processes time.Duration
}

func startServerClock(b testing.TB, s *stack) serverClock {
	b.Helper()
	server, err := s.serverCPU()
	require.NoError(b, err)
	return serverClock{s: s, start: time.Now(), server: server, processes: processCPU(b)}
}

// read is the wall time since the clock started and the cores the server and this process kept
// busy meanwhile.
func (c serverClock) read(b testing.TB) (elapsed time.Duration, serverCores, processCores float64) {
	b.Helper()
	server, err := c.s.serverCPU()
	require.NoError(b, err)
	processes := processCPU(b)
	elapsed = time.Since(c.start)
	return elapsed, (server - c.server).Seconds() / elapsed.Seconds(), (processes - c.processes).Seconds() / elapsed.Seconds()
}

// processCPU is the processor time this process has used, user and system.
func processCPU(b testing.TB) time.Duration {
	b.Helper()
	var u syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &u))
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// measureCeiling runs the no-op workflows on s's server, on a task queue of their own, and
// returns the rate at which the server ran their activities and wrote their events.
func measureCeiling(b testing.TB, s *stack) ceiling {
	b.Helper()
	w := worker.New(s.client, ceilingTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(ceilingWorkflow, workflow.RegisterOptions{Name: "CeilingWorkflow"})
	w.RegisterActivityWithOptions(ceilingNoop, activity.RegisterOptions{Name: "CeilingNoop"})
	require.NoError(b, w.Start())
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	clock := startServerClock(b, s)
	runs := make([]client.WorkflowRun, ceilingWorkflows)
	errs := make([]error, ceilingWorkflows)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			runs[i], errs[i] = s.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: fmt.Sprintf("%s%d-%d", ceilingWorkflowIDPrefix, start.UnixNano(), i), TaskQueue: ceilingTaskQueue,
			}, "CeilingWorkflow", ceilingActivities)
			if errs[i] == nil {
				errs[i] = runs[i].Get(ctx, nil)
			}
		})
	}
	wg.Wait()
	wall, cores, processCores := clock.read(b)
	elapsed := wall.Seconds()
	events := 0
	for i, run := range runs {
		require.NoError(b, errs[i])
		events += len(history(b, s.client, run.GetID(), run.GetRunID()))
	}
	return ceiling{
		executionsPerSecond: ceilingWorkflows * ceilingActivities / elapsed,
		eventsPerSecond:     float64(events) / elapsed,
		serverCores:         cores,
		processCores:        processCores,
	}
}

// fleetCost is what each create and delete of a fleet of n proxies cost, read off their
// histories: the figures issue 21 set goals on.
type fleetCost struct {
	creates, deletes []historyCost
}

func costOfFleet(b testing.TB, s *stack, n int) fleetCost {
	b.Helper()
	f := fleetCost{creates: make([]historyCost, n), deletes: make([]historyCost, n)}
	for i := range n {
		f.creates[i] = costOf(b, s, s.operation(fleetUID(i), proxyvm.OpCreate))
		f.deletes[i] = costOf(b, s, s.operation(fleetUID(i), proxyvm.OpDelete))
	}
	return f
}

// BenchmarkCeiling_noOpWorkflowsRunActivitiesAsFastAsTheServerAllows reports the ceiling alone,
// for comparing servers and machines.
func BenchmarkCeiling_noOpWorkflowsRunActivitiesAsFastAsTheServerAllows(b *testing.B) {
	for b.Loop() {
		s := startStackWith(b, newCluster(), fastConfig(b), client.Options{Logger: warnings(b)})
		c := measureCeiling(b, s)
		s.stop()
		b.ReportMetric(c.executionsPerSecond, "activity-executions/s")
		b.ReportMetric(c.eventsPerSecond, "events/s")
		b.ReportMetric(c.serverCores, "server-cores")
		b.ReportMetric(c.processCores, "process-cores")
	}
}
