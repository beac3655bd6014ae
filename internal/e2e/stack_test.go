package e2e_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// stack is an in-process Temporal server with pveflow's search attributes, and a worker that runs
// the workflows and activities against a Proxmox API, all in real time.
type stack struct {
	t testing.TB
	// server is the stack's own server; nil for a stack on a client of its own
	// (newStackOnClient), whose server the test runs.
	server *testserver.Server
	// serverCPU is the processor time the Temporal server has used so far: the stack's own
	// server's, or a cluster's.
	serverCPU func() (time.Duration, error)
	client    client.Client
	cfg       config.Config
	api       pve.API
	// runs describes and signals runs through the server's default client, the workers'.
	runs *activities.TemporalRuns
	// starter sends requests to the proxies' entities, as pveflow and the worker's
	// EntityProxies do.
	starter *starter.Client
	worker  worker.Worker
	// flatPriorities makes every Proxmox call of the stack's workers one of the default
	// priority, as before calls had priorities: for a benchmark's comparison.
	flatPriorities bool
}

// fastConfig is the simulator's configuration with budgets and polls for real-time runs
// against a simulator whose tasks take a second or two.
func fastConfig(t testing.TB) config.Config {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "..", "testdata", "config", "simulator.yaml"))
	require.NoError(t, err)
	cfg.Budgets = config.Budgets{
		Clone: 30 * time.Second, Upload: 10 * time.Second, Resize: 10 * time.Second,
		Start: 10 * time.Second, Stop: 10 * time.Second, Destroy: 10 * time.Second,
		Running: 10 * time.Second, Agent: 20 * time.Second, CloudInit: 20 * time.Second, Unlock: 30 * time.Second,
		Request: 10 * time.Second,
	}
	cfg.Poll = config.Poll{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1.2, MaximumInterval: time.Second}
	return cfg
}

const uid = "0f5b1c9e-4a7d-4e8b-9a51-7c2e3d4f5a60"

// otherUID is another proxy's, whose clone this proxy's create meets.
const otherUID = "7d1e2f30-5a4b-4c6d-8e9f-0a1b2c3d4e5f"

// thirdUID is a third proxy's, queued behind both.
const thirdUID = "2c4e6a80-1b3d-4f5a-9c7e-8d0f1a2b3c4d"

func createInput(uid string) proxyvm.ProxySpec {
	return proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small", UserData: "#cloud-config\n"}
}

// startStack starts the stack for a test or benchmark, which stops it when it ends. A benchmark
// may stop it sooner, with stop, as each of its iterations starts one.
func startStack(t testing.TB, api pve.API, cfg config.Config) *stack {
	t.Helper()
	return startStackWith(t, api, cfg, client.Options{})
}

// startStackWith is startStack with the server's default client, and so the stack's client and
// its worker, made with base: with a codec's DataConverter and FailureConverter, say.
func startStackWith(t testing.TB, api pve.API, cfg config.Config, base client.Options) *stack {
	t.Helper()
	s := newStack(t, api, cfg, base)
	s.startWorker()
	return s
}

// newStack is startStackWith without a worker, for a test that starts its own.
func newStack(t testing.TB, api pve.API, cfg config.Config, base client.Options) *stack {
	t.Helper()
	server := testserver.New(t, testserver.WithBaseClientOptions(base))
	s := newStackOnClient(t, server.Client(), server.Namespace(), api, cfg, base)
	s.server, s.serverCPU = server, server.CPU
	return s
}

// newStackOnClient is newStack on a server the test runs, which c, made with base, reaches:
// its worker polls through c.
func newStackOnClient(t testing.TB, c client.Client, namespace string, api pve.API, cfg config.Config, base client.Options) *stack {
	return &stack{t: t, client: c, cfg: cfg, api: api,
		runs:    &activities.TemporalRuns{Client: c},
		starter: starter.New(c, core.DefaultTaskQueue, starter.WithDataConverter(base.DataConverter), starter.WithNamespace(namespace)),
	}
}

// startRESTStack starts a stack whose worker reaches cluster over the simulator's REST API, as
// it reaches Proxmox.
func startRESTStack(t *testing.T, cluster *pvesim.Cluster) *stack {
	t.Helper()
	cfg := fastConfig(t)
	return startStack(t, overREST(t, cluster, &cfg, pve.ClientConfig{}), cfg)
}

// overREST serves cluster over the simulator's REST API until tb ends, points cfg's proxmox
// section at it, and returns a client of it with client's other settings (its limits, its
// observers).
func overREST(tb testing.TB, cluster *pvesim.Cluster, cfg *config.Config, client pve.ClientConfig) pve.API {
	tb.Helper()
	srv, err := simserver.Start(simserver.Options{API: cluster, Dir: tb.TempDir()})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = srv.Close() })
	cfg.Proxmox.URL, cfg.Proxmox.CAFile, cfg.Proxmox.TokenFile = srv.URL(), srv.CAFile(), srv.TokenFile()
	client.URL, client.CAFile, client.TokenFile = srv.URL(), srv.CAFile(), srv.TokenFile()
	api, err := pve.NewClient(client)
	require.NoError(tb, err)
	return api
}

// stop stops the server and its workers.
func (s *stack) stop() { s.server.Stop() }

// startWorker starts a worker, as a restarted worker process would.
func (s *stack) startWorker() {
	// As the worker process does: the care workflows' calls wait behind the others.
	var opts worker.Options
	if !s.flatPriorities {
		opts.Interceptors = []interceptor.WorkerInterceptor{activities.CallPriority(core.CareWorkflows...)}
	}
	if s.server != nil {
		s.worker = s.server.NewWorkerWithOptions(core.DefaultTaskQueue, s.register, opts)
		return
	}
	// As the server's NewWorker does: it stops when the test ends.
	opts.WorkflowPanicPolicy = worker.FailWorkflow
	w := worker.New(s.client, core.DefaultTaskQueue, opts)
	s.register(w)
	require.NoError(s.t, w.Start())
	s.t.Cleanup(w.Stop)
	s.worker = w
}

// register registers the workflows and the activities, as the worker does: Rollout's and
// CollectGarbage's requests go to the entities through the stack's starter.
func (s *stack) register(r worker.Registry) {
	(&workflows.Workflows{Config: s.cfg}).Register(r)
	r.RegisterActivity(&activities.Activities{API: s.api, Proxmox: s.cfg.Proxmox, Runs: s.runs,
		Proxies: starter.EntityProxies{Client: s.starter}, AddressPools: starter.AddressPools{Client: s.starter},
		LookAgainWithin: activities.DefaultLookAgainWithin})
}

// startCreate sends a create request to the entity of in.UID, as pveflow create does, and
// returns once the entity accepted it.
func (s *stack) startCreate(in proxyvm.ProxySpec) *starter.Request {
	s.t.Helper()
	return accepted(s.t)(s.starter.Create(context.Background(), in))
}

// startChange sends a change request to the entity of req.UID, as pveflow update does.
func (s *stack) startChange(req proxyvm.ChangeRequest) *starter.Request {
	s.t.Helper()
	return accepted(s.t)(s.starter.Change(context.Background(), req))
}

// startDelete sends a delete request to the entity of in.UID, as pveflow delete does.
func (s *stack) startDelete(in proxyvm.DeleteProxyInput) *starter.Request {
	s.t.Helper()
	return accepted(s.t)(s.starter.Delete(context.Background(), in))
}

// accepted requires that a request was sent and accepted.
func accepted(t testing.TB) func(*starter.Request, error) *starter.Request {
	return func(r *starter.Request, err error) *starter.Request {
		t.Helper()
		require.NoError(t, err)
		return r
	}
}

// served waits, within a minute, for the operation that serves r, and returns its result.
func served[T any](t testing.TB, r *starter.Request) (T, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var res T
	err := r.Get(ctx, &res)
	return res, err
}

// serve requires that the request r is served without error.
func serve[T any](t testing.TB, r *starter.Request) {
	t.Helper()
	_, err := served[T](t, r)
	require.NoError(t, err)
}

// proxyStatus is the status that the entity of uid answers.
func (s *stack) proxyStatus(uid string) proxyvm.ProxyStatus {
	s.t.Helper()
	val, err := s.client.QueryWorkflow(context.Background(), core.ProxyWorkflowID(uid), "", core.StatusQuery)
	require.NoError(s.t, err)
	var st proxyvm.ProxyStatus
	require.NoError(s.t, val.Get(&st))
	return st
}

// operation is the run of the latest operation of kind (proxyvm.OpCreate, OpChange, OpDelete)
// of the entity of uid, its child: the one that runs, or else the last that closed. Once a
// request was served, it is the run that served it.
func (s *stack) operation(uid, kind string) client.WorkflowRun {
	s.t.Helper()
	st := s.proxyStatus(uid)
	ops := st.Operations
	if st.Operation != nil {
		ops = append(ops, *st.Operation)
	}
	for _, op := range slices.Backward(ops) {
		if op.Kind == kind && op.RunID != "" {
			return s.client.GetWorkflow(context.Background(), op.WorkflowID, op.RunID)
		}
	}
	require.FailNow(s.t, "no operation", "the entity of %s ran no %s: %+v", uid, kind, ops)
	return nil
}

// startGC starts a CollectGarbage as the starter does, under the request ID requestID.
func (s *stack) startGC(requestID string, in fleet.CollectGarbageInput) client.WorkflowRun {
	s.t.Helper()
	opts := client.StartWorkflowOptions{ID: core.CollectGarbageWorkflowID(requestID), TaskQueue: core.DefaultTaskQueue}
	run, err := s.client.ExecuteWorkflow(context.Background(), opts, core.CollectGarbageName, in)
	require.NoError(s.t, err)
	return run
}

// result waits for a run to close, within a minute.
func result[T any](t testing.TB, run client.WorkflowRun) (T, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var res T
	err := run.Get(ctx, &res)
	return res, err
}

// queried is what the running workflow workflowID answers to the query name.
func queried[T any](t testing.TB, s *stack, workflowID, name string) T {
	t.Helper()
	val, err := s.client.QueryWorkflow(context.Background(), workflowID, "", name)
	require.NoError(t, err)
	var out T
	require.NoError(t, val.Get(&out))
	return out
}

// history is the history of a run, as c reads it.
func history(t testing.TB, c client.Client, workflowID, runID string) []*historypb.HistoryEvent {
	t.Helper()
	iter := c.GetWorkflowHistory(context.Background(), workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		events = append(events, ev)
	}
	require.NotEmpty(t, events)
	return events
}

// eventually polls cond every 50 ms for up to 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 50*time.Millisecond, what)
}
