package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
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

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The crash-point test (issue 31): every Proxmox call of a create, a change and a delete is
// made, takes its effect, and then the worker that made it is SIGKILLed before the answer reaches
// it, so before the workflow task that made the call completes. A worker started again replays
// the operation and makes the call again ("Every call must be safe to make twice",
// docs/architecture.md); the request must still be answered with success, with one VM (none
// after the delete), one clone and no second start.
//
// Each crash point runs on a simulator of its own, served in this process (simserver over
// crashAPI over pvesim), and a worker process of its own on a task queue of its own, against one
// Temporal server: the points are independent and run several at a time, since most of a point's
// time is Temporal noticing the dead worker (the workflow task's 10 s timeout). The simulator's
// tasks end as they start and its guest agents answer at boot, so that an operation's calls are
// the same in every run and a crash point names the same call in each.

// CrashParallelEnv sets how many crash points run at once (default crashParallel); CrashLongEnv
// set to 1 runs the modes call and span at every call, where by default they crash only at the
// calls that change something (crashPoints).
const (
	CrashParallelEnv = "PVEFLOW_CRASH_PARALLEL"
	CrashLongEnv     = "PVEFLOW_CRASH_LONG"
)

const (
	crashParallel = 8
	// crashDeadline bounds one request, crash and recovery included.
	crashDeadline = 3 * time.Minute
	// crashHold is how long a call's answer is held so that the calls before it are recorded:
	// past the moment (80% of the workflow task's 10 s timeout) the SDK completes the open
	// workflow task with the local activities done so far and goes on in a new one, and within
	// the call's StartToClose (budgets.request in crashWorkerConfig).
	crashHold = 9 * time.Second
)

// effects are the seam methods that change something in Proxmox.
var effects = map[string]bool{
	"Clone": true, "UploadISO": true, "SetVMConfig": true, "Resize": true, "Start": true, "Stop": true,
	"Reboot": true, "Destroy": true, "DeleteVolume": true, "AddHAResource": true, "DeleteHAResource": true,
	"Migrate": true,
}

func TestCrash_everyCallOfACreateChangeAndDeleteSurvivesTheWorkersDeath(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real server and a worker process per crash point for minutes")
	}
	parallel := crashParallel
	if s := os.Getenv(CrashParallelEnv); s != "" {
		var err error
		parallel, err = strconv.Atoi(s)
		require.NoError(t, err, CrashParallelEnv)
	}
	s := newCrashSuite(t)

	// First every operation runs once without a crash: its calls, in order, are its crash points.
	// Not in subtests, so that -run can pick crash points alone.
	sequences := make([][]pvesim.Call, len(crashOps))
	for i, op := range crashOps {
		sequences[i] = s.point(t, op, "record-"+op.name, nil)
		t.Logf("%s makes %d calls: %s", op.name, len(sequences[i]), strings.Join(callNames(sequences[i]), " "))
	}

	points := crashPoints(sequences, os.Getenv(CrashLongEnv) == "1")
	began := time.Now()
	work := make(chan crashPoint)
	var mu sync.Mutex
	var ran int
	var failed []string
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for p := range work {
				ok := t.Run(p.name, func(t *testing.T) {
					mu.Lock()
					ran++
					mu.Unlock()
					s.point(t, p.op, strings.ReplaceAll(p.name, "/", "-"), &p.at)
				})
				if !ok {
					mu.Lock()
					failed = append(failed, p.name)
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range points {
		work <- p
	}
	close(work)
	wg.Wait()
	t.Logf("%d crash points in %s, %d at a time", ran, time.Since(began).Round(time.Second), parallel)
	if len(failed) > 0 {
		slices.Sort(failed)
		t.Logf("%d crash points failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
}

// crashPoint is a subtest: op, crashed at at.
type crashPoint struct {
	name string
	op   crashOp
	at   crashAt
}

// crashPoints are the crash points of the operations whose clean runs made sequences, in three
// modes, each named <mode>/<operation>/<index>-<method> by the call the worker dies after:
//
//   - task: the worker dies as soon as the call took effect. The workflow task open since the
//     operation's last recorded step is replayed: every call made in it is made again. At every
//     call.
//   - call: the call's answer is held first (crashHold) until the SDK has recorded the calls
//     before it, so that only this call is made again, on the state it left. At every call that
//     changes something; at every call with long.
//   - span: the answer of the operation's previous call that changed something is held, then
//     the worker dies after this one: both, and the calls between, are made again, the earlier
//     one on the state the later one left (a stop made again after the destroy, say). At every
//     call that changes something after another; at every call after one with long. Named
//     span/<operation>/<index>-<method>-<index>-<method>, from the held call to the crash.
func crashPoints(sequences [][]pvesim.Call, long bool) []crashPoint {
	var points []crashPoint
	add := func(mode string, op crashOp, calls []pvesim.Call, from, to int) {
		name := fmt.Sprintf("%s/%s/%02d-%s", mode, op.name, to, calls[to-1].Method)
		if mode == "span" {
			name = fmt.Sprintf("%s/%s/%02d-%s-%02d-%s", mode, op.name, from, calls[from-1].Method, to, calls[to-1].Method)
		}
		points = append(points, crashPoint{name: name, op: op, at: crashAt{calls: calls, from: from, to: to}})
	}
	for i, op := range crashOps {
		for to := range len(sequences[i]) {
			add("task", op, sequences[i], 0, to+1)
		}
	}
	for i, op := range crashOps {
		for to, c := range sequences[i] {
			if long || effects[c.Method] {
				add("call", op, sequences[i], to+1, to+1)
			}
		}
	}
	for i, op := range crashOps {
		last := 0 // the last call that changed something, 1-based
		for to, c := range sequences[i] {
			if last > 0 && (long || effects[c.Method]) {
				add("span", op, sequences[i], last, to+1)
			}
			if effects[c.Method] {
				last = to + 1
			}
		}
	}
	return points
}

// crashAt is a crash point in an operation whose clean run made calls: the worker dies after
// the call at index to (1-based) took its effect. With from > 0 the answer of the call at index
// from is held first for crashHold, so that the calls from from on are the ones made again.
type crashAt struct {
	calls    []pvesim.Call
	from, to int
}

// hook is a callHook that runs fn after the call at index i.
func (at crashAt) hook(i int, fn func()) callHook {
	method, nth := at.calls[i-1].Method, 0
	for _, c := range at.calls[:i] {
		if c.Method == method {
			nth++
		}
	}
	return callHook{method: method, nth: nth, fn: fn}
}

// crashOp is an operation the test crashes: a proxy is created first unless the operation is
// the create, then send asks for the operation and check looks at the simulator afterwards.
type crashOp struct {
	name string
	send func(ctx context.Context, c *starter.Client, uid string) (*starter.Request, error)
	// check checks the VM after the operation and the operation's answer, res: an answer must
	// say what the operation did even when a worker died after doing it.
	check func(t *testing.T, e *crashEnv, uid string, res json.RawMessage)
}

const (
	crashUserData  = "#cloud-config\nhostname: crash\n"
	crashUserData2 = "#cloud-config\nhostname: crash-again\n"
)

func sendCreate(ctx context.Context, c *starter.Client, uid string) (*starter.Request, error) {
	return c.Create(ctx, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small", UserData: crashUserData})
}

var crashOps = []crashOp{
	{
		name: "create",
		send: sendCreate,
		check: func(t *testing.T, e *crashEnv, uid string, res json.RawMessage) {
			vm := e.oneVM(t, uid)
			assert.Len(t, e.sim.CloneRuns(), 1, "clone tasks")
			assert.Equal(t, 1, e.startsSinceArmed(t, vm.VMID), "starts of VM %d", vm.VMID)
			e.checkSize(t, vm, 2, 2048)
			var got proxyvm.CreateProxyResult
			require.NoError(t, json.Unmarshal(res, &got))
			assert.Equal(t, vm.VMID, got.VMID, "the answer's VMID")
			assert.True(t, got.Provisioned, "the answer says the create provisioned the VM it cloned")
			assert.True(t, got.Restarted, "the answer says the create started the VM")
			assert.Empty(t, got.Changed, "the answer's changes: a VM the create provisioned is not changed")
			_, instances, _ := e.sim.CloudInit(vm.VMID)
			assert.Equal(t, 1, instances, "instances cloud-init began in VM %d", vm.VMID)
		},
	},
	{
		name: "change-machine-type",
		send: func(ctx context.Context, c *starter.Client, uid string) (*starter.Request, error) {
			return c.Change(ctx, proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
		},
		check: func(t *testing.T, e *crashEnv, uid string, res json.RawMessage) {
			vm := e.oneVM(t, uid)
			assert.Len(t, e.sim.CloneRuns(), 1, "clone tasks")
			assert.Equal(t, 0, e.startsSinceArmed(t, vm.VMID), "starts of VM %d", vm.VMID)
			e.checkSize(t, vm, 4, 4096)
			e.checkChanged(t, res, "cores 2 -> 4", "memory 2048 -> 4096 MiB")
			iid, instances, _ := e.sim.CloudInit(vm.VMID)
			assert.Equal(t, e.instances, instances, "instances cloud-init began in VM %d: a reboot begins none", vm.VMID)
			assert.Equal(t, e.instanceID, iid, "cloud-init's instance-id in VM %d", vm.VMID)
		},
	},
	{
		name: "change-user-data",
		send: func(ctx context.Context, c *starter.Client, uid string) (*starter.Request, error) {
			ud := crashUserData2
			return c.Change(ctx, proxyvm.ChangeRequest{UID: uid, UserData: &ud})
		},
		check: func(t *testing.T, e *crashEnv, uid string, res json.RawMessage) {
			vm := e.oneVM(t, uid)
			assert.Len(t, e.sim.CloneRuns(), 1, "clone tasks")
			assert.Equal(t, 0, e.startsSinceArmed(t, vm.VMID), "starts of VM %d", vm.VMID)
			e.checkSize(t, vm, 2, 2048)
			iid, instances, _ := e.sim.CloudInit(vm.VMID)
			e.checkChanged(t, res, "user-data (instance-id "+iid+")")
			assert.Equal(t, e.instances+1, instances, "instances cloud-init began in VM %d: the new user-data's, once", vm.VMID)
			assert.NotEqual(t, e.instanceID, iid, "cloud-init's instance-id in VM %d", vm.VMID)
			seed, _ := e.sim.GuestSeed(vm.VMID)
			t.Logf("VM %d: cloud-init's instance %s; the seed its last boot found has user-data %q", vm.VMID, iid, seed["user-data"])
		},
	},
	{
		name: "delete",
		send: func(ctx context.Context, c *starter.Client, uid string) (*starter.Request, error) {
			return c.Delete(ctx, proxyvm.DeleteProxyInput{UID: uid})
		},
		check: func(t *testing.T, e *crashEnv, uid string, res json.RawMessage) {
			assert.Empty(t, e.marked(uid), "VMs with the proxy's mark")
			var got proxyvm.DeleteProxyResult
			require.NoError(t, json.Unmarshal(res, &got))
			if assert.Len(t, got.Destroyed, 1, "the answer's destroyed VMs") {
				assert.Equal(t, e.vmid, got.Destroyed[0].VMID, "the VM the answer says it destroyed")
			}
			seed := proxy.SeedVolID("local", proxy.NameFromUID(uid))
			for _, v := range e.sim.Volumes() {
				assert.NotEqual(t, seed, v.VolID, "the proxy's seed ISO is left")
			}
			assert.Equal(t, 0, e.startsSinceArmed(t, 0), "starts")
		},
	},
}

// crashSuite is what every crash point shares: the Temporal server and the worker's binary.
type crashSuite struct {
	dir       string
	workerBin string
	env       []string
	temporal  client.Client
}

func newCrashSuite(t *testing.T) *crashSuite {
	dir, err := os.MkdirTemp("", "pveflow-crash-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the crash points' logs are kept in %s", dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	})
	bin := filepath.Join(dir, "bin")
	buildBinaries(t, bin)
	srv := testserver.New(t)
	return &crashSuite{
		dir:       dir,
		workerBin: filepath.Join(bin, "worker"),
		env:       []string{"TEMPORAL_ADDRESS=" + srv.Address(), "TEMPORAL_NAMESPACE=" + srv.Namespace(), "HOME=" + dir, "XDG_RUNTIME_DIR=" + dir},
		temporal:  srv.Client(),
	}
}

// crashEnv is one crash point's simulator and worker.
type crashEnv struct {
	sim    *pvesim.Cluster
	api    *crashAPI
	worker *proc
	// tasksBefore is how many Proxmox tasks had run when the operation was asked for.
	tasksBefore int
	// instanceID and instances are the cloud-init instance of the proxy's VM then, and how many
	// it began so far; empty and 0 without a VM.
	instanceID string
	instances  int
	// vmid is the proxy's VM's then, 0 without one.
	vmid int
}

// point runs op on a proxy of its own, with a crash at at unless it is nil, checks the outcome,
// and returns the calls the operation made.
func (s *crashSuite) point(t *testing.T, op crashOp, name string, at *crashAt) []pvesim.Call {
	dir := filepath.Join(s.dir, name)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	opts := pvesim.Default()
	// Every task is over when it starts and the guest agent answers at boot: a run's calls are
	// then the same every time, so a crash point names the same call in every run.
	opts.TaskDurations = map[string]time.Duration{}
	for _, typ := range []string{"qmclone", "qmstart", "qmstop", "qmreboot", "qmdestroy", "resize", "imgcopy", "imgdel"} {
		opts.TaskDurations[typ] = 0
	}
	opts.AgentBootDelay = 0
	sim := pvesim.New(opts)
	e := &crashEnv{sim: sim, api: &crashAPI{API: sim}}
	srv, err := simserver.Start(simserver.Options{API: e.api, Dir: filepath.Join(dir, "pvesim")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	cfg := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(crashWorkerConfig(srv)), 0o600))
	queue := "crash-" + name
	e.worker = &proc{name: "worker", bin: s.workerBin, env: s.env, log: filepath.Join(dir, "worker.log"),
		args: []string{"--config", cfg, "--task-queue", queue, "--health-every", "0"}}
	e.worker.mustStart(t, "")
	t.Cleanup(e.worker.kill)
	requests := starter.New(s.temporal, queue)
	defer func() {
		if t.Failed() {
			t.Logf("worker log %s ends:\n%s", e.worker.log, tailOf(e.worker.log))
		}
	}()

	uid := "crash-" + name
	ctx, cancel := context.WithTimeout(context.Background(), 2*crashDeadline)
	defer cancel()
	if op.name != "create" {
		req, err := sendCreate(ctx, requests, uid)
		require.NoError(t, err, "create before the %s", op.name)
		require.NoError(t, req.Get(ctx, nil), "create before the %s", op.name)
	}

	callsBefore := len(sim.Calls())
	e.tasksBefore = len(sim.TaskRuns())
	if vms := e.marked(uid); len(vms) == 1 {
		e.vmid = vms[0].VMID
		e.instanceID, e.instances, _ = sim.CloudInit(vms[0].VMID)
	}
	var crashed sync.WaitGroup
	var crashCalls int
	var restartErr error
	if at != nil {
		var hooks []callHook
		if at.from > 0 {
			hooks = append(hooks, at.hook(at.from, func() { time.Sleep(crashHold) }))
		}
		crashed.Add(1)
		hooks = append(hooks, at.hook(at.to, func() {
			defer crashed.Done()
			crashCalls = len(sim.Calls())
			e.worker.kill()
			_, restartErr = e.worker.start("")
		}))
		e.api.arm(hooks...)
	}
	began := time.Now()
	req, err := op.send(ctx, requests, uid)
	require.NoError(t, err, "%s not accepted", op.name)
	var res json.RawMessage
	opCtx, opCancel := context.WithTimeout(ctx, crashDeadline)
	defer opCancel()
	err = req.Get(opCtx, &res)
	took := time.Since(began)
	calls := sim.Calls()[callsBefore:]
	if at != nil {
		if !assert.Zero(t, e.api.pending(), "the crash point was never reached") {
			e.api.arm()
			return calls
		}
		crashed.Wait()
		require.NoError(t, restartErr, "worker not started again")
		made := calls[:crashCalls-callsBefore]
		assert.Equal(t, callNames(at.calls[:at.to]), callNames(made[:min(len(made), at.to)]),
			"the crashed run's calls up to the crash differ from the clean run's: the crash point is not the one named")
		again := calls[len(made):]
		t.Logf("after the crash the worker made %d calls: %s", len(again), strings.Join(callNames(again), " "))
		if at.from > 0 && len(again) > 0 {
			// A step recorded after the held call (a wait that is an activity) moves the start
			// of what is made again later, not earlier.
			assert.Contains(t, callNames(at.calls[at.from-1:at.to]), again[0].Method,
				"the first call after the crash is the held call or one after it: the calls before it were recorded")
		}
	}
	if err != nil {
		t.Fatalf("%s of %s failed after %s: %v", op.name, uid, took.Round(time.Millisecond), err)
	}
	t.Logf("%s answered in %s after %d calls: %s", op.name, took.Round(time.Millisecond), len(calls), res)
	t.Logf("tasks since the request: %s", e.taskSummary(t))
	op.check(t, e, uid, res)
	return calls
}

// checkChanged checks a change's answer, res: it lists changed, in any order, and says the
// guest was restarted, as every change these operations make needs.
func (e *crashEnv) checkChanged(t *testing.T, res json.RawMessage, changed ...string) {
	t.Helper()
	var got proxyvm.ChangeProxyResult
	require.NoError(t, json.Unmarshal(res, &got))
	assert.ElementsMatch(t, changed, got.Changed, "what the answer says changed")
	assert.True(t, got.Restarted, "the answer says the guest was restarted")
	assert.Equal(t, e.vmid, got.VMID, "the answer's VMID")
}

// callNames are the methods of calls, in order. The VMIDs differ from run to run: they derive
// from the proxy's UID.
func callNames(calls []pvesim.Call) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.Method
	}
	return out
}

// crashWorkerConfig is the workers' configuration: one node, machine types small and large, no
// checks between requests (their calls would shift the crash points), budgets that leave room
// for a lost workflow task and a lost activity attempt, attempts that outlast crashHold, and
// quick polls.
func crashWorkerConfig(srv *simserver.Server) string {
	return simCluster(srv.URL(), srv.CAFile(), srv.TokenFile()) + `  machineTypes:
    small: {cores: 2, memoryMiB: 2048, diskGiB: 10}
    large: {cores: 4, memoryMiB: 4096, diskGiB: 10}
  requestTimeoutSeconds: 20
budgets: {clone: 2m, upload: 1m, resize: 1m, start: 1m, stop: 1m, destroy: 1m, running: 1m, agent: 1m, unlock: 1m, request: 15s}
poll: {initialInterval: 200ms, backoffCoefficient: 1.5, maximumInterval: 1s}
entity: {checkInterval: 0s, closeAfter: 1m}
`
}

// marked lists the VMs that carry uid's mark.
func (e *crashEnv) marked(uid string) []pvesim.VM {
	var out []pvesim.VM
	for _, vm := range e.sim.VMs() {
		if owner, _ := proxy.OwnerOf(vm.Config); owner == uid {
			out = append(out, vm)
		}
	}
	return out
}

// oneVM is the one VM with uid's mark, running; it fails t if there is not exactly one.
func (e *crashEnv) oneVM(t *testing.T, uid string) pvesim.VM {
	t.Helper()
	vms := e.marked(uid)
	require.Len(t, vms, 1, "VMs with the proxy's mark: %s", vmList(vms))
	assert.True(t, vms[0].Running, "VM %d runs", vms[0].VMID)
	assert.Empty(t, vms[0].Config["lock"], "VM %d's lock", vms[0].VMID)
	return vms[0]
}

// checkSize checks that vm's config and the guest that runs have cores and memoryMiB.
func (e *crashEnv) checkSize(t *testing.T, vm pvesim.VM, cores int, memoryMiB int64) {
	t.Helper()
	assert.Equal(t, strconv.Itoa(cores), vm.Config["cores"], "cores in VM %d's config", vm.VMID)
	assert.Equal(t, strconv.FormatInt(memoryMiB, 10), vm.Config["memory"], "memory in VM %d's config", vm.VMID)
	st, err := e.sim.VMStatus(context.Background(), vm.Node, vm.VMID)
	require.NoError(t, err)
	assert.Equal(t, cores, st.CPUs, "cores VM %d runs with", vm.VMID)
	assert.Equal(t, memoryMiB<<20, st.MaxMem, "memory VM %d runs with", vm.VMID)
}

// taskSummary counts the Proxmox tasks since the operation was asked for by type and exit
// status, for the log: a reboot made again shows there.
func (e *crashEnv) taskSummary(t *testing.T) string {
	t.Helper()
	counts := map[string]int{}
	for _, run := range e.sim.TaskRuns()[e.tasksBefore:] {
		info, err := pve.ParseUPID(run.UPID)
		require.NoError(t, err)
		st, err := e.sim.TaskStatus(context.Background(), info.Node, run.UPID)
		require.NoError(t, err)
		counts[fmt.Sprintf("%s %q", info.Type, st.ExitStatus)]++
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, fmt.Sprintf("%s ×%d", k, counts[k]))
	}
	return strings.Join(out, ", ")
}

// startsSinceArmed counts the start tasks of vmid (of any VM when 0) that ended OK since the
// operation was asked for: the VM's boots, which a start made again after its answer was lost
// must not add to (its task fails: the VM runs already).
func (e *crashEnv) startsSinceArmed(t *testing.T, vmid int) int {
	t.Helper()
	n := 0
	for _, run := range e.sim.TaskRuns()[e.tasksBefore:] {
		info, err := pve.ParseUPID(run.UPID)
		require.NoError(t, err)
		if info.Type != "qmstart" || (vmid != 0 && info.ID != strconv.Itoa(vmid)) {
			continue
		}
		st, err := e.sim.TaskStatus(context.Background(), info.Node, run.UPID)
		require.NoError(t, err)
		if st.ExitStatus == "OK" {
			n++
		} else {
			t.Logf("a start of VM %s made again ended %q", info.ID, st.ExitStatus)
		}
	}
	return n
}
