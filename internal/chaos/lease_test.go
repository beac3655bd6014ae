package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

// The clone slots under worker deaths (issue 32): a create holds its storage's clone lease
// until its clone has ended, and a worker that dies must not keep the slot idle past that for
// longer than seconds while another create queues for it.
//
// A worker SIGKILLed tells Temporal nothing. Its activity attempt in flight is seen lost only
// when a timeout of the attempt ends; and for 10 s after its last poll the server still puts
// the next workflow task of each workflow it ran on its sticky queue, where the task waits out
// the sticky schedule-to-start timeout (the SDK's default is 5 s). A clone slot's turn was
// three workflow tasks in a row, each a workflow the dead worker had run: the create seeing its
// clone end and giving the lease back, the admission granting it, the next create cloning.

// LeaseTraceEnv set to 1 runs TestLease_traceClonesSlotsUnderWorkerKills, which measures how
// busy the clone slots are under random worker kills and where their idle time goes;
// LeaseTraceKillsEnv set to 0 runs it without kills, LeaseTraceCreatesEnv sets how many
// creates queue (default 16).
const (
	LeaseTraceEnv        = "PVEFLOW_LEASE_TRACE"
	LeaseTraceKillsEnv   = "PVEFLOW_LEASE_TRACE_KILLS"
	LeaseTraceCreatesEnv = "PVEFLOW_LEASE_TRACE_CREATES"
)

// leaseClone is how long the clones of the lease tests take.
const leaseClone = 4 * time.Second

func TestLease_aDeadWorkersCloneLeaseComesBackWithinSecondsOfTheClonesEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real server and a worker process it kills")
	}
	s := newLeaseSuite(t)
	// The worker dies after a look at the first clone has answered (the clone's wait goes on
	// retrying, its next look on the worker started again): the lease comes back with the look
	// that sees the clone end, and the next create clones a couple of seconds later, where
	// three workflow tasks in a row each met the dead worker's sticky queue.
	t.Run("between two looks", func(t *testing.T) {
		e := s.env(t, "between", 1, 1, leaseClone)
		e.run(t, false)
		released, next := e.releasedAt(t), e.clones[1].Start
		t.Logf("the first clone ended at %s, its lease came back at %s, the next clone started at %s (s since the kill)",
			e.since(e.clones[0].End), e.since(released), e.since(next))
		assert.Less(t, released.Sub(e.clones[0].End), 3500*time.Millisecond, "the lease comes back with the look that sees the clone end")
		assert.Less(t, next.Sub(e.clones[0].End), 6*time.Second, "the next clone starts within seconds of the first one's end")
	})
	// The worker dies during a look, before its answer reaches it: the attempt is lost, and its
	// heartbeat timeout, not its StartToClose (budgets.request), says so.
	t.Run("during a look", func(t *testing.T) {
		e := s.env(t, "during", 1, 1, leaseClone)
		e.run(t, true)
		released, next := e.releasedAt(t), e.clones[1].Start
		t.Logf("the first clone ended at %s, its lease came back at %s, the next clone started at %s (s since the kill)",
			e.since(e.clones[0].End), e.since(released), e.since(next))
		assert.Less(t, released.Sub(e.killed), 10*time.Second, "the lost look is made again within seconds, not at the end of its 15 s StartToClose")
		assert.Less(t, next.Sub(e.clones[0].End), 9*time.Second, "the next clone starts within seconds of the lost look's timeout")
	})
}

// leaseSuite is what the lease tests share: the Temporal server and the worker's binary.
type leaseSuite struct {
	dir, workerBin string
	srv            *testserver.Server
}

func newLeaseSuite(t *testing.T) *leaseSuite {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	buildBinaries(t, bin)
	return &leaseSuite{dir: dir, workerBin: filepath.Join(bin, "worker"), srv: testserver.New(t)}
}

// leaseEnv is one lease test's simulator, and the worker processes on a task queue of its own.
type leaseEnv struct {
	queue    string
	sim      *pvesim.Cluster
	api      *lookLog
	workers  []*proc
	requests *starter.Client
	client   client.Client
	// killed is when the worker was killed; clones are the clone tasks, in the order they ran.
	killed time.Time
	clones []pvesim.CloneRun
	uids   []string
}

// env starts a simulator whose clones take clone, and workers worker processes on a task queue
// named name, with perStorage clones at a time onto the storage.
func (s *leaseSuite) env(t *testing.T, name string, workers, perStorage int, clone time.Duration) *leaseEnv {
	dir := filepath.Join(s.dir, name)
	opts := pvesim.Default()
	opts.TaskDurations = map[string]time.Duration{"qmclone": clone, "qmstart": 200 * time.Millisecond}
	opts.AgentBootDelay = 500 * time.Millisecond
	e := &leaseEnv{queue: "lease-" + name, sim: pvesim.New(opts), client: s.srv.Client()}
	e.api = &lookLog{API: e.sim}
	ss, err := simserver.Start(simserver.Options{API: e.api, Dir: filepath.Join(dir, "pvesim")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cfg := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(leaseWorkerConfig(ss, perStorage)), 0o600))
	env := []string{"TEMPORAL_ADDRESS=" + s.srv.Address(), "TEMPORAL_NAMESPACE=" + s.srv.Namespace(), "HOME=" + dir}
	for i := range workers {
		w := &proc{name: fmt.Sprintf("worker-%d", i+1), bin: s.workerBin, env: env, log: filepath.Join(dir, fmt.Sprintf("worker-%d.log", i+1)),
			args: []string{"--config", cfg, "--task-queue", e.queue, "--health-every", "0"}}
		w.mustStart(t, "")
		t.Cleanup(w.kill)
		e.workers = append(e.workers, w)
	}
	e.requests = starter.New(s.srv.Client(), e.queue)
	return e
}

// leaseWorkerConfig is the workers' configuration: one node, one storage, perStorage clones at
// once, the chaos run's polls, and a request budget (an attempt's StartToClose) of 15 s.
func leaseWorkerConfig(srv *simserver.Server, perStorage int) string {
	return fmt.Sprintf(`proxmox:
  url: %s
  caFile: %q
  tokenFile: %q
  nodes: [pve1]
  isoStorage: local
  storage: local-lvm
  templates: {debian13: {vmid: 9000}}
  machineTypes:
    small: {cores: 2, memoryMiB: 2048, diskGiB: 10}
  requestTimeoutSeconds: 10
clones: {perStorage: %d}
budgets: {clone: 3m, upload: 1m, resize: 1m, start: 1m, stop: 1m, destroy: 1m, running: 1m, agent: 1m, unlock: 1m, request: 15s}
poll: {initialInterval: 500ms, backoffCoefficient: 1.3, maximumInterval: 3s}
entity: {checkInterval: 0s, closeAfter: 1m}
`, srv.URL(), srv.CAFile(), srv.TokenFile(), perStorage)
}

// run creates two proxies, the second queued behind the first's clone, and kills the worker at
// a look at the first clone once it has run for a third of its time, when the second create
// waits for the lease: during the look, before its answer goes back, or just after.
func (e *leaseEnv) run(t *testing.T, duringLook bool) {
	var restarted sync.WaitGroup
	restarted.Add(1)
	var restartErr error
	kill := func() {
		defer restarted.Done()
		e.killed = time.Now()
		e.workers[0].kill()
		_, restartErr = e.workers[0].start("")
	}
	e.api.arm(func(upid pve.UPID) bool {
		runs := e.sim.CloneRuns()
		return len(runs) > 0 && runs[0].UPID == upid && time.Since(runs[0].Start) > leaseClone/3
	}, func() {
		if duringLook {
			kill()
			return
		}
		go func() {
			time.Sleep(200 * time.Millisecond) // the answer has gone back
			kill()
		}()
	})
	e.create(t, 2)
	restarted.Wait()
	require.NoError(t, restartErr, "worker not started again")
	e.clones = slices.DeleteFunc(e.sim.CloneRuns(), func(r pvesim.CloneRun) bool { return r.ExitStatus != "OK" })
	require.Len(t, e.clones, 2, "clone tasks that ended OK: %+v", e.sim.CloneRuns())
	require.False(t, e.killed.IsZero(), "the worker was never killed")
}

// create asks for n proxies at once and waits for them.
func (e *leaseEnv) create(t *testing.T, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var reqs []*starter.Request
	for i := range n {
		uid := e.queue + "-" + strconv.Itoa(i)
		e.uids = append(e.uids, uid)
		req, err := e.requests.Create(ctx, workflows.CreateProxyInput{UID: uid, Image: "debian13", MachineType: "small", UserData: "#cloud-config\n"})
		require.NoError(t, err)
		reqs = append(reqs, req)
	}
	for i, r := range reqs {
		require.NoError(t, r.Get(ctx, nil), "create of %s", e.uids[i])
	}
}

// since is at as seconds since the kill.
func (e *leaseEnv) since(at time.Time) string {
	return fmt.Sprintf("%.1f s", at.Sub(e.killed).Seconds())
}

// releasedAt is when the admission heard the first clone's lease given back.
func (e *leaseEnv) releasedAt(t *testing.T) time.Time {
	t.Helper()
	owner := e.owners()[e.clones[0].NewID]
	require.NotEmpty(t, owner, "the first clone's VM has no proxy's mark")
	releases := e.releases(t)
	at, ok := releases[workflows.CreateWorkflowID(owner)]
	require.True(t, ok, "the admission never heard the lease of %s given back", owner)
	return at
}

// owners are the proxies' UIDs by the VMID of their VMs.
func (e *leaseEnv) owners() map[int]string {
	owner := map[int]string{}
	for _, vm := range e.sim.VMs() {
		if uid, ok := proxy.OwnerOf(vm.Config); ok {
			owner[vm.VMID] = uid
		}
	}
	return owner
}

// releases are when the admission first heard each create's lease given back, by workflow ID.
func (e *leaseEnv) releases(t *testing.T) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	for _, ev := range history(t, e.client, workflows.CloneAdmissionWorkflowID(e.queue, "pve1/local-lvm")) {
		a := ev.GetWorkflowExecutionSignaledEventAttributes()
		if ev.GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED || a.GetSignalName() != "clone-release" {
			continue
		}
		var h workflows.Holder
		require.NoError(t, json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &h))
		if _, seen := out[h.WorkflowID]; !seen {
			out[h.WorkflowID] = ev.GetEventTime().AsTime()
		}
	}
	return out
}

// history is the latest run's history of workflowID.
func history(t *testing.T, c client.Client, workflowID string) []*historypb.HistoryEvent {
	t.Helper()
	var out []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		out = append(out, ev)
	}
	return out
}

// lookLog is the simulator as the workers reach it, with a hook on a look at a task: once
// armed, the first TaskStatus call that when says is the one runs fn after its effect and before
// its answer goes back.
type lookLog struct {
	pve.API
	mu   sync.Mutex
	when func(pve.UPID) bool
	fn   func()
}

func (l *lookLog) arm(when func(pve.UPID) bool, fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.when, l.fn = when, fn
}

func (l *lookLog) TaskStatus(ctx context.Context, node string, upid pve.UPID) (pve.TaskStatus, error) {
	st, err := l.API.TaskStatus(ctx, node, upid)
	l.mu.Lock()
	var fn func()
	if l.when != nil && l.when(upid) {
		fn, l.when, l.fn = l.fn, nil, nil
	}
	l.mu.Unlock()
	if fn != nil {
		fn()
	}
	return st, err
}

// TestLease_traceClonesSlotsUnderWorkerKills is a measurement, not a check: creates queue for
// two clone slots while two workers are SIGKILLed every 5 to 20 s, as in the chaos run; it
// reports how busy the slots were while creates queued and where their idle time went.
func TestLease_traceClonesSlotsUnderWorkerKills(t *testing.T) {
	if os.Getenv(LeaseTraceEnv) != "1" {
		t.Skip("a measurement: set " + LeaseTraceEnv + "=1")
	}
	n := 16
	if v := os.Getenv(LeaseTraceCreatesEnv); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, LeaseTraceCreatesEnv)
	}
	s := newLeaseSuite(t)
	e := s.env(t, "trace", 2, 2, 2*time.Second) // the chaos run's clones: 4 s at its task scale of 0.5
	stop := make(chan struct{})
	var kills sync.WaitGroup
	var mu sync.Mutex
	var killed []time.Time
	src := rand.New(rand.NewPCG(32, 1))
	for _, w := range e.workers {
		if os.Getenv(LeaseTraceKillsEnv) == "0" {
			break
		}
		kills.Go(func() {
			for {
				mu.Lock()
				d := 5*time.Second + time.Duration(src.Int64N(int64(15*time.Second)))
				mu.Unlock()
				select {
				case <-stop:
					return
				case <-time.After(d):
				}
				w.kill()
				mu.Lock()
				killed = append(killed, time.Now())
				mu.Unlock()
				_, _ = w.start("")
			}
		})
	}
	began := time.Now()
	e.create(t, n)
	close(stop)
	kills.Wait()
	t.Logf("%d creates in %s, %d kills", n, time.Since(began).Round(time.Millisecond), len(killed))
	e.trace(t, began, killed, 2)
}

// leaseTrace is one create's lease, as its history, the admission's and the simulator show it.
type leaseTrace struct {
	uid                                   string
	granted, start, end, seen, done, gave time.Time
	// stalls are the create's workflow tasks and activity attempts that timed out between its
	// grant and its lease's return.
	stalls []string
}

// trace logs each create's lease, how busy the perStorage slots were between the first clone's
// start and the last's (creates queued throughout), and where the idle time went.
func (e *leaseEnv) trace(t *testing.T, began time.Time, kills []time.Time, perStorage int) {
	owner := e.owners()
	seen := map[pve.UPID]time.Time{}
	for _, r := range e.sim.TaskRuns() {
		seen[r.UPID] = r.Seen
	}
	traces := map[string]*leaseTrace{}
	for _, uid := range e.uids {
		traces[uid] = &leaseTrace{uid: uid}
	}
	for _, r := range e.sim.CloneRuns() {
		if tr := traces[owner[r.NewID]]; tr != nil && r.ExitStatus == "OK" {
			tr.start, tr.end, tr.seen = r.Start, r.End, seen[r.UPID]
		}
	}
	releases := e.releases(t)
	var admissionStalls []string
	rel := func(at time.Time) string {
		if at.IsZero() {
			return "   -  "
		}
		return fmt.Sprintf("%6.1f", at.Sub(began).Seconds())
	}
	for _, ev := range history(t, e.client, workflows.CloneAdmissionWorkflowID(e.queue, "pve1/local-lvm")) {
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT {
			admissionStalls = append(admissionStalls, rel(ev.GetEventTime().AsTime())+" "+ev.GetWorkflowTaskTimedOutEventAttributes().GetTimeoutType().String())
		}
	}
	list := make([]*leaseTrace, 0, len(traces))
	for uid, tr := range traces {
		tr.gave = releases[workflows.CreateWorkflowID(uid)]
		scheduled := map[int64]string{}
		for _, ev := range history(t, e.client, workflows.CreateWorkflowID(uid)) {
			at := ev.GetEventTime().AsTime()
			held := !tr.granted.IsZero() && at.Before(tr.gave.Add(time.Second))
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
				if ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == "clone-admitted" && tr.granted.IsZero() {
					tr.granted = at
				}
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				scheduled[ev.GetEventId()] = ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
				if scheduled[ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()] == "TaskStatus" && tr.done.IsZero() && !tr.granted.IsZero() {
					tr.done = at
				}
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
				if held {
					tr.stalls = append(tr.stalls, rel(at)+" "+ev.GetWorkflowTaskTimedOutEventAttributes().GetTimeoutType().String())
				}
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
				if held {
					tr.stalls = append(tr.stalls, rel(at)+" activity "+ev.GetActivityTaskTimedOutEventAttributes().GetFailure().GetMessage())
				}
			}
		}
		list = append(list, tr)
	}
	slices.SortFunc(list, func(a, b *leaseTrace) int { return a.granted.Compare(b.granted) })
	var b strings.Builder
	var toClone, cloning, toSeen, toGive, toGrant time.Duration
	gave := make([]time.Time, 0, len(list))
	for _, tr := range list {
		fmt.Fprintf(&b, "%s granted %s clone %s-%s seen %s wait done %s lease back %s %v\n",
			tr.uid, rel(tr.granted), rel(tr.start), rel(tr.end), rel(tr.seen), rel(tr.done), rel(tr.gave), tr.stalls)
		toClone += tr.start.Sub(tr.granted)
		cloning += tr.end.Sub(tr.start)
		toSeen += tr.seen.Sub(tr.end)
		toGive += tr.gave.Sub(tr.seen)
		gave = append(gave, tr.gave)
	}
	slices.SortFunc(gave, func(a, b time.Time) int { return a.Compare(b) })
	for i := perStorage; i < len(list); i++ {
		toGrant += list[i].granted.Sub(gave[i-perStorage])
	}
	first, last := list[0].start, list[len(list)-1].start
	var busy time.Duration
	for _, tr := range list {
		from, to := tr.start, tr.end
		if from.Before(first) {
			from = first
		}
		if to.After(last) {
			to = last
		}
		if to.After(from) {
			busy += to.Sub(from)
		}
	}
	killedAt := make([]string, len(kills))
	for i, k := range kills {
		killedAt[i] = rel(k)
	}
	t.Logf("leases (s since the first request):\n%s", b.String())
	t.Logf("workers killed at %v; the admission's workflow tasks timed out at %v", killedAt, admissionStalls)
	t.Logf("the %d slots were busy %.0f%% of the %s between the first clone's start and the last's",
		perStorage, 100*busy.Seconds()/(float64(perStorage)*last.Sub(first).Seconds()), last.Sub(first).Round(time.Millisecond))
	t.Logf("summed over the leases: grant to clone start %s; cloning %s; clone end to a look seeing it %s; that look to the lease back %s; lease back to the next grant %s",
		toClone.Round(time.Millisecond), cloning.Round(time.Millisecond), toSeen.Round(time.Millisecond), toGive.Round(time.Millisecond), toGrant.Round(time.Millisecond))
}
