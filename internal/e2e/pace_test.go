package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pvesim"
)

// paceDurations are the simulator's task durations for BenchmarkProxy: a clone of 30 s, the
// other tasks of one or two seconds, as a small VM on local storage takes.
var paceDurations = map[string]time.Duration{
	"qmclone": 30 * time.Second, "imgcopy": time.Second, "resize": time.Second, "qmstart": 2 * time.Second,
	"imgdel": 500 * time.Millisecond, "qmstop": 2 * time.Second, "qmdestroy": time.Second,
}

// paceBoot is how long the simulated guest takes from its start to its agent's first answer.
const paceBoot = 20 * time.Second

// paceCluster is a simulator at that pace.
func paceCluster() *pvesim.Cluster {
	return newCluster(func(o *pvesim.Options) {
		o.TaskDurations = paceDurations
		o.AgentBootDelay = paceBoot
	})
}

// BenchmarkProxy_createAndDeleteAtTheSimulatorsPace creates and deletes one proxy against a
// simulator whose tasks take what they take on a small cluster, with the default poll cadence
// and budgets, and reports the wall time against the floor and against a plain sequential Go
// program (plainProgram) run right after it on a simulator of its own, and what each run cost
// Temporal: its operations' histories alone, as issue 21 counted them, and everything the
// server did for the proxy while it came and went (workBetween: its entity, its operations, the
// admission and the observer it started), local activities counted as executions; and the
// Proxmox requests it sent against the plain program's.
func BenchmarkProxy_createAndDeleteAtTheSimulatorsPace(b *testing.B) {
	for b.Loop() {
		cfg := fastConfig(b)
		defaults := config.Default()
		cfg.Poll, cfg.Budgets = defaults.Poll, defaults.Budgets
		cluster := paceCluster()
		s := startStackWith(b, cluster, cfg, client.Options{Logger: warnings(b)})
		start := time.Now()
		create, del := createAndDelete(b, s, uid)
		elapsed := time.Since(start)
		c, d := costOf(b, s, create), costOf(b, s, del)
		work := workBetween(b, s, start, time.Now())
		requests := len(cluster.Calls())
		s.stop()
		late := latestSeenEnd(b, cluster, cfg.Poll)

		plain := paceCluster()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		start = time.Now()
		require.NoError(b, plainProgram{api: plain, cfg: cfg, poll: cfg.Poll}.createAndDelete(ctx, uid, proxy.VMIDFor(uid, cfg.Proxmox.VMIDRange, 0)))
		plainElapsed := time.Since(start)
		cancel()
		require.Empty(b, leftovers(plain))
		plainRequests := len(plain.Calls())

		b.ReportMetric(elapsed.Seconds(), "s/create+delete")
		b.ReportMetric(plainElapsed.Seconds(), "s/plain-program")
		b.ReportMetric(elapsed.Seconds()/plainElapsed.Seconds(), "x-plain")
		createFloor, deleteFloor := cluster.Pace().ProxyFloor()
		b.ReportMetric(elapsed.Seconds()/(createFloor+deleteFloor).Seconds(), "x-floor")
		b.ReportMetric(float64(c.events), "events/create")
		b.ReportMetric(float64(d.events), "events/delete")
		b.ReportMetric(float64(c.executions+d.executions), "activity-executions/create+delete")
		b.ReportMetric(float64(work.events), "events/proxy")
		b.ReportMetric(float64(work.workflowTasks), "workflow-tasks/proxy")
		b.ReportMetric(float64(work.executions()), "executions/proxy")
		b.ReportMetric(float64(work.localActivities), "local-activity-executions/proxy")
		b.ReportMetric(float64(requests), "proxmox-requests/proxy")
		b.ReportMetric(float64(plainRequests), "proxmox-requests/plain-program")
		b.ReportMetric(float64(requests)/float64(plainRequests), "x-plain-requests")
		b.ReportMetric(late, "x-task-end-seen-bound")
		b.Logf("the proxy's events by workflow type: %v", work.eventsByType)
	}
}

// latestSeenEnd is how late the latest-seen of cluster's tasks was seen to have ended, against
// the bound issue 21 sets: the part BackoffCoefficient-1 of its duration (20%), or
// InitialInterval (1 s), whichever is more. Above 1, a task was seen later than promised.
func latestSeenEnd(tb testing.TB, cluster *pvesim.Cluster, p config.Poll) float64 {
	tb.Helper()
	latest := 0.0
	for _, task := range cluster.TaskRuns() {
		require.False(tb, task.Seen.IsZero(), "the end of %s %s was never seen", task.Type, task.UPID)
		took := task.End.Sub(task.Start)
		bound := max(time.Duration((p.BackoffCoefficient-1)*float64(took)), p.InitialInterval)
		latest = max(latest, task.Seen.Sub(task.End).Seconds()/bound.Seconds())
	}
	return latest
}
