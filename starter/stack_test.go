package starter_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

const uid = "5d2c8a41-7e3b-4f9a-b06c-1e8d9f2a3b47"

func createInput(uid string) proxyvm.ProxySpec {
	return proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small", UserData: "#cloud-config\n"}
}

// stack is a Temporal server with pveflow's search attributes and a worker running
// the workflows against the simulator's model, in real time, and a starter on its task queue.
type stack struct {
	server  *testserver.Server
	cluster *pvesim.Cluster
	starter *starter.Client
	// register registers the workflows and activities on a worker.
	register func(worker.Registry)
	worker   worker.Worker
}

// startStack starts a stack whose clones take cloneTime; the other tasks take tens of
// milliseconds.
func startStack(t *testing.T, cloneTime time.Duration) *stack {
	t.Helper()
	return startStackWith(t, cloneTime, client.Options{}, nil)
}

// startStackWith is startStack with the server's clients, the worker's and the starter's, made
// with base (its DataConverter and FailureConverter, say), and the starter told base's
// DataConverter, and the worker's configuration changed by configure, when it is not nil.
func startStackWith(t *testing.T, cloneTime time.Duration, base client.Options, configure func(*config.Config)) *stack {
	t.Helper()
	opts := pvesim.Default()
	opts.TaskDurations = map[string]time.Duration{"qmclone": cloneTime}
	opts.AgentBootDelay = 300 * time.Millisecond
	cluster := pvesim.New(opts)

	cfg, err := simulatorConfig()
	require.NoError(t, err)
	if configure != nil {
		configure(&cfg)
	}

	server := testserver.New(t, testserver.WithBaseClientOptions(base))
	s := &stack{
		server: server, cluster: cluster,
		starter: starter.New(server.Client(), core.DefaultTaskQueue, starter.WithDataConverter(base.DataConverter), starter.WithNamespace(server.Namespace())),
	}
	s.register = registration(cfg, cluster, server, s.starter)
	s.startWorker()
	return s
}

// simulatorConfig is the worker's configuration for the simulator's default cluster, with the
// budgets and polls of a quick simulator: a wait that goes wrong fails within seconds.
func simulatorConfig() (config.Config, error) {
	cfg, err := config.Load(filepath.Join("..", "testdata", "config", "simulator.yaml"))
	if err != nil {
		return config.Config{}, err
	}
	cfg.Budgets = config.Budgets{
		Clone: time.Minute, Upload: 10 * time.Second, Resize: 10 * time.Second,
		Start: 10 * time.Second, Stop: 10 * time.Second, Destroy: 10 * time.Second,
		Running: 10 * time.Second, Agent: 20 * time.Second, CloudInit: 20 * time.Second, Unlock: 30 * time.Second,
		Request: 10 * time.Second,
	}
	cfg.Poll = config.Poll{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1.2, MaximumInterval: time.Second}
	return cfg, nil
}

// registration registers pveflow's workflows with cfg and its activities against cluster on a
// worker of server, whose Rollout and CollectGarbage send their requests to the entities
// through s.
func registration(cfg config.Config, cluster *pvesim.Cluster, server *testserver.Server, s *starter.Client) func(worker.Registry) {
	c := server.Client()
	return func(r worker.Registry) {
		(&workflows.Workflows{Config: cfg}).Register(r)
		r.RegisterActivity(&activities.Activities{API: cluster, Proxmox: cfg.Proxmox, Runs: &activities.TemporalRuns{Client: c}, Proxies: starter.EntityProxies{Client: s},
			AddressPools: starter.AddressPools{Client: s}})
	}
}

// startWorker starts a worker on the stack's task queue; the server stops it when the test ends.
func (s *stack) startWorker() {
	s.worker = s.server.NewWorker(core.DefaultTaskQueue, s.register)
}

// stopWorker stops the worker as a shutdown does: it finishes the activities it runs and tells
// the server it no longer polls.
func (s *stack) stopWorker() {
	s.worker.Stop()
}

// ctx bounds a call that waits for a workflow.
func ctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 100 ms for up to 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 100*time.Millisecond, what)
}
