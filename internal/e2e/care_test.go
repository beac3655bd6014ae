package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The care benchmark's fleet: careProxies proxies in a cluster of careOthers other VMs, watched
// for careWindow with an interval of careInterval; the figures are scaled to the shipped
// interval and backstop.
const (
	careProxies  = 30
	careOthers   = 1000
	careInterval = 2 * time.Second
	careWindow   = 10 * careInterval
)

// careCost is what watching costs, counted in the histories and at the simulator.
type careCost struct {
	// events and workflowTasks are those of every workflow the watching ran in the window:
	// the entities, their checks' GetProxy children, the observer.
	events, workflowTasks int
	// calls are the Proxmox calls made in the window.
	calls int
	// checks and listings are the checks the entities started (GetProxy children) and the
	// listings the observer made (ObserveVMs) in the window.
	checks, listings int
	// ceiling is the server's, measured on the same server after the window.
	ceiling ceiling
}

// BenchmarkCare_idleProxiesWatchedByTheObserverOrByThemselves measures what looking after idle
// proxies costs, per proxy and hour at the shipped entity.checkInterval (5 minutes) and
// entity.backstopInterval (48 hours): with the observer (one listing per interval for the
// cluster, each entity checking itself at its backstop), and without it (backstopInterval 0:
// each entity checks itself every interval, as before the observer). The cost of a listing and
// of a check are measured on a real server over a fleet of 30 idle proxies in a cluster of 1,030
// VMs, at a 2 s interval; the figures per proxy-hour and for 10,000 proxies are those costs
// scaled, as the listing's cost does not grow with the fleet and a check's does not either. The
// events a second that 10,000 proxies would cost are reported against the events a second of the
// server's ceiling, measured on the same server right after (the goal: ≤ 5%).
func BenchmarkCare_idleProxiesWatchedByTheObserverOrByThemselves(b *testing.B) {
	for b.Loop() {
		observed := measureCare(b, time.Hour)
		alone := measureCare(b, 0)
		const perHour = float64(time.Hour / (5 * time.Minute))
		const backstopsPerHour = float64(time.Hour) / float64(48*time.Hour)
		require.Zero(b, observed.checks, "idle proxies under the observer check nothing")
		require.Positive(b, observed.listings)
		require.Positive(b, alone.checks)
		// With the observer the window holds listings and no check; a backstop's check costs
		// what a check costs without it.
		checks, listings := float64(alone.checks), float64(observed.listings)
		checkEvents, checkTasks, checkCalls := float64(alone.events)/checks, float64(alone.workflowTasks)/checks, float64(alone.calls)/checks
		listEvents, listTasks, listCalls := float64(observed.events)/listings, float64(observed.workflowTasks)/listings, float64(observed.calls)/listings
		for _, n := range []float64{careProxies, 10000} {
			suffix := fmt.Sprintf("@%.0f", n)
			b.ReportMetric(listEvents*perHour/n+checkEvents*backstopsPerHour, "events/proxy-hour"+suffix)
			b.ReportMetric(listTasks*perHour/n+checkTasks*backstopsPerHour, "workflow-tasks/proxy-hour"+suffix)
			b.ReportMetric(listCalls*perHour/n+checkCalls*backstopsPerHour, "proxmox-calls/proxy-hour"+suffix)
		}
		tenThousand := (listEvents*perHour + checkEvents*backstopsPerHour*10000) / 3600
		b.ReportMetric(tenThousand/observed.ceiling.eventsPerSecond, "x-ceiling-events@10000")
		b.ReportMetric(observed.ceiling.eventsPerSecond, "ceiling-events/s")
		b.ReportMetric(checkEvents*perHour, "events/proxy-hour-without-observer")
		b.ReportMetric(checkTasks*perHour, "workflow-tasks/proxy-hour-without-observer")
		b.ReportMetric(checkCalls*perHour, "proxmox-calls/proxy-hour-without-observer")
		b.ReportMetric(listEvents, "events/listing")
		b.ReportMetric(listCalls, "proxmox-calls/listing")
		b.ReportMetric(checkEvents, "events/check")
		b.ReportMetric(checkCalls, "proxmox-calls/check")
	}
}

// measureCare creates careProxies proxies with backstop as entity.backstopInterval, and counts
// what watching them costs in careWindow once they are idle.
func measureCare(b *testing.B, backstop time.Duration) careCost {
	b.Helper()
	cluster := newCluster()
	for i := range careOthers {
		require.NoError(b, cluster.AddVM(pvesim.VM{Node: "pve1", VMID: 500000 + i, Running: true, Config: pve.VMConfig{"name": fmt.Sprintf("other-%d", i)}}))
	}
	cfg := fastConfig(b)
	cfg.Entity = config.Entity{CheckInterval: careInterval, BackstopInterval: backstop, CloseAfter: time.Hour, HistoryEvents: 100000}
	s := startStack(b, cluster, cfg)
	defer s.stop()
	uids := make([]string, careProxies)
	var wg sync.WaitGroup
	for i := range uids {
		uids[i] = fmt.Sprintf("c0ffee00-0000-4000-8000-%012d", i)
		wg.Go(func() { serve[proxyvm.CreateProxyResult](b, s.startCreate(createInput(uids[i]))) })
	}
	wg.Wait()
	if backstop > 0 {
		require.Eventually(b, func() bool {
			val, err := s.client.QueryWorkflow(context.Background(), core.ObserverWorkflowID(core.DefaultTaskQueue), "", core.ObserverQuery)
			var st fleet.ObserverStatus
			return err == nil && val.Get(&st) == nil && st.Watching == careProxies && st.Listings > 1
		}, time.Minute, 100*time.Millisecond, "the observer watches the fleet")
	} else {
		// Every entity has checked at least once since its create: its checks are under way.
		time.Sleep(2 * careInterval)
	}
	calls := len(cluster.Calls())
	from := time.Now()
	time.Sleep(careWindow)
	to := time.Now()
	cost := careCost{calls: len(cluster.Calls()) - calls}
	ids := []string{core.ObserverWorkflowID(core.DefaultTaskQueue)}
	for _, uid := range uids {
		ids = append(ids, core.ProxyWorkflowID(uid))
		// The checks' children: at most one a interval, numbered from 1.
		for n := 1; n <= int(time.Since(from)/careInterval)*3+10; n++ {
			ids = append(ids, core.GetProxyWorkflowID(uid, fmt.Sprintf("check-%d", n)))
		}
	}
	for _, id := range ids {
		c := costBetween(b, s.client, id, from, to)
		cost.events += c.events
		cost.workflowTasks += c.workflowTasks
		cost.checks += c.checks
		cost.listings += c.listings
	}
	if backstop > 0 {
		cost.ceiling = measureCeiling(b, s)
	}
	return cost
}

// costBetween counts the events of the latest run of workflowID that happened between from and
// to: all of them, the workflow tasks completed, the children started (an entity's checks) and
// the listings scheduled (an observer's). A workflow ID that never ran counts nothing.
func costBetween(b *testing.B, c client.Client, workflowID string, from, to time.Time) careCost {
	b.Helper()
	var cost careCost
	iter := c.GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return cost // never ran
		}
		if at := ev.GetEventTime().AsTime(); at.Before(from) || at.After(to) {
			continue
		}
		cost.events++
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			cost.workflowTasks++
		case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
			cost.checks++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "ObserveVMs" {
				cost.listings++
			}
		}
	}
	return cost
}

// The backlog benchmark's fleet: backlogProxies proxies checking themselves every
// backlogInterval, three calls a check, through a client capped at backlogCap: twice and more
// the calls the cap lets through, so checks queue for it all the time.
const (
	backlogProxies  = 6
	backlogInterval = time.Second
)

var backlogCap = pve.CallLimits{PerSecond: 5, Concurrency: 2}

// BenchmarkCare_aCreateBehindABacklogOfChecks measures a create sent while the checks of a
// fleet keep the worker's call cap busy, against the same create with no checks: once with the
// calls by priority, as shipped (the checks' calls wait behind the create's), once with every
// call of one priority, first come, first served, as before. It reports each create's wall
// time, the first two against the one with no checks, and whether the flat one failed (its
// calls, queued behind the checks, ran out of their budgets).
func BenchmarkCare_aCreateBehindABacklogOfChecks(b *testing.B) {
	for b.Loop() {
		alone, err := createBehindChecks(b, 0, false)
		require.NoError(b, err)
		prioritized, err := createBehindChecks(b, backlogProxies, false)
		require.NoError(b, err)
		flat, flatErr := createBehindChecks(b, backlogProxies, true)
		b.ReportMetric(alone.Seconds(), "s/create-alone")
		b.ReportMetric(prioritized.Seconds(), "s/create-behind-checks")
		b.ReportMetric(prioritized.Seconds()/alone.Seconds(), "x-alone")
		b.ReportMetric(flat.Seconds(), "s/create-behind-checks-flat")
		b.ReportMetric(flat.Seconds()/alone.Seconds(), "x-alone-flat")
		failed := 0.0
		if flatErr != nil {
			b.Logf("the create behind the checks, with calls of one priority, failed after %s: %v", flat.Round(time.Millisecond), flatErr)
			failed = 1
		}
		b.ReportMetric(failed, "flat-create-failed")
	}
}

// createBehindChecks creates fleet proxies that check themselves every backlogInterval behind
// backlogCap, lets their checks queue for the cap, and times one more create; flat gives every
// call one priority.
func createBehindChecks(b *testing.B, fleet int, flat bool) (time.Duration, error) {
	b.Helper()
	cluster := newCluster()
	cfg := fastConfig(b)
	cfg.Entity = config.Entity{CheckInterval: backlogInterval, BackstopInterval: 0, CloseAfter: time.Hour, HistoryEvents: 100000}
	api := overREST(b, cluster, &cfg, pve.ClientConfig{Limits: backlogCap})
	s := newStack(b, api, cfg, client.Options{Logger: warnings(b)})
	s.flatPriorities = flat
	s.startWorker()
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range fleet {
		wg.Go(func() {
			req := s.startCreate(createInput(fmt.Sprintf("c0ffee00-0000-4000-8000-%012d", i)))
			require.NoError(b, req.Get(ctx, nil))
		})
	}
	wg.Wait()
	if fleet > 0 {
		time.Sleep(5 * backlogInterval) // the checks queue
	}
	start := time.Now()
	err := s.startCreate(createInput(uid)).Get(ctx, nil)
	return time.Since(start), err
}

// BenchmarkCare_workerMemoryPerIdleEntity creates careFleet proxies, half at a time, and, once
// every one of each half is idle under the observer's watch at the shipped interval and
// backstop, reads the resident memory of the test process (the worker with its entities in its
// sticky cache, but also the simulator's VMs and the client's bookkeeping: an upper bound of an
// entity's share). It reports the memory each half added per entity, their ratio (1 when the
// memory grows linearly with the entities), the RSS projected to 10,000 entities from the second
// half's slope, in GB, and the goroutines per entity.
func BenchmarkCare_workerMemoryPerIdleEntity(b *testing.B) {
	const careFleet = 1000
	for b.Loop() {
		cluster := newCluster(roomForFleet)
		cfg := benchConfig(b)
		cfg.Clones.PerStorage = 0
		cfg.Entity = config.Default().Entity
		s := startStackWith(b, cluster, cfg, client.Options{Logger: warnings(b)})
		rss, goroutines := []int64{settledRSS(b)}, runtime.NumGoroutine()
		for half := range 2 {
			reqs := make([]*starter.Request, careFleet/2)
			for i := range reqs {
				reqs[i] = s.startCreate(createInput(fleetUID(half*careFleet/2 + i)))
			}
			require.NoError(b, errors.Join(awaitAll(reqs, 10*time.Minute)...))
			watching := (half + 1) * careFleet / 2
			require.Eventually(b, func() bool {
				val, err := s.client.QueryWorkflow(context.Background(), core.ObserverWorkflowID(core.DefaultTaskQueue), "", core.ObserverQuery)
				var st fleet.ObserverStatus
				return err == nil && val.Get(&st) == nil && st.Watching == watching
			}, 5*time.Minute, time.Second, "the observer watches the fleet")
			rss = append(rss, settledRSS(b))
		}
		first, second := float64(rss[1]-rss[0])/(careFleet/2), float64(rss[2]-rss[1])/(careFleet/2)

		b.ReportMetric(float64(rss[2])/(1<<20), "MiB-rss")
		b.ReportMetric(first/(1<<10), "KiB/entity-first-half")
		b.ReportMetric(second/(1<<10), "KiB/entity")
		b.ReportMetric(second/first, "x-linear")
		b.ReportMetric((float64(rss[2])+(10000-careFleet)*second)/1e9, "GB-rss@10000")
		b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/careFleet, "goroutines/entity")
		s.stop()
	}
}

// settledRSS is the process's resident memory once garbage is collected and returned to the
// system, in bytes.
func settledRSS(b *testing.B) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	time.Sleep(time.Second)
	return procStatusBytes(b, "VmRSS:")
}

// The outage benchmark's fleet: outageProxies idle proxies under the observer's watch, whose
// worker is away for outageIntervals intervals, while outageStopped of their VMs are stopped by
// hand.
const (
	outageProxies   = 30
	outageIntervals = 5
	outageStopped   = 3
)

// BenchmarkCare_aWorkerOutage stops the only worker of outageProxies idle proxies, watched by the
// observer at a 2 s interval, for outageIntervals intervals (issue 32 names 5 minutes: one
// shipped interval; five make the backlog larger), stops outageStopped of their VMs by hand
// meanwhile, and starts a worker again with a create sent at once. It reports, in intervals from
// the restart, when the observer had listed every proxy again and when the last stopped VM ran
// again (goal: every proxy checked within two), and the create's wall time against the same
// create on the idle system before the outage (goal: ≤ 1.2×).
func BenchmarkCare_aWorkerOutage(b *testing.B) {
	for b.Loop() {
		cluster := newCluster()
		s := startStackWith(b, cluster, observedConfig(b), client.Options{Logger: warnings(b)})
		require.NoError(b, errors.Join(createAll(b, s, outageProxies, 5*time.Minute)...))
		require.Eventually(b, func() bool {
			return queried[fleet.ObserverStatus](b, s, core.ObserverWorkflowID(core.DefaultTaskQueue), core.ObserverQuery).Watching == outageProxies
		}, time.Minute, 100*time.Millisecond, "the observer watches the fleet")
		idle := timedCreate(b, s, fleetUID(outageProxies))

		s.worker.Stop()
		var stopped []int
		for _, v := range cluster.VMs() {
			if v.Running && v.Config["template"] != "1" && len(stopped) < outageStopped {
				_, err := cluster.Stop(context.Background(), v.Node, v.VMID)
				require.NoError(b, err)
				stopped = append(stopped, v.VMID)
			}
		}
		time.Sleep(outageIntervals * observedInterval)
		s.startWorker()
		restarted := time.Now()
		afterOutage := timedCreate(b, s, fleetUID(outageProxies+1))
		require.Eventually(b, func() bool {
			for _, vmid := range stopped {
				if !runningVM(cluster, vmid) {
					return false
				}
			}
			return true
		}, time.Minute, 50*time.Millisecond, "the VMs stopped during the outage run again")
		healed := time.Since(restarted)
		var listed time.Time
		require.Eventually(b, func() bool {
			listed = queried[fleet.ObserverStatus](b, s, core.ObserverWorkflowID(core.DefaultTaskQueue), core.ObserverQuery).ListedAt
			return listed.After(restarted)
		}, time.Minute, 50*time.Millisecond, "the observer lists the cluster again")

		b.ReportMetric(listed.Sub(restarted).Seconds()/observedInterval.Seconds(), "intervals-to-list")
		b.ReportMetric(healed.Seconds()/observedInterval.Seconds(), "intervals-to-heal")
		b.ReportMetric(idle.Seconds(), "s/create-idle")
		b.ReportMetric(afterOutage.Seconds(), "s/create-after-outage")
		b.ReportMetric(afterOutage.Seconds()/idle.Seconds(), "x-idle")
		s.stop()
	}
}

// timedCreate creates proxy uid through its entity and returns how long the request took.
func timedCreate(b *testing.B, s *stack, uid string) time.Duration {
	b.Helper()
	start := time.Now()
	_, err := served[proxyvm.CreateProxyResult](b, s.startCreate(createInput(uid)))
	require.NoError(b, err)
	return time.Since(start)
}
