package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
)

// proxies stands for the Proxy entities on Temporal's side, which RequestChange and
// RequestDelete send their requests to. Like runs, it is the Temporal side of the activities, so
// it is a fake beside the simulator.
//
// A change runs for changeTakes of the environment's time from its request's first attempt: an
// attempt before then fails as one that lost its connection does, and the retry, with the same
// request ID, joins the same change. So changes take virtual time, and the fake sees how many
// run at once.
type proxies struct {
	clock   *envClock
	cluster *pvesim.Cluster

	mu          sync.Mutex
	changeTakes time.Duration
	// failChange answers the first request to change a UID with its error.
	failChange map[string]error
	// failDelete answers every request to delete a UID with its error.
	failDelete map[string]error
	// unmarked are the UIDs whose delete finds none of their VMs: they lost their mark meanwhile.
	unmarked []string
	// firstAttempt is when each change request, by ID, was first sent.
	firstAttempt map[string]time.Time
	// changes and deletes are the requests, each once, in the order they were first sent.
	changes []activities.ProxyChange
	deletes []activities.ProxyDelete
	// running counts the changes that run; mostRunning is the most that ran at once.
	running, mostRunning int
}

func newProxies(clock *envClock, cluster *pvesim.Cluster) *proxies {
	return &proxies{clock: clock, cluster: cluster, failChange: map[string]error{}, failDelete: map[string]error{}, firstAttempt: map[string]time.Time{}}
}

func (p *proxies) ChangeProxy(_ context.Context, req activities.ProxyChange) (activities.ProxyChangeOutcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	first, seen := p.firstAttempt[req.RequestID]
	if !seen {
		first = now
		p.firstAttempt[req.RequestID] = now
		p.changes = append(p.changes, req)
		p.running++
		p.mostRunning = max(p.mostRunning, p.running)
	}
	if err, ok := p.failChange[req.UID]; ok {
		delete(p.failChange, req.UID)
		p.running--
		return activities.ProxyChangeOutcome{}, err
	}
	if now.Sub(first) < p.changeTakes {
		return activities.ProxyChangeOutcome{}, errors.New("connection to Temporal lost while waiting for the update")
	}
	p.running--
	return activities.ProxyChangeOutcome{VMID: 100000 + len(p.changes), Node: "pve1", IPv4: "192.0.2.1", Changed: []string{"image -> " + req.Image}, Restarted: true, Rebuilt: true}, nil
}

// DeleteProxy answers that the entity's delete destroyed the VMs carrying the UID's mark. It
// leaves them on the cluster: no DeleteProxy ran.
func (p *proxies) DeleteProxy(_ context.Context, req activities.ProxyDelete) (activities.ProxyDeleteOutcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deletes = append(p.deletes, req)
	if err := p.failDelete[req.UID]; err != nil {
		return activities.ProxyDeleteOutcome{}, err
	}
	out := activities.ProxyDeleteOutcome{Destroyed: []activities.VMRef{}}
	for _, v := range p.cluster.VMs() {
		if owner, _ := proxy.OwnerOf(v.Config); owner == req.UID && !slices.Contains(p.unmarked, owner) {
			out.Destroyed = append(out.Destroyed, activities.VMRef{Node: v.Node, VMID: v.VMID})
		}
	}
	return out, nil
}

// changedUIDs are the UIDs of the change requests, in the order the rollout numbered them:
// the requests a workflow task sends together reach the fake in any order.
func (p *proxies) changedUIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	changes := slices.SortedFunc(slices.Values(p.changes), func(a, b activities.ProxyChange) int {
		return requestNumber(a.RequestID) - requestNumber(b.RequestID)
	})
	var uids []string
	for _, c := range changes {
		uids = append(uids, c.UID)
	}
	return uids
}

// deleted are the delete requests, in the order they were sent.
func (p *proxies) deleted() []activities.ProxyDelete {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.deletes)
}

// requestNumber is n of a Rollout's request ID "<workflow ID>/<n>".
func requestNumber(requestID string) int {
	n, err := strconv.Atoi(requestID[strings.LastIndex(requestID, "/")+1:])
	if err != nil {
		panic("request ID " + requestID + " does not end in its number")
	}
	return n
}

// fleetUIDs is n proxy UIDs.
func fleetUIDs(n int) []string {
	uids := make([]string, n)
	for i := range uids {
		uids[i] = fmt.Sprintf("proxy-%02d", i+1)
	}
	return uids
}

func rolloutInput(uids []string, maxUnavailable int) fleet.RolloutInput {
	return fleet.RolloutInput{UIDs: uids, Image: "debian13", MaxUnavailable: maxUnavailable}
}

// rollout runs a Rollout to its end in env and returns its result or its error.
func (w *world) rollout(env *testsuite.TestWorkflowEnvironment, in fleet.RolloutInput) (fleet.RolloutStatus, error) {
	w.t.Helper()
	env.ExecuteWorkflow(core.RolloutName, in)
	require.True(w.t, env.IsWorkflowCompleted())
	var st fleet.RolloutStatus
	if err := env.GetWorkflowError(); err != nil {
		return st, err
	}
	require.NoError(w.t, env.GetWorkflowResult(&st))
	return st, nil
}

// rolloutStatus asks a running Rollout for its status.
func rolloutStatus(t *testing.T, env *testsuite.TestWorkflowEnvironment) fleet.RolloutStatus {
	t.Helper()
	val, err := env.QueryWorkflow(core.StatusQuery)
	require.NoError(t, err)
	var st fleet.RolloutStatus
	require.NoError(t, val.Get(&st))
	return st
}

func doneUIDs(st fleet.RolloutStatus) []string {
	var uids []string
	for _, d := range st.Done {
		uids = append(uids, d.UID)
	}
	return uids
}

func TestRollout_changesInOrderNeverMoreThanMaxUnavailableAtOnce(t *testing.T) {
	tests := []struct {
		maxUnavailable, wantAtOnce int
	}{
		{1, 1},
		{2, 2},
		{10, 5},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("max unavailable %d", tt.maxUnavailable), func(t *testing.T) {
			w := newWorld(t)
			w.proxies.changeTakes = 3 * time.Minute
			uids := fleetUIDs(5)

			st, err := w.rollout(w.env(), rolloutInput(uids, tt.maxUnavailable))

			require.NoError(t, err)
			assert.Equal(t, uids, w.proxies.changedUIDs(), "each asked once, in order")
			assert.Equal(t, tt.wantAtOnce, w.proxies.mostRunning)
			assert.ElementsMatch(t, uids, doneUIDs(st))
			assert.Equal(t, 5, st.Total)
			assert.Empty(t, st.InFlight)
			assert.Empty(t, st.Pending)
			assert.False(t, st.Paused)
			assert.Equal(t, 5, st.Requests)
		})
	}
}

func TestRollout_requestsCarryTheChangeAndARequestIDEach(t *testing.T) {
	w := newWorld(t)
	in := fleet.RolloutInput{UIDs: fleetUIDs(2), Image: "debian13", MachineType: "small", MaxUnavailable: 2}

	_, err := w.rollout(w.env(), in)

	require.NoError(t, err)
	require.Len(t, w.proxies.changes, 2)
	var ids []string
	for _, c := range w.proxies.changes {
		assert.Equal(t, "debian13", c.Image)
		assert.Equal(t, "small", c.MachineType)
		ids = append(ids, c.RequestID)
	}
	assert.ElementsMatch(t, []string{"default-test-workflow-id/1", "default-test-workflow-id/2"}, ids, "the rollout's workflow ID and the request's number")
}

func TestRollout_failurePausesAndResumeRetriesItAndGoesOn(t *testing.T) {
	w := newWorld(t)
	w.proxies.changeTakes = 3 * time.Minute
	uids := fleetUIDs(5)
	w.proxies.failChange[uids[1]] = temporal.NewNonRetryableApplicationError("image debian13: clone failed: storage local-lvm is full", core.FailQuotaExceeded, nil)
	env := w.env()
	var paused fleet.RolloutStatus
	var sentWhilePaused []string
	var resumed fleet.RolloutStatus
	env.RegisterDelayedCallback(func() {
		paused = rolloutStatus(t, env)
		sentWhilePaused = w.proxies.changedUIDs()
		env.UpdateWorkflow(fleet.ResumeUpdate, "resume-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { t.Errorf("resume refused: %v", err) },
			OnAccept:   func() {},
			OnComplete: func(res any, err error) { require.NoError(t, err); resumed = res.(fleet.RolloutStatus) },
		})
	}, time.Hour)

	st, err := w.rollout(env, rolloutInput(uids, 2))

	require.NoError(t, err)
	assert.True(t, paused.Paused)
	require.Len(t, paused.Failures, 1)
	assert.Equal(t, uids[1], paused.Failures[0].UID)
	assert.Contains(t, paused.Failures[0].Error, "storage local-lvm is full")
	assert.Equal(t, []string{uids[0]}, doneUIDs(paused), "the change that ran finished")
	assert.Empty(t, paused.InFlight)
	assert.Equal(t, []string{uids[1], uids[2], uids[3], uids[4]}, paused.Pending, "the failed one first")
	assert.Equal(t, uids[:2], sentWhilePaused, "no change started after the failure")

	assert.False(t, resumed.Paused)
	assert.Empty(t, resumed.Failures)
	assert.Equal(t, []string{uids[0], uids[1], uids[1], uids[2], uids[3], uids[4]}, w.proxies.changedUIDs(), "the failed one again, then the rest")
	assert.ElementsMatch(t, uids, doneUIDs(st))
	assert.False(t, st.Paused)
	assert.LessOrEqual(t, w.proxies.mostRunning, 2)
}

func TestRollout_resumeRefusedWhenNotPaused(t *testing.T) {
	w := newWorld(t)
	w.proxies.changeTakes = 3 * time.Minute
	env := w.env()
	var refused error
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(fleet.ResumeUpdate, "resume-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { refused = err },
			OnAccept:   func() { t.Error("resume of a rollout that is not paused accepted") },
			OnComplete: func(any, error) {},
		})
	}, time.Minute)

	st, err := w.rollout(env, rolloutInput(fleetUIDs(3), 1))

	require.NoError(t, err)
	require.Error(t, refused)
	assert.Contains(t, refused.Error(), "is not paused")
	assert.Len(t, st.Done, 3)
}

func TestRollout_invalidInputRefused(t *testing.T) {
	tests := map[string]fleet.RolloutInput{
		"max unavailable 0":  {UIDs: fleetUIDs(2), Image: "debian13"},
		"no proxies":         {Image: "debian13", MaxUnavailable: 1},
		"nothing to change":  {UIDs: fleetUIDs(2), MaxUnavailable: 1},
		"a proxy twice":      {UIDs: []string{"proxy-01", "proxy-02", "proxy-01"}, Image: "debian13", MaxUnavailable: 1},
		"a UID that is none": {UIDs: []string{"proxy 01"}, Image: "debian13", MaxUnavailable: 1},
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)

			_, err := w.rollout(w.env(), in)

			assert.Equal(t, core.FailPermanent, failureType(t, err))
			assert.Empty(t, w.proxies.changedUIDs())
		})
	}
}

func TestRollout_continuesAsNewWithItsProgressOnceItsChangesClose(t *testing.T) {
	w := newWorld(t)
	w.proxies.changeTakes = 3 * time.Minute
	uids := fleetUIDs(6)
	env := w.env()
	// Two changes closed at 3 minutes, two more run: those finish in this run, no other starts.
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 4*time.Minute)

	_, err := w.rollout(env, rolloutInput(uids, 2))

	var canErr *workflow.ContinueAsNewError
	require.ErrorAs(t, err, &canErr)
	assert.Equal(t, core.RolloutName, canErr.WorkflowType.Name)
	var next fleet.RolloutInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(canErr.Input, &next))
	require.NotNil(t, next.Progress)
	assert.Equal(t, uids, next.UIDs)
	assert.ElementsMatch(t, uids[:4], doneUIDs(*next.Progress))
	assert.Empty(t, next.Progress.InFlight)
	assert.Equal(t, uids[4:], next.Progress.Pending)
	assert.Equal(t, 4, next.Progress.Requests)
	assert.Equal(t, 1, next.Progress.Runs)

	w.advance(0)
	st, err := w.rollout(w.env(), next)

	require.NoError(t, err)
	assert.Equal(t, uids, w.proxies.changedUIDs(), "each asked once across both runs")
	assert.ElementsMatch(t, uids, doneUIDs(st))
	assert.Equal(t, 6, st.Requests)
	assert.Equal(t, 2, st.Runs)
	assert.Equal(t, next.Progress.StartedAt, st.StartedAt)
	assert.LessOrEqual(t, w.proxies.mostRunning, 2)
}
