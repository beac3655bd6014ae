package starter_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// entities stands for the Proxy entities the worker's RequestChange sends changes to: a change
// is answered at once, unless held, or failed once.
type entities struct {
	mu sync.Mutex
	// hold makes the change of a UID wait until the channel closes.
	hold map[string]chan struct{}
	// failOnce answers the first change of a UID with its error.
	failOnce map[string]error
	changed  []string
}

func (e *entities) ChangeProxy(ctx context.Context, req activities.ProxyChange) (activities.ProxyChangeOutcome, error) {
	e.mu.Lock()
	hold := e.hold[req.UID]
	e.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return activities.ProxyChangeOutcome{}, ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.failOnce[req.UID]; err != nil {
		delete(e.failOnce, req.UID)
		return activities.ProxyChangeOutcome{}, err
	}
	e.changed = append(e.changed, req.UID)
	return activities.ProxyChangeOutcome{VMID: 100001, Node: "pve1", IPv4: "192.0.2.1", Changed: []string{"image -> " + req.Image}}, nil
}

func (e *entities) DeleteProxy(context.Context, activities.ProxyDelete) (activities.ProxyDeleteOutcome, error) {
	return activities.ProxyDeleteOutcome{}, nil
}

// rolloutStack is a Temporal server whose worker runs the workflows with changes sent to e, and
// a starter on its task queue.
func rolloutStack(t *testing.T, e *entities) (*testserver.Server, *starter.Client) {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "testdata", "config", "simulator.yaml"))
	require.NoError(t, err)
	server := testserver.New(t)
	server.NewWorker(core.DefaultTaskQueue, func(r worker.Registry) {
		(&workflows.Workflows{Config: cfg}).Register(r)
		r.RegisterActivity(&activities.Activities{Proxies: e})
	})
	return server, starter.New(server.Client(), core.DefaultTaskQueue, starter.WithNamespace(server.Namespace()))
}

func doneUIDs(st fleet.RolloutStatus) []string {
	var uids []string
	for _, d := range st.Done {
		uids = append(uids, d.UID)
	}
	return uids
}

func TestRollout_refusesBeforeCallingTemporal(t *testing.T) {
	c := starter.New(nil, core.DefaultTaskQueue) // a call to Temporal would panic
	tests := []struct {
		name string
		opts starter.RolloutOptions
		want error
	}{
		{"max unavailable 0", starter.RolloutOptions{Image: "debian13", UIDs: []string{uid}}, starter.ErrNoRollout},
		{"nothing to change", starter.RolloutOptions{MaxUnavailable: 1, UIDs: []string{uid}}, starter.ErrNoRollout},
		{"no proxies", starter.RolloutOptions{Image: "debian13", MaxUnavailable: 1}, starter.ErrNoRollout},
		{"UIDs and a selector", starter.RolloutOptions{Image: "debian13", MaxUnavailable: 1, UIDs: []string{uid}, Selector: "PveNode = 'pve1'"}, starter.ErrNoRollout},
		{"a UID twice", starter.RolloutOptions{Image: "debian13", MaxUnavailable: 1, UIDs: []string{uid, uid}}, starter.ErrNoRollout},
		{"a UID that is none", starter.RolloutOptions{Image: "debian13", MaxUnavailable: 1, UIDs: []string{"not a uid"}}, starter.ErrInvalidUID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Rollout(ctx(t), tt.opts)
			assert.ErrorIs(t, err, tt.want)
		})
	}
}

func TestRollout_pausesOnAFailureRefusesAResumeUntilThenAndGoesOnWhenResumed(t *testing.T) {
	uids := []string{"proxy-a", "proxy-b", "proxy-c"}
	release := make(chan struct{})
	e := &entities{
		hold:     map[string]chan struct{}{uids[0]: release},
		failOnce: map[string]error{uids[1]: temporal.NewNonRetryableApplicationError("storage local-lvm is full", core.FailQuotaExceeded, nil)},
	}
	_, c := rolloutStack(t, e)

	id, err := c.Rollout(ctx(t), starter.RolloutOptions{Image: "debian13", MaxUnavailable: 1, UIDs: uids})
	require.NoError(t, err)
	eventually(t, "the first change runs", func() bool {
		st, err := c.RolloutStatus(ctx(t), id)
		return err == nil && len(st.InFlight) == 1
	})
	_, err = c.ResumeRollout(ctx(t), id)
	assert.ErrorContains(t, err, "is not paused")
	close(release)

	var paused fleet.RolloutStatus
	eventually(t, "the rollout pauses", func() bool {
		paused, err = c.RolloutStatus(ctx(t), id)
		return err == nil && paused.Paused
	})
	require.Len(t, paused.Failures, 1)
	assert.Equal(t, uids[1], paused.Failures[0].UID)
	assert.Contains(t, paused.Failures[0].Error, "storage local-lvm is full")
	assert.Equal(t, uids[1:], paused.Pending)

	resumed, err := c.ResumeRollout(ctx(t), id)
	require.NoError(t, err)
	assert.False(t, resumed.Paused)
	done, err := c.RolloutResult(ctx(t), id)
	require.NoError(t, err)
	assert.Equal(t, uids, doneUIDs(done))
	assert.Equal(t, uids, e.changed)
}

// standIn stands for a Proxy entity in visibility: it shows its phase and node as the entity
// does, and runs until it is stopped.
func standIn(ctx workflow.Context, phase, node string) error {
	if err := workflow.UpsertTypedSearchAttributes(ctx, core.ProxyPhaseKey.ValueSet(phase), core.PveNodeKey.ValueSet(node)); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

func TestRollout_ofASelectorChangesTheRunningPresentProxiesItMatches(t *testing.T) {
	e := &entities{}
	server, c := rolloutStack(t, e)
	// On a task queue of their own, beside the worker that runs the real Proxy workflow.
	const standIns = "stand-ins"
	server.NewWorker(standIns, func(r worker.Registry) {
		r.RegisterWorkflowWithOptions(standIn, workflow.RegisterOptions{Name: core.ProxyName})
	})
	tc := server.Client()
	for _, p := range []struct{ uid, phase, node string }{
		{"present-on-pve1", proxyvm.ProxyPresent, "pve1"},
		{"changing-on-pve1", proxyvm.ProxyChanging, "pve1"},
		{"present-on-pve2", proxyvm.ProxyPresent, "pve2"},
		{"absent-on-pve1", proxyvm.ProxyAbsent, "pve1"},
		{"closed-on-pve1", proxyvm.ProxyPresent, "pve1"},
	} {
		_, err := tc.ExecuteWorkflow(ctx(t), core.ProxyOptions(p.uid, standIns), core.ProxyName, p.phase, p.node)
		require.NoError(t, err)
	}
	eventually(t, "the stand-ins show their phases", func() bool {
		resp, err := tc.CountWorkflow(ctx(t), &workflowservice.CountWorkflowExecutionsRequest{Query: "WorkflowType = 'Proxy' AND PveNode IS NOT NULL"})
		return err == nil && resp.GetCount() == 5
	})
	require.NoError(t, tc.TerminateWorkflow(ctx(t), core.ProxyWorkflowID("closed-on-pve1"), "", "closed"))
	eventually(t, "visibility shows it closed", func() bool {
		resp, err := tc.CountWorkflow(ctx(t), &workflowservice.CountWorkflowExecutionsRequest{Query: "WorkflowType = 'Proxy' AND ExecutionStatus = 'Terminated'"})
		return err == nil && resp.GetCount() == 1
	})

	id, err := c.Rollout(ctx(t), starter.RolloutOptions{Image: "debian13", MaxUnavailable: 2, Selector: "PveNode = 'pve1'"})
	require.NoError(t, err)
	done, err := c.RolloutResult(ctx(t), id)

	require.NoError(t, err)
	assert.Equal(t, []string{"changing-on-pve1", "present-on-pve1"}, doneUIDsSorted(done))

	_, err = c.Rollout(ctx(t), starter.RolloutOptions{Image: "debian13", MaxUnavailable: 2, Selector: "PveNode = 'pve9'"})
	assert.ErrorIs(t, err, starter.ErrNoRollout)
}

func doneUIDsSorted(st fleet.RolloutStatus) []string {
	uids := doneUIDs(st)
	slices.Sort(uids)
	return uids
}
