package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/admission"
	"github.com/pveflow/pveflow/workflows/core"
)

// admissionWorld runs one CloneAdmission workflow, with real activities over the simulator,
// and plays the creates around it: they ask by signal, and what the admission signals back to
// them is recorded.
type admissionWorld struct {
	t   *testing.T
	w   *world
	env *testsuite.TestWorkflowEnvironment
	mu  sync.Mutex
	// told lists "<run> <signal>" in the order the admission signalled.
	told []string
	// closed are the runs that have closed: a signal to them fails. allClosed closes them all.
	closed    map[string]bool
	allClosed bool
	// expected is the clone duration each run's grant expected.
	expected map[string]time.Duration
}

func newAdmissionWorld(t *testing.T) *admissionWorld {
	w := newWorld(t)
	a := &admissionWorld{t: t, w: w, env: w.env(), closed: map[string]bool{}, expected: map[string]time.Duration{}}
	a.env.SetTestTimeout(30 * time.Second)
	a.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything).
		Return(func(_, workflowID, runID, signal string, arg any) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.closed[runID] || a.allClosed {
				return errors.New("workflow execution already completed")
			}
			a.told = append(a.told, runID+" "+signal)
			if signal == "clone-admitted" {
				var grant struct {
					ExpectedClone time.Duration `json:"expectedClone"`
				}
				b, err := json.Marshal(arg)
				require.NoError(t, err)
				require.NoError(t, json.Unmarshal(b, &grant))
				a.expected[runID] = grant.ExpectedClone
			}
			return nil
		})
	return a
}

// at plays f at d after the start.
func (a *admissionWorld) at(d time.Duration, f func()) { a.env.RegisterDelayedCallback(f, d) }

func (a *admissionWorld) acquire(run string, limit int) {
	a.w.runs.set("proxy/"+run+"/create", activities.RunInfo{RunID: run, Running: true})
	a.env.SignalWorkflow("clone-acquire", map[string]any{
		"workflowID": "proxy/" + run + "/create", "runID": run, "limit": limit, "checkEvery": 10 * time.Second,
	})
}

func (a *admissionWorld) release(run string) {
	a.env.SignalWorkflow("clone-release", map[string]any{"workflowID": "proxy/" + run + "/create", "runID": run})
}

// cloneEnded gives run's lease back as the look that saw its clone end does, the clone having
// taken took since its wait began.
func (a *admissionWorld) cloneEnded(run string, took time.Duration) {
	a.env.SignalWorkflow("clone-release", map[string]any{"workflowID": "proxy/" + run + "/create", "runID": run, "waited": took})
}

// releaseWith gives run's lease back with a clone its create did not see end.
func (a *admissionWorld) releaseWith(run string, clone admission.CloneInFlight) {
	a.env.SignalWorkflow("clone-release", map[string]any{"workflowID": "proxy/" + run + "/create", "runID": run, "clone": clone})
}

// terminate makes run a terminated one: it runs no code, so it gives nothing back.
func (a *admissionWorld) terminate(run string) { a.close(run, "terminated") }

// close closes run with status: a signal to it fails, and Temporal describes it closed.
func (a *admissionWorld) close(run, status string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed[run] = true
	a.w.runs.close("proxy/"+run+"/create", status)
}

func (a *admissionWorld) state() admission.AdmissionState {
	v, err := a.env.QueryWorkflow(admission.AdmissionQuery)
	require.NoError(a.t, err)
	var st admission.AdmissionState
	require.NoError(a.t, v.Get(&st))
	return st
}

// run runs the admission until the time until, when every create closes and the admission is
// cancelled: it closes once its lease checks have found them gone.
func (a *admissionWorld) run(until time.Duration) {
	a.at(until, func() {
		a.mu.Lock()
		a.allClosed = true
		a.mu.Unlock()
		a.w.runs.closeAll("completed")
		a.env.CancelWorkflow()
	})
	a.env.ExecuteWorkflow(core.CloneAdmissionName, admission.AdmissionState{Storage: "pve1/local-lvm"})
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

func holderRuns(hs []admission.Holder) []string {
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
	var before, after admission.AdmissionState
	a.at(5*time.Second, func() { before = a.state() })
	a.at(6*time.Second, func() { a.release("a") })
	a.at(7*time.Second, func() { after = a.state() })

	a.run(8 * time.Second)

	assert.Equal(t, []string{"a", "b", "c"}, a.admitted())
	assert.Equal(t, []string{"a", "b"}, holderRuns(before.Holders))
	assert.Equal(t, []string{"c", "d"}, holderRuns(before.Waiting))
	assert.Equal(t, []string{"b", "c"}, holderRuns(after.Holders))
	assert.Equal(t, []string{"d"}, holderRuns(after.Waiting))
}

func TestAdmission_aGrantExpectsTheMedianOfTheLastFiveClones(t *testing.T) {
	a := newAdmissionWorld(t)
	runs := []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6"}
	a.at(time.Second, func() {
		for _, run := range runs {
			a.acquire(run, 1)
		}
	})
	took := []time.Duration{3, 9, 4, 5, 4, 6} // seconds, r0's to r5's
	for i, d := range took {
		a.at(time.Duration(10*(i+1))*time.Second, func() { a.cloneEnded(runs[i], d*time.Second) })
	}
	a.at(25*time.Second, func() { a.cloneEnded("r1", time.Second) }) // the look after the one that gave it back
	a.at(65*time.Second, func() { a.release("r6") })                 // failed before its clone ended

	a.run(70 * time.Second)

	assert.Equal(t, runs, a.admitted())
	want := map[string]time.Duration{
		"r0": 0,               // none seen yet
		"r1": 3 * time.Second, // 3
		"r2": 3 * time.Second, // 3 9: the lower middle
		"r3": 4 * time.Second, // 3 4 9
		"r4": 4 * time.Second, // 3 4 5 9
		"r5": 4 * time.Second, // 3 4 4 5 9
		"r6": 5 * time.Second, // 4 4 5 6 9: r0's 3 is no longer among the last five
	}
	assert.Equal(t, want, a.expected)
}

func TestAdmission_findsATerminatedHolderWithoutSignallingTheHolders(t *testing.T) {
	a := newAdmissionWorld(t)
	a.at(time.Second, func() { a.acquire("a", 1) })
	a.at(2*time.Second, func() { a.acquire("b", 1) })
	a.at(3*time.Second, func() { a.terminate("a") })

	a.run(time.Minute)

	assert.Equal(t, []string{"a", "b"}, a.admitted(), "b is admitted once the admission finds a gone")
	assert.Equal(t, []string{"a clone-admitted", "b clone-admitted"}, a.told, "the holders are told their grants, nothing else")
}

func TestAdmission_repeatedRequestIsNotQueuedTwice(t *testing.T) {
	a := newAdmissionWorld(t)
	a.at(time.Second, func() { a.acquire("a", 1) })
	a.at(2*time.Second, func() { a.acquire("b", 1) })
	a.at(3*time.Second, func() { a.acquire("b", 1) }) // its first answer crossed its repeat
	a.at(4*time.Second, func() { a.acquire("a", 1) })
	var st admission.AdmissionState
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

func TestAdmission_grantsSignalOnlyTheRunsTheyAdmit(t *testing.T) {
	a := newAdmissionWorld(t)
	var runs []string
	for i := range 20 {
		run := fmt.Sprintf("r%02d", i)
		runs = append(runs, run)
		a.at(time.Duration(i+1)*time.Second, func() { a.acquire(run, 2) })
		a.at(time.Duration(30+i)*time.Second, func() { a.release(run) })
	}

	a.run(time.Minute)

	assert.Equal(t, runs, a.admitted())
	assert.Len(t, a.told, len(runs), "a queued run's place is in the admission's query, not told on every grant: %v", a.told)
}

func TestAdmission_reclaimsATerminatedHoldersLeaseWhileCreatesKeepQueueing(t *testing.T) {
	a := newAdmissionWorld(t)
	a.at(time.Second, func() { a.acquire("holder", 1) })
	// Eight queued creates, each asking again every 40 s: a request every 5 s, more often than
	// the admission's checks (every 10 s).
	for i := range 60 {
		a.at(2*time.Second+time.Duration(i)*5*time.Second, func() { a.acquire(fmt.Sprintf("q%d", i%8), 1) })
	}
	a.at(10*time.Second, func() { a.terminate("holder") })
	var st admission.AdmissionState
	a.at(time.Minute, func() { st = a.state() })

	a.run(5 * time.Minute)

	assert.Equal(t, []string{"q0"}, holderRuns(st.Holders), "the terminated holder's lease goes to the first in the queue")
}

func TestAdmission_aLeaseGivenBackWhileItsCloneTaskRunsCoversItUntilTheTaskEnds(t *testing.T) {
	tests := []struct {
		name string
		// giveBack has a give its lease back with the clone it covers.
		giveBack func(a *admissionWorld, clone admission.CloneInFlight)
	}{
		{name: "a stopped by a delete while it waited for its clone", giveBack: func(a *admissionWorld, clone admission.CloneInFlight) {
			a.at(3*time.Second, func() { a.releaseWith("a", clone) })
		}},
		{name: "a cancelled as the holder check finds it closed", giveBack: func(a *admissionWorld, clone admission.CloneInFlight) {
			// Its release comes while the check asks whether it still runs, and it has closed.
			var once sync.Once
			a.w.runs.describing = func(workflowID string) {
				if workflowID != "proxy/a/create" {
					return
				}
				once.Do(func() {
					a.releaseWith("a", clone)
					a.close("a", "canceled")
				})
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdmissionWorld(t)
			upid, err := a.w.cluster.Clone(context.Background(), "pve1", 9000, pve.CloneParams{NewID: 150, Name: "p", Full: true}) // 45 s
			require.NoError(t, err)
			a.at(time.Second, func() { a.acquire("a", 1) })
			a.at(2*time.Second, func() { a.acquire("b", 1) })
			tt.giveBack(a, admission.CloneInFlight{Node: "pve1", UPID: upid})
			var during, after admission.AdmissionState
			a.at(40*time.Second, func() { during = a.state() })
			a.at(70*time.Second, func() { after = a.state() })

			a.run(80 * time.Second)

			assert.Empty(t, during.Holders, "b waits while a's clone runs: admitted %v", a.admitted())
			assert.Equal(t, []string{"b"}, holderRuns(during.Waiting))
			require.Len(t, during.Covered, 1, "a's lease covers its clone")
			assert.Equal(t, upid, during.Covered[0].UPID)
			assert.Equal(t, []string{"b"}, holderRuns(after.Holders), "b is admitted once the clone task has ended")
			assert.Empty(t, after.Covered)
		})
	}
}

func TestAdmission_aLeaseGivenBackWithAnAdoptedCloneCoversItUntilItsVMIsUnlocked(t *testing.T) {
	a := newAdmissionWorld(t)
	_, err := a.w.cluster.Clone(context.Background(), "pve1", 9000, pve.CloneParams{NewID: 150, Name: "p", Full: true}) // 45 s
	require.NoError(t, err)
	a.at(time.Second, func() { a.acquire("a", 1) })
	a.at(2*time.Second, func() { a.acquire("b", 1) })
	// a lost its Clone call's answer, so it knows the VM and not the task.
	a.at(3*time.Second, func() { a.releaseWith("a", admission.CloneInFlight{Node: "pve1", VMID: 150}) })
	var during, after admission.AdmissionState
	a.at(40*time.Second, func() { during = a.state() })
	a.at(70*time.Second, func() { after = a.state() })

	a.run(80 * time.Second)

	assert.Empty(t, during.Holders, "b waits while the VM is locked by its clone")
	assert.Len(t, during.Covered, 1)
	assert.Equal(t, []string{"b"}, holderRuns(after.Holders), "b is admitted once the clone has ended")
}

func TestAdmission_anIdleAdmissionClosesWhenCancelled(t *testing.T) {
	a := newAdmissionWorld(t)
	a.at(time.Second, func() { a.acquire("a", 1) })
	a.at(2*time.Second, func() { a.release("a") })
	a.at(3*time.Second, a.env.CancelWorkflow)

	a.env.ExecuteWorkflow(core.CloneAdmissionName, admission.AdmissionState{Storage: "pve1/local-lvm"})

	require.True(t, a.env.IsWorkflowCompleted())
	var canceled *temporal.CanceledError
	assert.ErrorAs(t, a.env.GetWorkflowError(), &canceled)
}

func TestAdmission_aCancelledAdmissionGrantsNoMoreAndClosesOnceItsLeasesAreBack(t *testing.T) {
	a := newAdmissionWorld(t)
	a.at(time.Second, func() { a.acquire("a", 1) })
	a.at(2*time.Second, func() { a.acquire("b", 1) })
	a.at(3*time.Second, a.env.CancelWorkflow)
	a.at(5*time.Second, func() { a.release("a") })

	a.env.ExecuteWorkflow(core.CloneAdmissionName, admission.AdmissionState{Storage: "pve1/local-lvm"})

	require.True(t, a.env.IsWorkflowCompleted())
	assert.Equal(t, []string{"a"}, a.admitted(), "b asks a new admission when it asks again")
}

func TestAdmission_continuesAsNewWhenSuggestedWithItsHoldersAndQueue(t *testing.T) {
	a := newAdmissionWorld(t)
	a.env.SetContinueAsNewSuggested(true)
	a.at(time.Second, func() {
		a.acquire("a", 1)
		a.acquire("b", 1)
	})

	a.env.ExecuteWorkflow(core.CloneAdmissionName, admission.AdmissionState{Storage: "pve1/local-lvm"})

	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, a.env.GetWorkflowError(), &can)
	var next admission.AdmissionState
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	assert.Equal(t, []string{"a"}, holderRuns(next.Holders))
	assert.Equal(t, []string{"b"}, holderRuns(next.Waiting))
	assert.Equal(t, 1, next.Limit)
}
