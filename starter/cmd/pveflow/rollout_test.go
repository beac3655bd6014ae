package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
)

// entities stands for the Proxy entities the worker's RequestChange sends changes to: each is
// answered at once, the first of a UID in failOnce with its error.
type entities struct {
	mu       sync.Mutex
	failOnce map[string]error
}

func (e *entities) ChangeProxy(_ context.Context, req activities.ProxyChange) (activities.ProxyChangeOutcome, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.failOnce[req.UID]; err != nil {
		delete(e.failOnce, req.UID)
		return activities.ProxyChangeOutcome{}, err
	}
	return activities.ProxyChangeOutcome{VMID: 100001, Node: "pve1", IPv4: "192.0.2.1", Changed: []string{"image debian12 -> " + req.Image}, Rebuilt: true}, nil
}

func (e *entities) DeleteProxy(context.Context, activities.ProxyDelete) (activities.ProxyDeleteOutcome, error) {
	return activities.ProxyDeleteOutcome{}, nil
}

// rolloutServer is a Temporal server with a worker in this process whose changes go to e, and
// the environment that points the CLI at it.
func rolloutServer(t *testing.T, e *entities) map[string]string {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "..", "..", "testdata", "config", "simulator.yaml"))
	require.NoError(t, err)
	server := testserver.New(t)
	server.NewWorker(core.DefaultTaskQueue, func(r worker.Registry) {
		(&workflows.Workflows{Config: cfg}).Register(r)
		r.RegisterActivity(&activities.Activities{Proxies: e})
	})
	return map[string]string{"TEMPORAL_ADDRESS": server.Address(), "TEMPORAL_NAMESPACE": server.Namespace()}
}

// rolloutOutput is what rollout --json prints.
type rolloutOutput struct {
	ID string `json:"id"`
	fleet.RolloutStatus
}

func TestRollout_pausesSaysHowToResumeAndResumeFinishesIt(t *testing.T) {
	env := rolloutServer(t, &entities{failOnce: map[string]error{
		"proxy-b": temporal.NewNonRetryableApplicationError("storage local-lvm is full", core.FailQuotaExceeded, nil),
	}})

	code, stdout, stderr := runCLI(env, "rollout", "--image", "debian13", "--max-unavailable", "1", "--uid", "proxy-a", "--uid", "proxy-b", "--uid", "proxy-c", "--json")

	assert.Equal(t, exitError, code, stderr)
	var paused rolloutOutput
	require.NoError(t, json.Unmarshal([]byte(stdout), &paused))
	assert.True(t, paused.Paused)
	assert.Equal(t, []string{"proxy-b", "proxy-c"}, paused.Pending)
	assert.Contains(t, stderr, "pveflow: rollout "+paused.ID+" started\n")
	assert.Contains(t, stderr, "pveflow: rollout "+paused.ID+" paused: ")
	assert.Contains(t, stderr, "storage local-lvm is full; resume it with 'pveflow rollout resume --id "+paused.ID+"'\n")

	code, stdout, stderr = runCLI(env, "rollout", "status", "--id", paused.ID)

	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `^rollout `+paused.ID+` paused: 1 of 3 changed · 0 changing · 2 pending\n`+
		`UID +VMID +NODE +IPV4 +RESTARTED +CHANGED\nproxy-a +100001 +pve1 +192\.0\.2\.1 +rebuilt +image debian12 -> debian13\n`+
		`failed proxy-b at [-0-9: ]+: change of proxy proxy-b \(request `+paused.ID+`/2\): storage local-lvm is full\n$`, stdout)

	code, stdout, stderr = runCLI(env, "rollout", "resume", "--id", paused.ID, "--json")

	require.Equal(t, exitOK, code, stderr)
	var done rolloutOutput
	require.NoError(t, json.Unmarshal([]byte(stdout), &done))
	assert.False(t, done.Paused)
	assert.Len(t, done.Done, 3)
	assert.Empty(t, done.Pending)

	code, _, stderr = runCLI(env, "rollout", "resume", "--id", paused.ID)

	assert.Equal(t, exitError, code, "a rollout that ended has nothing to resume")
	assert.Contains(t, stderr, "resume rollout "+paused.ID)
}

func TestRollout_usageErrorsBeforeConnecting(t *testing.T) {
	env, addr := unreachableTemporal(t)
	for name, args := range map[string][]string{
		"no max unavailable":   {"rollout", "--image", "debian13", "--uid", "proxy-a"},
		"nothing to change":    {"rollout", "--max-unavailable", "1", "--uid", "proxy-a"},
		"no proxies":           {"rollout", "--image", "debian13", "--max-unavailable", "1"},
		"selector and UIDs":    {"rollout", "--image", "debian13", "--max-unavailable", "1", "--uid", "proxy-a", "--selector", "PveNode = 'pve1'"},
		"a bad UID":            {"rollout", "--image", "debian13", "--max-unavailable", "1", "--uid", "a b"},
		"status without an ID": {"rollout", "status"},
		"resume without an ID": {"rollout", "resume"},
		"a positional UID":     {"rollout", "--image", "debian13", "--max-unavailable", "1", "proxy-a"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(env, args...)

			assert.Equal(t, exitUsage, code, stderr)
			assert.Empty(t, stdout)
			assert.NotContains(t, stderr, addr)
		})
	}
}

func TestRollout_lineSaysWhatIsDoneChangingAndPending(t *testing.T) {
	st := fleet.RolloutStatus{Total: 10, Done: make([]fleet.RolloutDone, 3), InFlight: []string{"proxy-d", "proxy-e"}, Pending: make([]string, 5)}
	assert.Equal(t, "3 of 10 changed · 2 changing (proxy-d, proxy-e) · 5 pending", rolloutLine(st))

	st.Paused, st.InFlight, st.Pending = true, nil, make([]string, 7)
	assert.Equal(t, "paused · 3 of 10 changed · 0 changing · 7 pending", rolloutLine(st))
}

func TestRollout_helpListsItsSubcommands(t *testing.T) {
	code, stdout, _ := runCLI(nil, "help", "rollout")

	assert.Equal(t, exitOK, code)
	for _, want := range []string{"--max-unavailable N", "--selector Q", "status      Where a rollout is", "resume      Resume a paused rollout"} {
		assert.True(t, strings.Contains(stdout, want), "help lacks %q:\n%s", want, stdout)
	}
}
