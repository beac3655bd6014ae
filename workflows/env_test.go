package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/syncbuf"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

const uid = "0f5b1c9e-4a7d-4e8b-9a51-7c2e3d4f5a60"

// testConfig is the configuration for the simulator's default cluster.
func testConfig(t *testing.T) config.Config {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "testdata", "config", "simulator.yaml"))
	require.NoError(t, err)
	// One workflow runs per test environment: a create's clone lease comes from the
	// CloneAdmission workflow, which admission_test.go tests on its own and the end-to-end
	// tests together with creates.
	cfg.Clones.PerStorage = 0
	return cfg
}

func createInput() proxyvm.ProxySpec {
	return proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small", UserData: "#cloud-config\n"}
}

// world is a simulated cluster that outlives the workflow environments run against it, so a
// test can run CreateProxy and then DeleteProxy, or CreateProxy twice, on the same cluster.
type world struct {
	t       *testing.T
	cfg     config.Config
	cluster *pvesim.Cluster
	clock   *envClock
	// log is what every environment of the world logged. Each has its own handler, and a local
	// activity an ended environment left running may still log while the next one does.
	log *syncbuf.Buffer
	// wrap, when set, stands between the activities and the cluster, as a network would.
	wrap func(pve.API) pve.API
	// runs are the other workflows as Temporal would describe them.
	runs *runs
	// proxies are the Proxy entities RequestChange and RequestDelete send requests to.
	proxies *proxies
	// pools are the AddressPool workflows AllocateAddress and FreeAddress send requests to.
	pools *addressPools
	// ops counts the operations the world ran (runOp), to give each run an ID of its own.
	ops int
}

// runs stands for what Temporal knows of workflow runs, which DescribeRun asks: the runs a
// test sets, by workflow ID. A workflow ID it does not hold never ran. It is the Temporal side
// of the activities, not Proxmox's, so it is a fake beside the simulator.
type runs struct {
	mu   sync.Mutex
	byID map[string]activities.RunInfo
	// observing, when set, makes SignalWithStartRun take an entity's word to an observer, and
	// SignalRun deliver the observer's looks to the entities: watches and looks record them.
	observing bool
	watches   []core.WatchRequest
	looks     map[string][]core.Look
	// describing, when set, is called with the workflow ID of every run described, before the
	// answer is read: what happens to a run while Temporal is asked about it.
	describing func(workflowID string)
}

func (r *runs) DescribeRun(_ context.Context, workflowID, runID string) (activities.RunInfo, error) {
	r.mu.Lock()
	describing := r.describing
	r.mu.Unlock()
	if describing != nil {
		describing(workflowID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	run := r.byID[workflowID]
	if runID != "" && run.RunID != runID {
		return activities.RunInfo{}, errors.New("describe " + workflowID + ": no run " + runID)
	}
	return run, nil
}

// SignalRun cannot deliver a signal: the test environment takes signals from the test's own
// goroutine, not from an activity's. Every workflow reads as not running, so a create starts its
// admission, or finds the one it started, and asks it from the workflow.
func (r *runs) SignalRun(_ context.Context, workflowID, _, signal string, arg any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.observing && signal == core.LookSignal {
		var l core.Look
		if err := json.Unmarshal(arg.(json.RawMessage), &l); err != nil {
			return err
		}
		r.looks[workflowID] = append(r.looks[workflowID], l)
		return nil
	}
	return pve.Classified(pve.NotFound, errors.New("workflow "+workflowID+" cannot be signalled from an activity in a test environment"))
}

// SignalWithStartRun cannot start a workflow: the test environment runs one workflow and its
// children. A create then starts its admission as its child and asks it from the workflow.
func (r *runs) SignalWithStartRun(_ context.Context, workflowID, signal string, arg any, _ activities.StartRun) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.observing && signal == core.WatchSignal {
		var req core.WatchRequest
		if err := json.Unmarshal(arg.(json.RawMessage), &req); err != nil {
			return err
		}
		r.watches = append(r.watches, req)
		return nil
	}
	return pve.Classified(pve.Permanent, errors.New("workflow "+workflowID+" cannot be started from an activity in a test environment"))
}

// start records a run of workflowID that started at startedAt and runs.
func (r *runs) start(workflowID string, startedAt time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[workflowID] = activities.RunInfo{RunID: workflowID + "/run", Running: true, StartedAt: startedAt}
}

// set records run as the latest run of workflowID.
func (r *runs) set(workflowID string, run activities.RunInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[workflowID] = run
}

// closeAll closes every run with status.
func (r *runs) closeAll(status string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, run := range r.byID {
		run.Running, run.Status = false, status
		r.byID[id] = run
	}
}

// close closes the run of workflowID with status.
func (r *runs) close(workflowID, status string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run := r.byID[workflowID]
	run.Running, run.Status = false, status
	r.byID[workflowID] = run
}

// api is what the activities call.
func (w *world) api() pve.API {
	if w.wrap != nil {
		return w.wrap(w.cluster)
	}
	return w.cluster
}

// envClock tells the simulator the test environment's time, which skips ahead over retry
// backoffs: a 30-second task is seen done after the polls of 30 virtual seconds.
type envClock struct {
	env *testsuite.TestWorkflowEnvironment
	off time.Time
}

func (c *envClock) Now() time.Time {
	if c.env == nil {
		return c.off
	}
	return c.env.Now()
}

func newWorld(t *testing.T, change ...func(*pvesim.Options)) *world {
	t.Helper()
	clock := &envClock{off: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	opts := pvesim.Default()
	opts.Clock = clock
	opts.AgentBootDelay = 20 * time.Second
	opts.TaskDurations = map[string]time.Duration{"qmclone": 45 * time.Second, "qmstart": 3 * time.Second}
	for _, c := range change {
		c(&opts)
	}
	cluster := pvesim.New(opts)
	return &world{t: t, cfg: testConfig(t), cluster: cluster, clock: clock, log: &syncbuf.Buffer{},
		runs: &runs{byID: make(map[string]activities.RunInfo), looks: make(map[string][]core.Look)}, proxies: newProxies(clock, cluster), pools: &addressPools{clock: clock}}
}

// env is a fresh workflow environment on the world's cluster, with real activities.
func (w *world) env() *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(w.log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	env := suite.NewTestWorkflowEnvironment()
	// Time goes on from where the last environment left the cluster.
	env.SetStartTime(w.clock.Now())
	w.clock.env = env
	env.RegisterActivity(&activities.Activities{API: w.api(), Proxmox: w.cfg.Proxmox, Now: env.Now, Runs: w.runs, Proxies: w.proxies,
		AddressPools: w.pools})
	(&workflows.Workflows{Config: w.cfg}).Register(env)
	env.RegisterWorkflowWithOptions(entityStub, workflow.RegisterOptions{Name: entityStubName})
	return env
}

// entityStubName is the workflow that stands for a proxy's entity in tests of one operation:
// the operations run only as its children.
const entityStubName = "EntityStub"

// entityStub runs one operation as a proxy's entity would: as its child, under the
// operation's ID. The testsuite numbers a child's run ID from its environment's sequence, which
// begins anew in every environment: the stub moves that on by opsBefore, the operations its
// world ran before, so that every run has an ID of its own, as on a server. An operation's mark
// on its VM (proxy.Op) names its run.
func entityStub(ctx workflow.Context, operation string, in json.RawMessage, opsBefore int) (json.RawMessage, error) {
	timers, stop := workflow.WithCancel(ctx)
	for range opsBefore {
		workflow.NewTimer(timers, time.Hour)
	}
	stop()
	suffix := map[string]string{core.CreateProxyName: "/create", core.ChangeProxyName: "/change", core.DeleteProxyName: "/delete"}[operation]
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID + suffix})
	var out json.RawMessage
	err := workflow.ExecuteChildWorkflow(ctx, operation, in).Get(ctx, &out)
	return out, err
}

// runOp runs the operation workflow of a proxy, with input in, under the stub of its entity;
// the environment's result is the operation's. The status query is the operation's:
// QueryWorkflowByID(opID(...)).
func (w *world) runOp(env *testsuite.TestWorkflowEnvironment, operation string, in any) {
	var uidOf struct {
		UID string `json:"uid"`
	}
	data, _ := json.Marshal(in)
	_ = json.Unmarshal(data, &uidOf)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: core.ProxyWorkflowID(uidOf.UID)})
	w.ops++
	env.ExecuteWorkflow(entityStubName, operation, in, w.ops-1)
}

// sameRunAgain makes the next operation the world runs have the run ID of the last one: what a
// run made again after its worker died is, its calls made again on the VM they left.
func (w *world) sameRunAgain() { w.ops-- }

// advance lets time pass on the cluster between two workflow runs.
func (w *world) advance(d time.Duration) {
	w.clock.off = w.clock.Now().Add(d)
	w.clock.env = nil
}

func (w *world) create(in proxyvm.ProxySpec) (proxyvm.CreateProxyResult, error) {
	env := w.env()
	w.runOp(env, core.CreateProxyName, in)
	require.True(w.t, env.IsWorkflowCompleted())
	var res proxyvm.CreateProxyResult
	if err := env.GetWorkflowError(); err != nil {
		return res, err
	}
	require.NoError(w.t, env.GetWorkflowResult(&res))
	return res, nil
}

func (w *world) change(in proxyvm.ProxySpec) (proxyvm.ChangeProxyResult, error) {
	env := w.env()
	w.runOp(env, core.ChangeProxyName, in)
	require.True(w.t, env.IsWorkflowCompleted())
	var res proxyvm.ChangeProxyResult
	if err := env.GetWorkflowError(); err != nil {
		return res, err
	}
	require.NoError(w.t, env.GetWorkflowResult(&res))
	return res, nil
}

func (w *world) delete(in proxyvm.DeleteProxyInput) (proxyvm.DeleteProxyResult, error) {
	env := w.env()
	w.runOp(env, core.DeleteProxyName, in)
	require.True(w.t, env.IsWorkflowCompleted())
	var res proxyvm.DeleteProxyResult
	if err := env.GetWorkflowError(); err != nil {
		return res, err
	}
	require.NoError(w.t, env.GetWorkflowResult(&res))
	return res, nil
}

// vms are the cluster's VMs other than templates.
func (w *world) vms() []pvesim.VM {
	var out []pvesim.VM
	for _, v := range w.cluster.VMs() {
		if v.Config["template"] != "1" {
			out = append(out, v)
		}
	}
	return out
}

// isos are the volume IDs of the cluster's ISOs.
func (w *world) isos() []string {
	var out []string
	for _, v := range w.cluster.Volumes() {
		if v.Data != nil {
			out = append(out, v.VolID)
		}
	}
	return out
}

// failureType is the ApplicationError type a workflow failed with.
func failureType(t *testing.T, err error) string {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	return appErr.Type()
}

func vmConfig(t *testing.T, w *world, vmid int) pve.VMConfig {
	t.Helper()
	for _, v := range w.cluster.VMs() {
		if v.VMID == vmid {
			return v.Config
		}
	}
	t.Fatalf("no VM %d", vmid)
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// scheduledSeen shows activity and child the options of every activity and child workflow a
// workflow schedules, where set, as the testsuite's activity and workflow info carry neither the
// retry policy nor the workflow task timeout.
type scheduledSeen struct {
	interceptor.WorkerInterceptorBase
	activity func(activityType string, o workflow.ActivityOptions)
	child    func(workflowType string, o workflow.ChildWorkflowOptions)
}

func (s *scheduledSeen) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &scheduledSeenInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, seen: s}
}

type scheduledSeenInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	seen *scheduledSeen
}

func (i *scheduledSeenInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&scheduledSeenOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, seen: i.seen})
}

type scheduledSeenOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	seen *scheduledSeen
}

func (o *scheduledSeenOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if o.seen.activity != nil {
		o.seen.activity(activityType, workflow.GetActivityOptions(ctx))
	}
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *scheduledSeenOutbound) ExecuteChildWorkflow(ctx workflow.Context, childWorkflowType string, args ...any) workflow.ChildWorkflowFuture {
	if o.seen.child != nil {
		o.seen.child(childWorkflowType, workflow.GetChildWorkflowOptions(ctx))
	}
	return o.Next.ExecuteChildWorkflow(ctx, childWorkflowType, args...)
}
