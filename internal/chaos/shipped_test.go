package chaos

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// asShipped is the fleet a default install meets: one worker, as make run and the compose file
// run, and a hundred proxies at a small real host's pace (clones of 4 s), with no faults and no
// kills.
var asShipped = scenario{workers: 1, proxies: 100, taskScale: 1, shipped: true}

// BenchmarkShipped_hundredProxiesCreatedAndDeletedAtOnce creates a hundred proxies at once and
// deletes each as soon as its create is served, as the fleet benchmarks do
// (internal/e2e/fleet_test.go), but as shipped: the real binaries in their own processes (the
// embedded server, the simulator over REST, a worker), the worker with every default
// (shippedConfig: the poll cadence, the call cap of proxmox.calls's default, four clone slots a
// storage, the budgets and the care), the simulator with its own
// (a small real host's task times, its status cache's lag, a guest's 5 s boot). It reports the
// fleet's time against the floor of the simulator's task times (the clones four at a time, then
// the last proxy's other tasks and its delete's), the Proxmox requests a proxy cost, and the
// share of the cap's rate the fleet's requests used over its time: near 1, the cap bounded the
// fleet, not the clone slots. One run: two and a half minutes.
func BenchmarkShipped_hundredProxiesCreatedAndDeletedAtOnce(b *testing.B) {
	defaults := config.Default()
	perStorage, perSecond := defaults.Clones.PerStorage, defaults.Proxmox.Calls.PerSecond
	for range b.N {
		r := newRun(b, asShipped, 41, false)
		began := time.Now()
		var fleet sync.WaitGroup
		for i := range asShipped.proxies {
			uid := fmt.Sprintf("shipped-%03d", i)
			fleet.Go(func() {
				if !r.ask(uid, starter.Create, uid+"-create", createInput(uid, false)) {
					r.fail("create %s did not succeed", uid)
					return
				}
				if !r.ask(uid, starter.Delete, uid+"-delete", proxyvm.DeleteProxyInput{UID: uid}) {
					r.fail("delete %s did not succeed", uid)
				}
			})
		}
		fleet.Wait()
		took := time.Since(began)
		st := r.simState()

		create, del := st.Pace.ProxyFloor()
		clone := st.Pace.TaskDurations["qmclone"]
		turns := time.Duration((asShipped.proxies+perStorage-1)/perStorage) * clone
		floor := turns - clone + create + del
		use := slotUse(st.Clones, perStorage)
		b.ReportMetric(took.Seconds(), "s/fleet")
		b.ReportMetric(took.Seconds()/floor.Seconds(), "x-floor")
		b.ReportMetric(float64(st.Calls)/float64(asShipped.proxies), "requests/proxy")
		b.ReportMetric(float64(st.Calls)/took.Seconds()/perSecond, "x-cap-rate")
		b.ReportMetric(use.busy, "busy-share")
		b.ReportMetric(use.turnP50.Seconds(), "s/turn-p50")
		b.ReportMetric(firstCloneAfter(st.Clones, began).Seconds(), "s/first-clone")
		b.Logf("%d proxies created and deleted in %s, %.2f× the floor (%s); %d Proxmox requests, %.1f a proxy, %.1f a second against the cap's %.0f; clone slots busy %.2f, a turn p50 %s",
			asShipped.proxies, took.Round(time.Millisecond), took.Seconds()/floor.Seconds(), floor, st.Calls,
			float64(st.Calls)/float64(asShipped.proxies), float64(st.Calls)/took.Seconds(), perSecond, use.busy, use.turnP50)
		assert.Empty(b, vmsByUID(st), "VMs with pveflow's mark left after every delete")
		r.mustNotHaveFailed()
	}
}

// firstCloneAfter is how long after began the first clone started.
func firstCloneAfter(runs []pvesim.CloneRun, began time.Time) time.Duration {
	if len(runs) == 0 {
		return 0
	}
	first := slices.MinFunc(runs, func(a, b pvesim.CloneRun) int { return a.Start.Compare(b.Start) })
	return first.Start.Sub(began)
}
