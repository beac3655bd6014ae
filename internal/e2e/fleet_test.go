package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// contendedCluster is the simulator's default cluster where clones queue for their storage's
// allocation lock as on PVE: each of the template's two disks holds local-lvm's lock for hold.
func contendedCluster(hold, clone time.Duration) *pvesim.Cluster {
	return newCluster(func(o *pvesim.Options) {
		o.StorageLockHold = hold
		o.TaskDurations = map[string]time.Duration{"qmclone": clone}
	})
}

// lockTimeouts counts the clone tasks that failed on a storage's lock.
func lockTimeouts(c *pvesim.Cluster) int {
	n := 0
	for _, run := range c.CloneRuns() {
		if strings.Contains(run.ExitStatus, "can't lock file '/var/lock/pve-manager/pve-storage-") {
			n++
		}
	}
	return n
}

// fleetUID is the UID of the i-th proxy of a fleet.
func fleetUID(i int) string { return fmt.Sprintf("fleet-%02d", i) }

// createAll sends the create requests of n proxies at once and waits for all of them.
func createAll(t testing.TB, s *stack, n int, timeout time.Duration) []error {
	reqs := make([]*starter.Request, n)
	for i := range n {
		reqs[i] = s.startCreate(createInput(fleetUID(i)))
	}
	return awaitAll(reqs, timeout)
}

// createThenDeleteAll sends the create requests of n proxies at once and deletes each proxy as
// soon as its create is served, as a fleet whose proxies each come and go: it returns each
// proxy's error and when the last create was served.
func createThenDeleteAll(s *stack, n int, timeout time.Duration) (errs []error, createsServed time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs = make([]error, n)
	var mu sync.Mutex
	created := func() {
		mu.Lock()
		defer mu.Unlock()
		createsServed = time.Now()
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = createThenDelete(ctx, s, fleetUID(i), created) })
	}
	wg.Wait()
	return errs, createsServed
}

// createThenDelete creates the proxy uid, calls created once the create is served, and deletes
// the proxy.
func createThenDelete(ctx context.Context, s *stack, uid string, created func()) error {
	req, err := s.starter.Create(ctx, createInput(uid))
	if err == nil {
		err = req.Get(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", uid, err)
	}
	created()
	if req, err = s.starter.Delete(ctx, proxyvm.DeleteProxyInput{UID: uid}); err == nil {
		err = req.Get(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", uid, err)
	}
	return nil
}

// awaitAll waits, within timeout, for the operations that serve reqs.
func awaitAll(reqs []*starter.Request, timeout time.Duration) []error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { errs[i] = req.Get(ctx, nil) })
	}
	wg.Wait()
	return errs
}

func TestE2E_clonesAdmittedPerStorageNeverExceedTheLimitAndAllSucceed(t *testing.T) {
	const n, limit = 8, 2
	cluster := contendedCluster(time.Second, time.Second)
	cfg := fastConfig(t)
	cfg.Clones.PerStorage = limit
	s := startStack(t, cluster, cfg)
	// Six of the eight wait: one of them is seen queued behind another, its place asked of the
	// admission as pveflow status asks it.
	var queued core.Status
	seen := make(chan struct{})
	go func() {
		defer close(seen)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for i := range n {
				p, err := s.starter.Progress(context.Background(), fleetUID(i), starter.Create)
				if err == nil && p.Phase == core.PhaseQueued && p.QueuedBehind > 0 {
					queued = p.Status
					return
				}
			}
		}
	}()

	errs := createAll(t, s, n, 2*time.Minute)

	for i, err := range errs {
		assert.NoError(t, err, "fleet-%02d", i)
	}
	assert.LessOrEqual(t, cluster.MaxConcurrentClones("pve1", "local-lvm"), limit)
	assert.Zero(t, lockTimeouts(cluster))
	<-seen
	assert.Equal(t, core.PhaseQueued, queued.Phase, "a create was seen queued")
	assert.Contains(t, queued.Step, fmt.Sprintf("%d ahead", queued.QueuedBehind))
}

// withAndWithoutAdmission runs bench as two sub-benchmarks: with clone admission
// (clones.perStorage 4, the default) and without.
func withAndWithoutAdmission(b *testing.B, bench func(b *testing.B, perStorage int)) {
	for _, perStorage := range []int{4, 0} {
		name := fmt.Sprintf("perStorage=%d", perStorage)
		if perStorage == 0 {
			name = "admission=off"
		}
		b.Run(name, func(b *testing.B) { bench(b, perStorage) })
	}
}

// BenchmarkFleet_fiftyCreatesAtOnceOntoOneStorage starts fifty creates at once against a
// cluster whose local-lvm serialises disk allocation as PVE's lock does, with admission
// (clones.perStorage 4) and without. docs/performance.md records the figures.
func BenchmarkFleet_fiftyCreatesAtOnceOntoOneStorage(b *testing.B) {
	withAndWithoutAdmission(b, func(b *testing.B, perStorage int) {
		for b.Loop() {
			cluster := contendedCluster(time.Second, 2*time.Second)
			cfg := benchConfig(b)
			cfg.Clones.PerStorage = perStorage
			s := startStackWith(b, cluster, cfg, client.Options{Logger: warnings(b)})
			start := time.Now()
			errs := createAll(b, s, 50, 10*time.Minute)
			failed := 0
			for _, err := range errs {
				if err != nil {
					failed++
				}
			}
			b.ReportMetric(time.Since(start).Seconds(), "s/50creates")
			b.ReportMetric(float64(50-failed), "succeeded")
			b.ReportMetric(float64(failed), "failed")
			b.ReportMetric(float64(lockTimeouts(cluster)), "lock-timeouts")
			b.ReportMetric(float64(cluster.MaxConcurrentClones("pve1", "local-lvm")), "max-concurrent-clones")
			var events, executions int
			for i := range 50 {
				c := costOf(b, s, s.operation(fleetUID(i), proxyvm.OpCreate))
				events += c.events
				executions += c.executions
			}
			b.ReportMetric(float64(events)/50, "events/create")
			b.ReportMetric(float64(executions)/50, "activity-executions/create")
			s.stop()
		}
	})
}

// BenchmarkFleet_proxiesCreatedAndDeletedAtOnce creates a hundred proxies, then three hundred,
// at once, and deletes each as soon as its create is served (measureFleet), with admission
// (clones.perStorage 4) and without, on the embedded server.
func BenchmarkFleet_proxiesCreatedAndDeletedAtOnce(b *testing.B) {
	for _, n := range []int{100, 300} {
		b.Run(fmt.Sprintf("proxies=%d", n), func(b *testing.B) {
			withAndWithoutAdmission(b, func(b *testing.B, perStorage int) {
				for b.Loop() {
					reportFleet(b, runsOfFleet(n), func(tb testing.TB) fleetFigures {
						cluster := fleetCluster()
						s := startStackWith(tb, cluster, fleetConfig(tb, perStorage), client.Options{Logger: warnings(b)})
						return measureFleet(tb, s, cluster, n)
					})
				}
			})
		})
	}
}

// fleetClone is how long a clone takes in the fleet benchmarks.
const fleetClone = time.Second

// fleetCluster is the simulator of the fleet benchmarks: its clones take fleetClone, side by
// side, and its local-lvm has room for every proxy.
func fleetCluster() *pvesim.Cluster {
	return newCluster(func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": fleetClone}
		roomForFleet(o)
	})
}

// fleetConfig is benchConfig with clones.perStorage.
func fleetConfig(tb testing.TB, perStorage int) config.Config {
	cfg := benchConfig(tb)
	cfg.Clones.PerStorage = perStorage
	return cfg
}

// runsOfFleet is how many times a benchmark measures a fleet of n proxies, each time on a fresh
// stack: three for a hundred, whose ratios vary by up to a tenth from run to run on two cores
// (docs/performance.md, "Run to run"), and one for three hundred, whose run takes two minutes
// and whose margins are wider.
func runsOfFleet(n int) int {
	if n > 100 {
		return 1
	}
	return 3
}

// fleetFigures are what one run of measureFleet found, by unit.
type fleetFigures map[string]float64

// worstOfRuns are the figures of which reportFleet reports the worst run, not the median: a
// failure in any run, the largest history, the most clones at once, the slowest first proxy.
var worstOfRuns = []string{"failed", "events/create-max", "max-concurrent-clones", "s/first-proxy"}

// reportFleet runs measure runs times, each in a scope of its own whose cleanups (its stack,
// its server or cluster) run before the next, and reports what summarize makes of the runs.
func reportFleet(b *testing.B, runs int, measure func(tb testing.TB) fleetFigures) {
	b.Helper()
	var all []fleetFigures
	for range runs {
		run := &scope{TB: b}
		all = append(all, measure(run))
		run.close()
	}
	for unit, v := range summarize(all) {
		b.ReportMetric(v, unit)
	}
}

// summarize is each figure's median over runs, or its worst (worstOfRuns): the largest. A
// ratio (a unit that starts with "x-") measured more than once also has its spread, the least
// and the largest of its runs, as unit-min and unit-max, which the table prints beside it.
func summarize(runs []fleetFigures) fleetFigures {
	byUnit := map[string][]float64{}
	for _, figures := range runs {
		for unit, v := range figures {
			byUnit[unit] = append(byUnit[unit], v)
		}
	}
	out := fleetFigures{}
	for unit, values := range byUnit {
		slices.Sort(values)
		mid := len(values) / 2
		switch {
		case slices.Contains(worstOfRuns, unit):
			out[unit] = values[len(values)-1]
		case len(values)%2 == 0:
			out[unit] = (values[mid-1] + values[mid]) / 2
		default:
			out[unit] = values[mid]
		}
		if strings.HasPrefix(unit, "x-") && len(values) > 1 {
			out[unit+"-min"], out[unit+"-max"] = values[0], values[len(values)-1]
		}
	}
	return out
}

// scope is a testing.TB whose cleanups run when close is called rather than when the test
// ends: one run of a benchmark that runs several, each on a fresh stack.
type scope struct {
	testing.TB
	cleanups []func()
}

func (s *scope) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// close runs the cleanups, the last registered first, as testing does.
func (s *scope) close() {
	for _, f := range slices.Backward(s.cleanups) {
		f()
	}
	s.cleanups = nil
}

// measureFleet creates n proxies at once on s, and deletes each as soon as its create is
// served, and returns how long the fleet took against its floor, how hard it drove the server
// against the server's ceiling, and what the fleet cost per proxy. The floor is the simulator's
// task times alone, with no time of pveflow's in it (pvesim.Pace.ProxyFloor): the clones perStorage at a
// time, then the last clone's create's other tasks and its delete's. Without admission there is
// no clone limit, and the floor is one proxy's create and delete. The creates alone are also
// returned against theirs (the clone turns and one create's other tasks). What the fleet cost
// counts every workflow the server ran meanwhile (workBetween: the entities, the operations,
// the admission, the observer), local activities among the executions. The server's ceiling
// (measureCeiling), measured on the same stack before the fleet, gives the fleet's executions
// and events a second, and the server's busy cores, their ratios; the test process's cores
// (worker, simulator, clients) are returned beside them.
//
// A first proxy, created and deleted before all that, is not part of any figure but its own
// (s/first-proxy): a fresh server serves it cold. On make cluster's topology it once met the
// second server still taking its history shards, which a joining server now waits out
// (docs/deploy.md); its history is logged if it is slow again.
func measureFleet(tb testing.TB, s *stack, cluster *pvesim.Cluster, n int) fleetFigures {
	tb.Helper()
	first := time.Now()
	firstProxy(tb, s)
	firstTook := time.Since(first)

	aloneCreate, aloneDelete := cluster.Pace().ProxyFloor()
	floor, createsFloor := aloneCreate+aloneDelete, aloneCreate
	perStorage := s.cfg.Clones.PerStorage
	if perStorage > 0 {
		clone := cluster.TaskDuration("qmclone")
		turns := time.Duration((n+perStorage-1)/perStorage) * clone
		floor, createsFloor = turns+floor-clone, turns+aloneCreate-clone
	}
	ceiling := measureCeiling(tb, s)

	clock := startServerClock(tb, s)
	errs, createsServed := createThenDeleteAll(s, n, 15*time.Minute)
	elapsed, serverCores, processCores := clock.read(tb)
	failed := 0
	for _, err := range errs {
		if err != nil {
			tb.Log(err)
			failed++
		}
	}
	work := workBetween(tb, s, clock.start, time.Now())
	fleet := costOfFleet(tb, s, n)
	creates := make([]float64, n)
	var deletes float64
	for i := range n {
		creates[i] = float64(fleet.creates[i].events)
		deletes += float64(fleet.deletes[i].events)
	}
	slices.Sort(creates)
	assert.Empty(tb, leftovers(cluster))
	figures := fleetFigures{
		"s/first-proxy":          firstTook.Seconds(),
		"s/fleet":                elapsed.Seconds(),
		"x-floor":                elapsed.Seconds() / floor.Seconds(),
		"x-floor-creates":        createsServed.Sub(clock.start).Seconds() / createsFloor.Seconds(),
		"failed":                 float64(failed),
		"events/create-p50":      creates[n/2],
		"events/create-max":      creates[n-1],
		"events/delete":          deletes / float64(n),
		"events/proxy":           float64(work.events) / float64(n),
		"executions/proxy":       float64(work.executions()) / float64(n),
		"x-ceiling-executions":   float64(work.executions()) / elapsed.Seconds() / ceiling.executionsPerSecond,
		"x-ceiling-events":       float64(work.events) / elapsed.Seconds() / ceiling.eventsPerSecond,
		"x-ceiling-server-cores": serverCores / ceiling.serverCores,
		"process-cores":          processCores,
		"max-concurrent-clones":  float64(cluster.MaxConcurrentClones("pve1", "local-lvm")),
	}
	if perStorage > 0 {
		firstClone, turn := cloneTurns(cluster, clock.start, perStorage)
		figures["s/first-clone"], figures["ms/clone-turn-p50"] = firstClone.Seconds(), float64(turn.Milliseconds())
	}
	return figures
}

// cloneTurns is when the first clone of the fleet that began at start started, after start,
// and how long a clone slot stayed free between one clone's end and the next clone's start, the
// median over the fleet: where the run's time over the clone limit's floor goes, besides the
// last proxy's steps. The clones share perStorage slots, so the k-th clone to start took the
// slot of the (k−perStorage)-th to end.
func cloneTurns(c *pvesim.Cluster, start time.Time, perStorage int) (first, turn time.Duration) {
	var starts, ends []time.Time
	for _, run := range c.TaskRuns() {
		if run.Type == "qmclone" && !run.Start.Before(start) && !run.End.IsZero() {
			starts, ends = append(starts, run.Start), append(ends, run.End)
		}
	}
	if len(starts) == 0 {
		return 0, 0
	}
	slices.SortFunc(starts, time.Time.Compare)
	slices.SortFunc(ends, time.Time.Compare)
	var turns []time.Duration
	for k := perStorage; k < len(starts); k++ {
		turns = append(turns, starts[k].Sub(ends[k-perStorage]))
	}
	slices.Sort(turns)
	if len(turns) > 0 {
		turn = turns[len(turns)/2]
	}
	return starts[0].Sub(start), turn
}

// firstProxyUID is the proxy that measureFleet creates and deletes first.
const firstProxyUID = "fleet-first"

// firstProxy creates and deletes the first proxy on s, within three minutes. When it takes
// more than twenty seconds, where it usually takes a few, it logs the create's history: when
// each event was written, so that the wait shows.
func firstProxy(tb testing.TB, s *stack) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	err := createThenDelete(ctx, s, firstProxyUID, func() {})
	if took := time.Since(start); err != nil || took > 20*time.Second {
		run := s.operation(firstProxyUID, proxyvm.OpCreate)
		tb.Logf("the first proxy took %s (%v); its create's history:\n%s", took.Round(time.Millisecond), err,
			timeline(history(tb, s.client, run.GetID(), run.GetRunID())))
	}
	require.NoError(tb, err)
}

// timeline is events, one a line: the time since the first and the type.
func timeline(events []*historypb.HistoryEvent) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%8.3fs %s\n", e.GetEventTime().AsTime().Sub(events[0].GetEventTime().AsTime()).Seconds(), e.GetEventType())
	}
	return b.String()
}

// roomForFleet gives every node's local-lvm room for a fleet's disks: the default one, 1.6 TiB
// free, holds about 160 small proxies, and a create checks the space before it clones.
func roomForFleet(o *pvesim.Options) {
	for i := range o.Nodes {
		storages := slices.Clone(o.Nodes[i].Storages)
		for j := range storages {
			if storages[j].ID == "local-lvm" {
				storages[j].Total = 64 << 40
			}
		}
		o.Nodes[i].Storages = storages
	}
}

// benchLog is the SDK's log of the benchmarks: its warnings and errors, in a file whose name
// the first benchmark prints, so that the debug and info lines of every workflow and activity
// task, and the expected failures of an admission-off run, do not bury the results.
var benchLog = sync.OnceValues(func() (log.Logger, error) {
	f, err := os.CreateTemp("", "pveflow-bench-*.log")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "the Temporal SDK's warnings and errors: %s\n", f.Name())
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn}))), nil
})

// warnings is benchLog, for a benchmark.
func warnings(b *testing.B) log.Logger {
	b.Helper()
	l, err := benchLog()
	require.NoError(b, err)
	return l
}

// benchConfig is fastConfig with a clone budget that lets fifty queued clones finish.
func benchConfig(tb testing.TB) config.Config {
	cfg := fastConfig(tb)
	cfg.Budgets.Clone = 5 * time.Minute
	return cfg
}

func TestE2E_leaseOfATerminatedCreateIsReleased(t *testing.T) {
	cluster := newCluster()
	cfg := fastConfig(t)
	cfg.Clones.PerStorage = 1
	s := startStack(t, cluster, cfg)
	const holder, waiter = "lease-holder", "lease-waiter"
	// The holder's clone never ends, so it keeps its lease until it is terminated.
	cluster.StallClone(proxy.VMIDFor(holder, cfg.Proxmox.VMIDRange, 0))
	held := s.startCreate(createInput(holder))
	eventually(t, "the holder clones", func() bool { return cluster.CallCount("Clone") > 0 })
	req := s.startCreate(createInput(waiter))
	eventually(t, "the waiter is queued", func() bool {
		return query(t, s.client, core.CreateWorkflowID(waiter)).Phase == core.PhaseQueued
	})

	// The holder's CreateProxy, the child of its entity, is terminated: it cannot give its
	// lease back itself.
	require.NoError(t, s.client.TerminateWorkflow(context.Background(), core.CreateWorkflowID(holder), "", "a person gave up on it"))

	res, err := served[proxyvm.CreateProxyResult](t, req)
	require.NoError(t, err, "the waiter got the lease the terminated holder could not give back")
	assert.Equal(t, proxy.VMIDFor(waiter, cfg.Proxmox.VMIDRange, 0), res.VMID)
	_, err = served[proxyvm.CreateProxyResult](t, held)
	require.Error(t, err, "the entity failed the holder's create")
	assert.Equal(t, proxyvm.ProxyFailed, s.proxyStatus(holder).Phase)
}

// BenchmarkFleet_thousandCreatesInFlight sends a thousand create requests at once against a
// simulator whose clones do not end within the benchmark, with the default poll cadence, and
// reports the test process's resident memory (the worker's, the simulator's and the client's)
// once every create waits: with admission, four clone and the others wait for a slot; without,
// all thousand poll their clone.
func BenchmarkFleet_thousandCreatesInFlight(b *testing.B) {
	const n = 1000
	withAndWithoutAdmission(b, func(b *testing.B, perStorage int) {
		for b.Loop() {
			cluster := newCluster(func(o *pvesim.Options) {
				o.TaskDurations = map[string]time.Duration{"qmclone": time.Hour}
				roomForFleet(o)
			})
			cfg := benchConfig(b)
			defaults := config.Default()
			cfg.Poll, cfg.Budgets = defaults.Poll, defaults.Budgets
			cfg.Clones.PerStorage = perStorage
			s := startStackWith(b, cluster, cfg, client.Options{Logger: warnings(b)})
			resetPeakRSS(b)
			start := time.Now()
			sendCreates(b, s, n)
			inFlight := func() bool {
				if perStorage == 0 {
					return cluster.CallCount("Clone") >= n
				}
				st := admissionState(b, s, admissionOfHome(s))
				return len(st.Holders) == perStorage && len(st.Waiting) == n-perStorage
			}
			for !inFlight() {
				require.Less(b, time.Since(start), 10*time.Minute, "the creates never all got in flight")
				time.Sleep(time.Second)
			}
			b.ReportMetric(time.Since(start).Seconds(), "s/in-flight")
			// A while in flight: the clone polls, or the queued creates' timers, run.
			time.Sleep(30 * time.Second)
			b.ReportMetric(float64(peakRSS(b))/(1<<20), "MiB-peak-rss")
			s.stop()
		}
	})
}

// sendCreates sends the create requests of n proxies, a few at a time, and returns once the
// entities have taken them.
func sendCreates(b *testing.B, s *stack, n int) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			_, errs[i] = s.starter.Create(context.Background(), createInput(fleetUID(i)))
		})
	}
	wg.Wait()
	require.NoError(b, errors.Join(errs...))
}

// resetPeakRSS starts the process's peak resident memory afresh (Linux's clear_refs).
func resetPeakRSS(b *testing.B) {
	require.NoError(b, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
}

// peakRSS is the process's peak resident memory since resetPeakRSS, in bytes.
func peakRSS(b *testing.B) int64 { return procStatusBytes(b, "VmHWM:") }

// procStatusBytes is the figure of /proc/self/status under key, in bytes.
func procStatusBytes(b *testing.B, key string) int64 {
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(b, err)
	for line := range strings.Lines(string(status)) {
		if kb, ok := strings.CutPrefix(line, key); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			require.NoError(b, err)
			return v << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", key)
	return 0
}

func TestSummarize_reportsTheMedianOfEachFigureAndTheWorstOfFailuresAndMaxima(t *testing.T) {
	tests := []struct {
		name string
		runs []fleetFigures
		want fleetFigures
	}{
		{"one run is itself", []fleetFigures{{"x-floor": 1.2, "failed": 1}}, fleetFigures{"x-floor": 1.2, "failed": 1}},
		{"three runs: the median, whatever their order, and the spread", []fleetFigures{{"x-floor": 1.3}, {"x-floor": 1.1}, {"x-floor": 1.2}}, fleetFigures{"x-floor": 1.2, "x-floor-min": 1.1, "x-floor-max": 1.3}},
		{"two runs: their mean", []fleetFigures{{"x-floor": 1.1}, {"x-floor": 1.3}}, fleetFigures{"x-floor": 1.2, "x-floor-min": 1.1, "x-floor-max": 1.3}},
		{"a figure that is no ratio has no spread", []fleetFigures{{"s/fleet": 30}, {"s/fleet": 31}, {"s/fleet": 29}}, fleetFigures{"s/fleet": 30}},
		{"a failure in any run counts", []fleetFigures{{"failed": 0}, {"failed": 2}, {"failed": 0}}, fleetFigures{"failed": 2}},
		{"the largest history of any run", []fleetFigures{{"events/create-max": 50}, {"events/create-max": 61}, {"events/create-max": 50}}, fleetFigures{"events/create-max": 61}},
		{"the slowest first proxy", []fleetFigures{{"s/first-proxy": 4}, {"s/first-proxy": 70}, {"s/first-proxy": 3}}, fleetFigures{"s/first-proxy": 70}},
		{"a figure only some runs have: the median of those", []fleetFigures{{"x-floor": 1.1}, {"x-floor": 1.2, "s/first-clone": 2}, {"x-floor": 1.3}}, fleetFigures{"x-floor": 1.2, "x-floor-min": 1.1, "x-floor-max": 1.3, "s/first-clone": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(tt.runs)
			require.Len(t, got, len(tt.want))
			for unit, v := range tt.want {
				assert.InDelta(t, v, got[unit], 1e-9, unit)
			}
		})
	}
}
