package workflows_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/pveflow/pveflow/workflows"
)

// admissionWorld runs one CloneAdmission workflow and plays the creates around it: they ask by
// signal, and what the admission signals back to them is recorded.
type admissionWorld struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment
	mu  sync.Mutex
	// told lists "<run> <signal>[ <ahead>]" in the order the admission signalled.
	told []string
	// closed are the runs that have closed: a signal to them fails.
	closed map[string]bool
}

func newAdmissionWorld(t *testing.T) *admissionWorld {
	var suite testsuite.WorkflowTestSuite
	a := &admissionWorld{t: t, env: suite.NewTestWorkflowEnvironment(), closed: map[string]bool{}}
	(&workflows.Workflows{Config: testConfig(t)}).Register(a.env)
	a.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything).
		Return(func(_, workflowID, runID, signal string, arg any) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.closed[runID] {
				return errors.New("workflow execution already completed")
			}
			if signal == "clone-lease-check" {
				return nil
			}
			entry := runID + " " + signal
			if signal == "clone-queued" {
				var q struct {
					Ahead int `json:"ahead"`
				}
				b, err := json.Marshal(arg)
				require.NoError(a.t, err)
				require.NoError(a.t, json.Unmarshal(b, &q))
				entry += fmt.Sprint(" ", q.Ahead)
			}
			a.told = append(a.told, entry)
			return nil
		})
	return a
}

// at plays f at d after the start.
func (a *admissionWorld) at(d time.Duration, f func()) { a.env.RegisterDelayedCallback(f, d) }

func (a *admissionWorld) acquire(run string, limit int) {
	a.env.SignalWorkflow("clone-acquire", map[string]any{
		"workflowID": "proxy/" + run + "/create", "runID": run, "limit": limit, "checkEvery": 10 * time.Second,
	})
}

func (a *admissionWorld) release(run string) {
	a.env.SignalWorkflow("clone-release", map[string]any{"workflowID": "proxy/" + run + "/create", "runID": run})
}

func (a *admissionWorld) state() workflows.AdmissionState {
	v, err := a.env.QueryWorkflow(workflows.AdmissionQuery)
	require.NoError(a.t, err)
	var st workflows.AdmissionState
	require.NoError(a.t, v.Get(&st))
	return st
}

func (a *admissionWorld) run(until time.Duration) {
	a.at(until, a.env.CancelWorkflow)
	a.env.ExecuteWorkflow(workflows.CloneAdmissionName, workflows.AdmissionState{Storage: "pve1/local-lvm"})
	require.True(a.t, a.env.IsWorkflowCompleted())
}

// admitted lists the runs told clone-admitted, in order.
func (a *admissionWorld) admitted() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, e := range a.told {
		var run, signal string
		_, _ = fmt.Sscan(e, &run, &signal)
		if signal == "clone-admitted" {
			out = append(out, run)
		}
	}
	return out
}

func holderRuns(hs []workflows.Holder) []string {
	out := []string{}
	for _, h := range hs {
		out = append(out, h.RunID)
	}
	return out
}

func TestAdmission_admitsUpToTheLimitFirstComeFirstServed(t *testing.T) {
	a := newAdmissionWorld(t)
	for i, run := range []string{"a", "b", "c", "d"} {
		a.at(time.Duration(i+1)*time.Second, func() { a.acquire(run, 2) })
	}
	var before, after workflows.AdmissionState
	a.at(5*time.Second, func() { before = a.state() })
	a.at(6*time.Second, func() { a.release("a") })
	a.at(7*time.Second, func() { after = a.state() })

	a.run(8 * time.Second)

	assert.Equal(t, []string{"a", "b", "c"}, a.admitted())
	assert.Equal(t, []string{"a", "b"}, holderRuns(before.Holders))
	assert.Equal(t, []string{"c", "d"}, holderRuns(before.Waiting))
	assert.Equal(t, []string{"b", "c"}, holderRuns(after.Holders))
	assert.Equal(t, []string{"d"}, holderRuns(after.Waiting))
	assert.Contains(t, a.told, "d clone-queued 1", "d learns it is behind c")
	assert.Contains(t, a.told, "d clone-queued 0", "and then that it is next")
}

func TestAdmission_leaseHeldByATerminatedWorkflowIsReleased(t *testing.T) {
	a := newAdmissionWorld(t)
	a.at(time.Second, func() { a.acquire("a", 1) })
	a.at(2*time.Second, func() { a.acquire("b", 1) })
	a.at(3*time.Second, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.closed["a"] = true // terminated: it runs no code, so it gives nothing back
	})

	a.run(time.Minute)

	assert.Equal(t, []string{"a", "b"}, a.admitted(), "b is admitted once the admission finds a gone")
}

func TestAdmission_repeatedRequestIsNotQueuedTwice(t *testing.T) {
	a := newAdmissionWorld(t)
	a.at(time.Second, func() { a.acquire("a", 1) })
	a.at(2*time.Second, func() { a.acquire("b", 1) })
	a.at(3*time.Second, func() { a.acquire("b", 1) }) // its first answer crossed its repeat
	a.at(4*time.Second, func() { a.acquire("a", 1) })
	var st workflows.AdmissionState
	a.at(5*time.Second, func() { st = a.state() })

	a.run(6 * time.Second)

	assert.Equal(t, []string{"a"}, holderRuns(st.Holders))
	assert.Equal(t, []string{"b"}, holderRuns(st.Waiting))
	assert.Equal(t, []string{"a", "a"}, a.admitted(), "a is told again that it holds the lease")
}

func TestAdmission_withdrawnRequestLeavesTheQueue(t *testing.T) {
	a := newAdmissionWorld(t)
	a.at(time.Second, func() { a.acquire("a", 1) })
	a.at(2*time.Second, func() { a.acquire("b", 1) })
	a.at(3*time.Second, func() { a.acquire("c", 1) })
	a.at(4*time.Second, func() { a.release("b") }) // b was stopped while it waited
	a.at(5*time.Second, func() { a.release("a") })

	a.run(6 * time.Second)

	assert.Equal(t, []string{"a", "c"}, a.admitted())
}
