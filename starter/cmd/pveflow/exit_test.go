package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/syncbuf"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
)

// Task queues of TestRun_exitCodes: each has a worker over a cluster of its own kind.
const (
	queueFast      = "exit-fast"      // the simulator's default cluster, its tasks quick
	queueStalled   = "exit-stalled"   // clones that never end
	queueUnhealthy = "exit-unhealthy" // a configured node the cluster does not have
)

// serveWorkflows runs a worker on taskQueue that runs the workflows of cfg over cluster, and
// sends Rollout's and CollectGarbage's requests to the entities on taskQueue.
func serveWorkflows(server *testserver.Server, taskQueue string, cfg config.Config, cluster *pvesim.Cluster) {
	entities := starter.EntityProxies{Client: starter.New(server.Client(), taskQueue, starter.WithNamespace(server.Namespace()))}
	server.NewWorker(taskQueue, func(r worker.Registry) {
		(&workflows.Workflows{Config: cfg}).Register(r)
		r.RegisterActivity(&activities.Activities{API: cluster, Proxmox: cfg.Proxmox, Runs: &activities.TemporalRuns{Client: server.Client()}, Proxies: entities})
	})
}

// TestRun_exitCodes produces each exit code that `pveflow help` and the README list, through run.
func TestRun_exitCodes(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "..", "..", "testdata", "config", "simulator.yaml"))
	require.NoError(t, err)
	server := testserver.New(t)
	fast := pvesim.New(pvesim.Default())
	serveWorkflows(server, queueFast, cfg, fast)
	stalled := pvesim.Default()
	stalled.StallClones = true
	serveWorkflows(server, queueStalled, cfg, pvesim.New(stalled))
	unhealthy := cfg
	unhealthy.Proxmox.Nodes = []string{"pve1", "pve9"}
	serveWorkflows(server, queueUnhealthy, unhealthy, fast)
	env := map[string]string{"TEMPORAL_ADDRESS": server.Address(), "TEMPORAL_NAMESPACE": server.Namespace()}
	create := func(queue, uid string, flags ...string) []string {
		return append([]string{"--task-queue", queue, "create", "--uid", uid, "--machine-type", "small", "--wait"}, flags...)
	}

	tests := []struct {
		name  string
		setup func(t *testing.T)
		args  []string
		want  int
	}{
		{"a create", nil, create(queueFast, "exit-0", "--image", "debian13"), exitOK},
		{"the status of no workflow", nil, []string{"--task-queue", queueFast, "status", "--uid", "never-started"}, exitError},
		{"a command without its --uid", nil, []string{"create", "--image", "debian13"}, exitUsage},
		{"a create of an unknown image", nil, create(queueFast, "exit-3", "--image", "no-such-image"), exitPermanent},
		{"a create whose clone fails", func(*testing.T) {
			fast.FailTask("qmclone", "clone failed: command '/usr/bin/qemu-img convert' failed: exit code 1")
		}, create(queueFast, "exit-4", "--image", "debian13"), exitTransient},
		{"a create onto a full storage", func(*testing.T) {
			fast.FailTask("qmclone", "clone failed: not enough free space (1073741824 < 3221225472)")
		}, create(queueFast, "exit-5", "--image", "debian13"), exitQuotaExceeded},
		{"a create superseded by its delete", func(t *testing.T) {
			deleted := make(chan struct{})
			t.Cleanup(func() { <-deleted })
			go func() {
				defer close(deleted)
				// Once the create runs: a delete sent first would make the create wait for it.
				for {
					if _, err := server.Client().DescribeWorkflowExecution(t.Context(), core.CreateWorkflowID("exit-6"), ""); err == nil {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				code, _, stderr := runCLI(env, "--task-queue", queueStalled, "delete", "--uid", "exit-6")
				assert.Equal(t, exitOK, code, stderr)
			}()
		}, create(queueStalled, "exit-6", "--image", "debian13"), exitCanceled},
		{"a get of no VM", nil, []string{"--task-queue", queueFast, "get", "--uid", "exit-7"}, exitNotFound},
		{"a check with a node the cluster lacks", nil, []string{"--task-queue", queueUnhealthy, "check"}, exitUnhealthy},
	}
	tested := map[int]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup(t)
			}

			code, _, stderr := runCLI(env, tt.args...)

			assert.Equal(t, tt.want, code, stderr)
		})
		tested[tt.want] = true
	}
	for _, e := range exitCodes {
		assert.True(t, tested[e.code], "no test exits %d (%s)", e.code, e.meaning)
	}

	t.Run("waiting commands say so when no worker polls", func(t *testing.T) {
		const queue = "no-worker"
		for name, args := range map[string][]string{
			"create":        {"create", "--uid", "nobody-accepts", "--image", "debian13", "--machine-type", "small"},
			"create --wait": {"create", "--uid", "nobody-creates", "--image", "debian13", "--machine-type", "small", "--wait"},
			"update":        {"update", "--uid", "nobody-changes", "--machine-type", "small"},
			"delete":        {"delete", "--uid", "nobody-deletes"},
			"get":           {"get", "--uid", "nobody-gets"},
			"ls":            {"ls"},
			"check":         {"check"},
			"gc --dry-run":  {"gc", "--all", "--dry-run"},
			"demo":          {"demo"},
			"rollout":       {"rollout", "--uid", "nobody-rolls", "--machine-type", "small", "--max-unavailable", "1"},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithCancel(context.Background())
				var stderr syncbuf.Buffer
				exited := make(chan int, 1)
				go func() {
					exited <- run(ctx, append([]string{"--task-queue", queue}, args...), func(k string) string { return env[k] }, io.Discard, &stderr)
				}()

				assert.Eventually(t, func() bool { return strings.Contains(stderr.String(), "but no worker polls task queue "+queue) },
					3*time.Second, 50*time.Millisecond, "stderr: %s", &stderr)
				cancel()
				<-exited
				assert.Regexp(t, `(?m)^pveflow: waiting for \S.*, but no worker polls task queue no-worker$`, stderr.String())
			})
		}
	})
}
