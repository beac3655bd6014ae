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
	"github.com/pveflow/pveflow/workflows"
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
}

// BenchmarkCare_idleProxiesWatchedByTheObserverOrByThemselves measures what looking after idle
// proxies costs, per proxy and hour at the shipped entity.checkInterval (5 minutes) and
// entity.backstopInterval (48 hours): with the observer (one listing per interval for the
// cluster, each entity checking itself at its backstop), and without it (backstopInterval 0:
// each entity checks itself every interval, as before the observer). The cost of a listing and
// of a check are measured on a real server over a fleet of 30 idle proxies in a cluster of 1,030
// VMs, at a 2 s interval; the figures per proxy-hour and for 10,000 proxies are those costs
// scaled, as the listing's cost does not grow with the fleet and a check's does not either.
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
		wg.Go(func() { serve[workflows.CreateProxyResult](b, s.startCreate(createInput(uids[i]))) })
	}
	wg.Wait()
	if backstop > 0 {
		require.Eventually(b, func() bool {
			val, err := s.client.QueryWorkflow(context.Background(), workflows.ObserverWorkflowID(workflows.DefaultTaskQueue), "", workflows.ObserverQuery)
			var st workflows.ObserverStatus
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
	ids := []string{workflows.ObserverWorkflowID(workflows.DefaultTaskQueue)}
	for _, uid := range uids {
		ids = append(ids, workflows.ProxyWorkflowID(uid))
		// The checks' children: at most one a interval, numbered from 1.
		for n := 1; n <= int(time.Since(from)/careInterval)*3+10; n++ {
			ids = append(ids, workflows.GetProxyWorkflowID(uid, fmt.Sprintf("check-%d", n)))
		}
	}
	for _, id := range ids {
		c := costBetween(b, s.client, id, from, to)
		cost.events += c.events
		cost.workflowTasks += c.workflowTasks
		cost.checks += c.checks
		cost.listings += c.listings
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

// BenchmarkCare_workerMemoryPerIdleEntity creates careFleet proxies at once and, once every one
// is idle under the observer's watch at the shipped interval and backstop, reports the resident
// memory the test process gained (the worker's entities in its sticky cache, but also the
// simulator's VMs and the client's bookkeeping: an upper bound of an entity's share), per
// entity and projected to 10,000, and the goroutines per entity.
func BenchmarkCare_workerMemoryPerIdleEntity(b *testing.B) {
	const careFleet = 1000
	for b.Loop() {
		cluster := newCluster(roomForFleet)
		cfg := benchConfig(b)
		cfg.Clones.PerStorage = 0
		cfg.Entity = config.Default().Entity
		s := startStackWith(b, cluster, cfg, client.Options{Logger: warnings(b)})
		before, goroutines := settledRSS(b), runtime.NumGoroutine()

		errs := createAll(b, s, careFleet, 10*time.Minute)
		require.NoError(b, errors.Join(errs...))
		require.Eventually(b, func() bool {
			val, err := s.client.QueryWorkflow(context.Background(), workflows.ObserverWorkflowID(workflows.DefaultTaskQueue), "", workflows.ObserverQuery)
			var st workflows.ObserverStatus
			return err == nil && val.Get(&st) == nil && st.Watching == careFleet
		}, 5*time.Minute, time.Second, "the observer watches the fleet")
		after := settledRSS(b)
		perEntity := float64(after-before) / careFleet

		b.ReportMetric(float64(after)/(1<<20), "MiB-rss")
		b.ReportMetric(perEntity/(1<<10), "KiB/entity")
		b.ReportMetric((float64(before)+10000*perEntity)/(1<<30), "GiB-rss@10000")
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
