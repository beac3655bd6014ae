package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

// LongEnv set to 1 runs the long scenario (make chaos); SeedEnv sets the seed of either.
const (
	LongEnv = "PVEFLOW_CHAOS_LONG"
	SeedEnv = "PVEFLOW_CHAOS_SEED"
)

// scenario is the size and pace of a run.
type scenario struct {
	proxies, kept int
	// load is the span over which the proxies' first requests are spread.
	load time.Duration
	// gcEvery spaces the collections.
	gcEvery time.Duration
	// settle bounds the wait, after the load, for every workflow to be done.
	settle time.Duration
}

var (
	// short runs in go test: about two minutes.
	short = scenario{proxies: 24, kept: 8, load: 50 * time.Second, gcEvery: 20 * time.Second, settle: 4 * time.Minute}
	// long is make chaos's.
	long = scenario{proxies: 120, kept: 30, load: 6 * time.Minute, gcEvery: 45 * time.Second, settle: 15 * time.Minute}
)

// Fixed parameters of every run, as the acceptance of issue 19 sets them.
const (
	perStorage = 2
	faultRate  = 0.2
	taskQueue  = "chaos"
	// grace is the collections' grace period: short, so that they race the creates and
	// deletes in flight instead of finding nothing old enough.
	grace = 15 * time.Second
)

func TestChaos_proxiesSurviveKillsRestartsAndPVEFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real server, simulator and workers for minutes")
	}
	sc, name := short, "short"
	if os.Getenv(LongEnv) == "1" {
		sc, name = long, "long"
	}
	seed := uint64(19)
	if s := os.Getenv(SeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, SeedEnv)
	}
	// The embedded server, as make run runs it, and make cluster's topology: PostgreSQL and two
	// server processes as one cluster, which the workers and the client reach both of.
	for _, topology := range []string{"embedded", "cluster"} {
		t.Run(topology, func(t *testing.T) {
			t.Logf("chaos run %s on the %s server, seed %d: %d proxies (%d kept), clones.perStorage %d, %.0f%% of Proxmox calls failing",
				name, topology, seed, sc.proxies, sc.kept, perStorage, faultRate*100)
			r := newRun(t, sc, seed, topology == "cluster")
			began := time.Now()
			r.drive()
			loadTook := time.Since(began)
			r.stopChaos()
			r.settle()
			state := r.simState()
			r.checkState(state)
			r.report(name+" on the "+topology+" server", loadTook, time.Since(began), state)
			if !t.Failed() {
				_ = os.RemoveAll(r.dir)
			}
		})
	}
}

// run is one chaos run: its processes, its driver and what it counted.
type run struct {
	t    *testing.T
	sc   scenario
	seed uint64
	dir  string // logs, the server's database, the simulator's files

	// servers are the Temporal server's processes: one, or a cluster's two.
	servers  []*proc
	sim      *proc
	workers  [2]*proc
	stateURL string
	temporal client.Client
	starter  *starter.Client

	stopKills chan struct{}
	killsDone sync.WaitGroup

	mu sync.Mutex
	// plan draws the proxies' requests, in order, so that the seed fixes them; kills draws
	// the moments of the kills, which the goroutines of the kills draw as they go.
	plan, kills *rand.Rand
	present     map[string]bool // the driver's wish for each UID it sent a request for
	kept        []string
	deleted     []string
	// counts of what happened, for the report.
	requests, resent, sendRetries, workerKills, mootFailures int
	serversKilled                                            []string
	gcRuns, gcFailed, gcDeleted, gcDeletedISOs               int
	failures                                                 []string
}

func newRun(t *testing.T, sc scenario, seed uint64, cluster bool) *run {
	dir, err := os.MkdirTemp("", "pveflow-chaos-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the run's logs and data are kept in %s", dir)
		}
	})
	r := &run{t: t, sc: sc, seed: seed, dir: dir, plan: rand.New(rand.NewPCG(seed, 19)), kills: rand.New(rand.NewPCG(seed, 20)), present: map[string]bool{}, stopKills: make(chan struct{})}
	bin := filepath.Join(dir, "bin")
	temporalBin := buildBinaries(t, bin)

	var addresses []string
	if cluster {
		pg := testserver.StartPostgres(t)
		testserver.SetUpTemporalSchema(t, pg.Port)
		for i := range 2 {
			port := testserver.FreePort(t)
			addresses = append(addresses, fmt.Sprintf("127.0.0.1:%d", port))
			r.servers = append(r.servers, &proc{name: fmt.Sprintf("temporal-%d", i+1), bin: temporalBin, log: filepath.Join(dir, fmt.Sprintf("temporal-%d.log", i+1)),
				args: []string{"-postgres", "-pg-host", "127.0.0.1", "-pg-port", strconv.Itoa(pg.Port), "-history-shards", "4",
					"-cluster-address", addresses[0], "-port", strconv.Itoa(port), "-ui-port", "-1"}})
		}
	} else {
		port := testserver.FreePort(t)
		addresses = append(addresses, fmt.Sprintf("127.0.0.1:%d", port))
		r.servers = []*proc{{name: "temporal", bin: temporalBin, log: filepath.Join(dir, "temporal.log"),
			args: []string{"-db", filepath.Join(dir, "temporal.db"), "-port", strconv.Itoa(port), "-ui-port", "-1"}}}
	}
	for _, server := range r.servers {
		server.mustStart(t, "namespace:")
		t.Cleanup(server.stop)
	}
	address := strings.Join(addresses, ",")

	simDir := filepath.Join(dir, "pvesim")
	r.sim = &proc{name: "pvesim", bin: filepath.Join(bin, "pvesim"), log: filepath.Join(dir, "pvesim.log"),
		args: []string{"-listen", "127.0.0.1:0", "-dir", simDir, "-auth-delay", "0s", "-resources-lag", "2s",
			"-agent-boot-delay", "1s", "-task-scale", "0.5", "-fault-rate", strconv.FormatFloat(faultRate, 'f', -1, 64),
			"-fault-seed", strconv.FormatUint(seed, 10), "-state-listen", "127.0.0.1:0"}}
	line := r.sim.mustStart(t, "pvesim serves the Proxmox VE API at ")
	t.Cleanup(r.sim.stop)
	simURL := strings.TrimSuffix(strings.TrimPrefix(line, "pvesim serves the Proxmox VE API at "), "/api2/json")
	r.stateURL = r.waitForStateURL()

	cfg := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(workerConfig(simURL, simDir)), 0o600))
	env := []string{"TEMPORAL_ADDRESS=" + address, "TEMPORAL_NAMESPACE=default", "HOME=" + dir}
	for i := range r.workers {
		w := &proc{name: fmt.Sprintf("worker-%d", i+1), bin: filepath.Join(bin, "worker"), env: env,
			log:  filepath.Join(dir, fmt.Sprintf("worker-%d.log", i+1)),
			args: []string{"--config", cfg, "--task-queue", taskQueue, "--health-every", "0"}}
		w.mustStart(t, "")
		t.Cleanup(w.stop)
		r.workers[i] = w
	}

	// As the workers dial: TEMPORAL_ADDRESS may list a cluster's frontends.
	r.temporal = testserver.DialFrontends(t, "default", nil, addresses...)
	r.starter = starter.New(r.temporal, taskQueue)
	return r
}

// waitForStateURL reads the state URL the simulator printed after its API's.
func (r *run) waitForStateURL() string {
	for range 100 {
		for line := range strings.Lines(tailOf(r.sim.log)) {
			if u, ok := strings.CutPrefix(strings.TrimSpace(line), "pvesim state at "); ok {
				return u
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatalf("pvesim did not print its state URL; its log is %s", r.sim.log)
	return ""
}

// workerConfig is the workers' configuration: the simulator's default cluster, clones two at a
// time, and waits short enough that a run takes minutes, with room for a lost attempt.
func workerConfig(url, simDir string) string {
	return fmt.Sprintf(`proxmox:
  url: %s
  caFile: %q
  tokenFile: %q
  nodes: [pve1]
  isoStorage: local
  storage: local-lvm
  templates: {debian13: {vmid: 9000}}
  machineTypes: {small: {cores: 2, memoryMiB: 2048, diskGiB: 10}}
  requestTimeoutSeconds: 5
clones: {perStorage: %d}
budgets: {clone: 3m, upload: 1m, resize: 1m, start: 1m, stop: 1m, destroy: 2m, running: 1m, agent: 2m, unlock: 2m, request: 10s}
poll: {initialInterval: 500ms, backoffCoefficient: 1.3, maximumInterval: 3s}
entity: {checkInterval: 1m, checkJitter: 15s, closeAfter: 20s}
`, url, filepath.Join(simDir, "ca.pem"), filepath.Join(simDir, "token"), perStorage)
}

// between draws a duration in [lo, hi) from src.
func (r *run) between(src *rand.Rand, lo, hi time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return lo + time.Duration(src.Int64N(int64(hi-lo)))
}

// pick draws an index in [0, n) from src.
func (r *run) pick(src *rand.Rand, n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return src.IntN(n)
}

// drive runs the load: every proxy's requests, the collections, the worker kills and the one
// server kill, and returns once every proxy's last request is done.
func (r *run) drive() {
	for _, w := range r.workers {
		r.killsDone.Add(1)
		go r.killLoop(w)
	}
	r.killsDone.Add(1)
	go r.killServerOnce()
	gcDone := make(chan struct{})
	stopGC := make(chan struct{})
	go func() {
		defer close(gcDone)
		r.collectLoop(stopGC)
	}()

	var proxies sync.WaitGroup
	for i := range r.sc.proxies {
		uid := fmt.Sprintf("chaos-%d-%03d", r.seed, i)
		kept := i < r.sc.kept
		if kept {
			r.kept = append(r.kept, uid)
		} else {
			r.deleted = append(r.deleted, uid)
		}
		offset := r.between(r.plan, 0, r.sc.load)
		again := r.plan.IntN(10) < 3 // a second round; for a kept proxy, a create and delete first
		pause := r.between(r.plan, 0, 15*time.Second)
		pause2 := r.between(r.plan, 0, 15*time.Second)
		proxies.Add(1)
		go func() {
			defer proxies.Done()
			time.Sleep(offset)
			if kept {
				if again {
					r.createThenDelete(uid, pause, 1)
				}
				r.ask(uid, starter.Create, 2)
				return
			}
			r.createThenDelete(uid, pause, 1)
			if again {
				r.createThenDelete(uid, pause2, 2)
			}
		}()
	}
	proxies.Wait()
	close(stopGC)
	<-gcDone
}

// createThenDelete sends a create of uid and, pause later, its delete, whether or not the
// create is done: a delete that comes while the create runs supersedes it.
func (r *run) createThenDelete(uid string, pause time.Duration, round int) {
	created := make(chan struct{})
	go func() {
		defer close(created)
		r.ask(uid, starter.Create, round)
	}()
	time.Sleep(pause)
	r.ask(uid, starter.Delete, round)
	<-created
}

// requestDeadline bounds how long the driver follows one request, resends included.
const requestDeadline = 10 * time.Minute

// ask sends op for uid and follows it to its end. A request the entity could not be reached
// for is sent again under the same Update ID, which makes it the same request. An operation
// that fails while its request is still the driver's wish is requested again: a second start,
// which the report counts (the goal is none). A create that a later request superseded, or
// that failed after the driver had moved on to the delete, is moot.
func (r *run) ask(uid string, op starter.Op, round int) {
	ctx, cancel := context.WithTimeout(context.Background(), requestDeadline)
	defer cancel()
	r.mu.Lock()
	r.present[uid] = op == starter.Create
	r.mu.Unlock()
	for attempt := 1; ; attempt++ {
		req, err := r.send(ctx, uid, op, fmt.Sprintf("%s-%s-%d-%d", uid, op, round, attempt))
		// A resend under the Update ID of a send that was accepted after all is that request
		// again: its Get answers the operation's outcome, even once it has ended.
		switch {
		case err == nil:
			err = r.follow(ctx, req)
		case starter.FailureType(err) == "":
			r.fail("%s of %s: not accepted: %v", op, uid, err)
			return
		}
		if err == nil {
			return
		}
		r.mu.Lock()
		wanted := r.present[uid] == (op == starter.Create)
		r.mu.Unlock()
		switch {
		case starter.FailureType(err) == starter.FailSuperseded:
			return
		case !wanted:
			r.count(&r.mootFailures)
			r.t.Logf("moot: %v", err)
			return
		case ctx.Err() != nil:
			r.fail("%s of %s: not done within %s: %v", op, uid, requestDeadline, err)
			return
		}
		r.count(&r.resent)
		r.t.Logf("second start: %s of %s failed: %v", op, uid, err)
	}
}

// send sends the request until the entity accepts it, or refuses it, or ctx ends.
func (r *run) send(ctx context.Context, uid string, op starter.Op, updateID string) (*starter.Request, error) {
	r.count(&r.requests)
	for {
		sendCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var req *starter.Request
		var err error
		if op == starter.Create {
			req, err = r.starter.Create(sendCtx, workflows.CreateProxyInput{UID: uid, Image: "debian13", MachineType: "small",
				UserData: "#cloud-config\nhostname: " + uid + "\n"}, starter.WithUpdateID(updateID))
		} else {
			req, err = r.starter.Delete(sendCtx, workflows.DeleteProxyInput{UID: uid}, starter.WithUpdateID(updateID))
		}
		cancel()
		if err == nil || errors.Is(err, starter.ErrRejected) || ctx.Err() != nil {
			return req, err
		}
		r.count(&r.sendRetries)
		r.t.Logf("send again: %v", err)
		time.Sleep(time.Second)
	}
}

// follow waits for the operation serving req to close: nil when it succeeded, its failure
// when it failed. Losing the server on the way is not a failure: the wait starts again.
func (r *run) follow(ctx context.Context, req *starter.Request) error {
	for {
		getCtx, cancel := context.WithTimeout(ctx, time.Minute)
		var res json.RawMessage
		err := req.Get(getCtx, &res)
		cancel()
		if err == nil || isOperationFailure(err) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Second)
	}
}

// isOperationFailure tells a failed operation from a wait that did not get its answer.
func isOperationFailure(err error) bool {
	return starter.FailureType(err) != "" || strings.Contains(err.Error(), "workflow execution error") ||
		strings.Contains(err.Error(), "Terminated")
}

// collectLoop runs a collection every gcEvery until stop, over the kept set of the moment:
// the kept proxies and every UID the driver wants present then.
func (r *run) collectLoop(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(r.sc.gcEvery):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		res, err := r.starter.CollectGarbage(ctx, starter.GCOptions{Keep: r.keepSet, Grace: grace})
		cancel()
		r.mu.Lock()
		r.gcRuns++
		switch {
		case err != nil:
			r.gcFailed++
			r.t.Logf("collection failed: %v", err)
		default:
			for _, vm := range res.VMs {
				switch vm.Outcome {
				case workflows.GarbageDeleted:
					r.gcDeleted++
				case workflows.GarbageFailed:
					r.t.Logf("collection failed to delete VM %d of %s: %s", vm.VMID, vm.UID, vm.Detail)
				}
			}
			for _, iso := range res.ISOs {
				switch iso.Outcome {
				case workflows.GarbageDeleted:
					r.gcDeletedISOs++
				case workflows.GarbageFailed:
					r.t.Logf("collection failed to delete seed ISO %s: %s", iso.VolID, iso.Detail)
				}
			}
			if res.Failed() {
				r.gcFailed++
			}
		}
		r.mu.Unlock()
	}
}

// keepSet is the collections' KeepSource.
func (r *run) keepSet(context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := slices.Clone(r.kept)
	for uid, present := range r.present {
		if present && !slices.Contains(keep, uid) {
			keep = append(keep, uid)
		}
	}
	return keep, nil
}

// killLoop SIGKILLs w every 5 to 20 s and starts it again at once, until stopChaos.
func (r *run) killLoop(w *proc) {
	defer r.killsDone.Done()
	for {
		select {
		case <-r.stopKills:
			return
		case <-time.After(r.between(r.kills, 5*time.Second, 20*time.Second)):
		}
		w.kill()
		r.count(&r.workerKills)
		if _, err := w.start(""); err != nil {
			r.fail("restart %s: %v", w.name, err)
			return
		}
	}
}

// killServerOnce SIGKILLs a Temporal server process a third into the load and starts it again
// on its database, on the same port: the embedded server after 2 s; one of a cluster's two
// after 10 s, once the other has taken over its shards (ringpop finds a host dead in about 6 s).
func (r *run) killServerOnce() {
	defer r.killsDone.Done()
	select {
	case <-r.stopKills:
		return
	case <-time.After(r.sc.load / 3):
	}
	victim, down := r.servers[0], 2*time.Second
	if len(r.servers) > 1 {
		victim, down = r.servers[r.pick(r.kills, len(r.servers))], 10*time.Second
	}
	victim.kill()
	r.mu.Lock()
	r.serversKilled = append(r.serversKilled, victim.name)
	r.mu.Unlock()
	time.Sleep(down)
	if _, err := victim.start("namespace:"); err != nil {
		r.fail("restart %s: %v", victim.name, err)
	}
}

// stopChaos ends the kills; every process runs afterwards. The faults go on: the workflows
// must settle with Proxmox failing as before.
func (r *run) stopChaos() {
	close(r.stopKills)
	r.killsDone.Wait()
	for _, w := range r.workers {
		if !w.running() {
			w.mustStart(r.t, "")
		}
	}
	for _, server := range r.servers {
		if !server.running() {
			server.mustStart(r.t, "namespace:")
		}
	}
}

func (r *run) count(n *int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*n++
}

// fail records a broken invariant or a request that never ended; the report lists them and
// the test fails.
func (r *run) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// simState reads the simulator's state.
func (r *run) simState() pvesim.State {
	resp, err := http.Get(r.stateURL)
	require.NoError(r.t, err)
	defer resp.Body.Close()
	var st pvesim.State
	require.NoError(r.t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// report prints the run's figures, which docs/reliability.md quotes, and fails the test on a
// request that never ended or an invariant broken.
func (r *run) report(name string, load, total time.Duration, st pvesim.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	faults := 0
	for _, n := range st.Faults {
		faults += n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos run %s, seed %d: %d proxies (%d kept, %d deleted), load %s, in all %s\n",
		name, r.seed, r.sc.proxies, len(r.kept), len(r.deleted), load.Round(time.Second), total.Round(time.Second))
	fmt.Fprintf(&b, "  requests sent: %d; runs that needed a second start: %d; sends retried (server or workers away): %d; failures made moot by a later request: %d\n",
		r.requests, r.resent, r.sendRetries, r.mootFailures)
	fmt.Fprintf(&b, "  workers SIGKILLed: %d; server processes SIGKILLed: %d %v\n", r.workerKills, len(r.serversKilled), r.serversKilled)
	fmt.Fprintf(&b, "  collections: %d (%d failed or with a failed deletion); they deleted %d VMs and %d seed ISOs\n", r.gcRuns, r.gcFailed, r.gcDeleted, r.gcDeletedISOs)
	fmt.Fprintf(&b, "  Proxmox calls: %d, failed at random: %d (%.1f%%)\n", st.Calls, faults, 100*float64(faults)/float64(max(st.Calls, 1)))
	for _, kind := range slices.Sorted(maps.Keys(st.Faults)) {
		fmt.Fprintf(&b, "    %s: %d\n", kind, st.Faults[kind])
	}
	fmt.Fprintf(&b, "  clone tasks: %d; most at once per storage:", len(st.Clones))
	for _, key := range slices.Sorted(maps.Keys(st.MaxConcurrentClones)) {
		fmt.Fprintf(&b, " %s %d", key, st.MaxConcurrentClones[key])
	}
	b.WriteString("\n")
	for _, f := range r.failures {
		fmt.Fprintf(&b, "  FAILED: %s\n", f)
	}
	r.t.Log(b.String())
	assert.Empty(r.t, r.failures, "requests that never ended, or invariants broken")
}
