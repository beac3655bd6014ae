package e2e_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
)

// BenchmarkProxy_oneProxyBelowTheCallCap creates and deletes one proxy at the simulator's pace
// (clone 30 s, boot 20 s, the default poll cadence and budgets) over the simulator's REST API,
// as a worker reaches Proxmox: once with the default call cap (proxmox.calls: 50 requests a
// second, 3 in flight), once with none, each on a stack of its own. A cap the load stays below
// must not cost it time, though a create makes some calls back to back: it reports the capped
// run's wall time against the uncapped one's, the requests a second the proxy sent, and how many
// requests the cap held back and for how long.
func BenchmarkProxy_oneProxyBelowTheCallCap(b *testing.B) {
	for b.Loop() {
		capped := runBehindTheCap(b, 1, config.Default().Proxmox.Calls)
		uncapped := runBehindTheCap(b, 1, config.Calls{})

		b.ReportMetric(capped.elapsed.Seconds(), "s/capped")
		b.ReportMetric(uncapped.elapsed.Seconds(), "s/uncapped")
		b.ReportMetric(capped.elapsed.Seconds()/uncapped.elapsed.Seconds(), "x-uncapped")
		b.ReportMetric(float64(capped.requests)/capped.elapsed.Seconds(), "requests/s")
		b.ReportMetric(float64(capped.held), "held-requests")
		b.ReportMetric(capped.heldFor.Seconds(), "s-held")
	}
}

// capRun is what one run of the cap's benchmark measured.
type capRun struct {
	elapsed  time.Duration
	requests int
	held     int
	heldFor  time.Duration
}

// runBehindTheCap creates and deletes n proxies at once at the simulator's pace through a
// client capped by limits.
func runBehindTheCap(b *testing.B, n int, limits config.Calls) capRun {
	b.Helper()
	cluster := paceCluster()
	cfg := fastConfig(b)
	defaults := config.Default()
	cfg.Poll, cfg.Budgets, cfg.Clones.PerStorage, cfg.Proxmox.Calls = defaults.Poll, defaults.Budgets, 0, limits
	var mu sync.Mutex
	var run capRun
	api := overREST(b, cluster, &cfg, pve.ClientConfig{
		Limits: pve.CallLimits{PerSecond: limits.PerSecond, Concurrency: limits.Concurrency},
		ObserveRequest: func(string, string, time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			run.requests++
		},
		ObserveHeld: func(_ string, held time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			run.held++
			run.heldFor += held
		},
	})
	s := startStackWith(b, api, cfg, client.Options{Logger: warnings(b)})
	defer s.stop()

	start := time.Now()
	errs, _ := createThenDeleteAll(s, n, 10*time.Minute)
	elapsed := time.Since(start)
	for _, err := range errs {
		require.NoError(b, err)
	}
	assert.Empty(b, leftovers(cluster))
	mu.Lock()
	defer mu.Unlock()
	run.elapsed = elapsed
	return run
}
