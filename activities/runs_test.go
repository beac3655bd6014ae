package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
)

// runs stands for Temporal's side: one run, as a test sets it.
type runs struct{ run activities.RunInfo }

func (r runs) DescribeRun(context.Context, string, string) (activities.RunInfo, error) {
	return r.run, nil
}

func (r runs) SignalRun(_ context.Context, workflowID, runID, _ string, _ any) error {
	if !r.run.Running || (runID != "" && runID != r.run.RunID) {
		return pve.Classified(pve.NotFound, errors.New("workflow "+workflowID+" does not run"))
	}
	return nil
}

// SignalWithStartRun starts the workflow when it does not run: it fails only as Temporal
// fails.
func (r runs) SignalWithStartRun(_ context.Context, workflowID, _ string, _ any, start activities.StartRun) error {
	if start.WorkflowType == "" {
		return pve.Classified(pve.Permanent, errors.New("start "+workflowID+": no workflow type"))
	}
	return nil
}

func TestDescribeRun(t *testing.T) {
	started := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	running := activities.RunInfo{RunID: "r1", Running: true, StartedAt: started}
	closed := activities.RunInfo{RunID: "r1", StartedAt: started}
	tests := []struct {
		name          string
		runs          activities.Runs
		waitClosed    bool
		want          activities.RunInfo
		wantType      string
		wantRetryable bool
	}{
		{"a running run", runs{running}, false, running, "", false},
		{"a closed run", runs{closed}, true, closed, "", false},
		{"a wait for a run that runs polls", runs{running}, true, activities.RunInfo{}, activities.ErrNotReady, true},
		{"a worker without Runs", nil, false, activities.RunInfo{}, activities.ErrPermanent, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.acts.Runs = tt.runs
			var got activities.RunInfo

			err := f.run(t, f.acts.DescribeRun, &got, activities.DescribeRunRequest{WorkflowID: "proxy/u/delete", WaitClosed: tt.waitClosed})

			if tt.wantType == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			appErr := appError(t, err)
			assert.Equal(t, tt.wantType, appErr.Type())
			assert.Equal(t, tt.wantRetryable, !appErr.NonRetryable())
			assert.Contains(t, appErr.Message(), "proxy/u/delete")
		})
	}
}

func TestSignalRun(t *testing.T) {
	tests := []struct {
		name     string
		runs     activities.Runs
		runID    string
		wantType string
	}{
		{"a running workflow takes the signal", runs{activities.RunInfo{RunID: "r1", Running: true}}, "", ""},
		{"the run named takes the signal", runs{activities.RunInfo{RunID: "r1", Running: true}}, "r1", ""},
		{"a run named that is not the running one is NotFound", runs{activities.RunInfo{RunID: "r2", Running: true}}, "r1", activities.ErrNotFound},
		{"a workflow that does not run is NotFound, not retried", runs{}, "", activities.ErrNotFound},
		{"a worker without Runs", nil, "", activities.ErrPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.acts.Runs = tt.runs

			err := f.run(t, f.acts.SignalRun, nil, activities.SignalRunRequest{WorkflowID: "clone-admission/q/pve1/local-lvm", RunID: tt.runID, Signal: "clone-release", Arg: []byte(`{}`)})

			if tt.wantType == "" {
				require.NoError(t, err)
				return
			}
			appErr := appError(t, err)
			assert.Equal(t, tt.wantType, appErr.Type())
			assert.True(t, appErr.NonRetryable())
			assert.Contains(t, appErr.Message(), "signal clone-release to workflow clone-admission/q/pve1/local-lvm")
		})
	}
}

func TestSignalWithStartRun(t *testing.T) {
	start := activities.StartRun{WorkflowType: "CloneAdmission", TaskQueue: "q", Input: []byte(`{"storage":"pve1/local-lvm"}`)}
	tests := []struct {
		name     string
		runs     activities.Runs
		start    activities.StartRun
		wantType string
	}{
		{"a running workflow takes the signal", runs{activities.RunInfo{RunID: "r1", Running: true}}, start, ""},
		{"a workflow that does not run is started with it", runs{}, start, ""},
		{"what Temporal refuses is the call's error", runs{}, activities.StartRun{}, activities.ErrPermanent},
		{"a worker without Runs", nil, start, activities.ErrPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.acts.Runs = tt.runs

			err := f.run(t, f.acts.SignalWithStartRun, nil, activities.SignalWithStartRunRequest{
				WorkflowID: "clone-admission/q/pve1/local-lvm", Signal: "clone-acquire", Arg: []byte(`{}`), Start: tt.start,
			})

			if tt.wantType == "" {
				require.NoError(t, err)
				return
			}
			appErr := appError(t, err)
			assert.Equal(t, tt.wantType, appErr.Type())
			assert.Contains(t, appErr.Message(), "signal clone-acquire to workflow clone-admission/q/pve1/local-lvm, starting it if it does not run")
		})
	}
}

// signalCounter is runs that counts the signals it was sent.
type signalCounter struct {
	runs
	sent *int
}

func (s signalCounter) SignalRun(ctx context.Context, workflowID, runID, signal string, arg any) error {
	err := s.runs.SignalRun(ctx, workflowID, runID, signal, arg)
	if err == nil {
		*s.sent++
	}
	return err
}

// The clone's wait hands TaskStatus the lease's release: the look that sees the task ended
// sends it, and says so; a look at a running task sends nothing; a release that cannot be sent
// is left to the workflow.
func TestTaskStatus_sendsItsSignalOnceTheTaskHasEnded(t *testing.T) {
	tests := []struct {
		name          string
		admissionRuns bool
		wantSignalled bool
	}{
		{"the admission runs", true, true},
		{"the admission does not run: the workflow sends its own", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			sent := 0
			f.acts.Runs = signalCounter{runs{activities.RunInfo{Running: tt.admissionRuns, RunID: "r"}}, &sent}
			var upid pve.UPID
			require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
				Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
			}))
			req := activities.TaskStatusRequest{UPID: upid, Then: &activities.SignalRunRequest{WorkflowID: "clone-admission/q/pve1/local-lvm", Signal: "clone-release", Arg: []byte(`{}`)}}

			err := f.run(t, f.acts.TaskStatus, nil, req)
			require.True(t, isType(err, activities.ErrTaskRunning), "%v", err)
			assert.Zero(t, sent, "the clone still runs")

			f.clock.Advance(time.Hour)
			var res activities.TaskResult
			require.NoError(t, f.run(t, f.acts.TaskStatus, &res, req))
			assert.Equal(t, tt.wantSignalled, res.Signalled)
			assert.Equal(t, map[bool]int{true: 1, false: 0}[tt.wantSignalled], sent)
		})
	}
}

// signalRecorder is runs that keeps the argument of the last signal it was sent.
type signalRecorder struct {
	runs
	arg *json.RawMessage
}

func (s signalRecorder) SignalRun(_ context.Context, _, _, _ string, arg any) error {
	*s.arg = arg.(json.RawMessage)
	return nil
}

// A paced wait's look that sees the task ended tells how long the wait waited, in its result and
// in the signal it sends: the admission learns from it how long its clones take.
func TestTaskStatus_aPacedLookSaysHowLongItsWaitWaited(t *testing.T) {
	f := newFixture(t)
	var sent json.RawMessage
	f.acts.Runs = signalRecorder{runs{activities.RunInfo{Running: true, RunID: "r"}}, &sent}
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
		Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
	}))
	req := activities.TaskStatusRequest{UPID: upid, Pace: &activities.Pace{Since: f.clock.Now(), Poll: config.Default().Poll},
		Then: &activities.SignalRunRequest{WorkflowID: "clone-admission/q/pve1/local-lvm", Signal: "clone-release", Arg: []byte(`{"runID":"r"}`)}}
	f.clock.Advance(time.Hour)

	var res activities.TaskResult
	require.NoError(t, f.run(t, f.acts.TaskStatus, &res, req))

	assert.Equal(t, time.Hour, res.Waited)
	assert.JSONEq(t, `{"runID":"r","waited":3600000000000}`, string(sent))
}

// callPriorities is a Proxmox API that records the call-limit priority of each clone and task
// status call it is given.
type callPriorities struct {
	pve.API
	clone, status []pve.Priority
}

func (c *callPriorities) Clone(ctx context.Context, node string, vmid int, params pve.CloneParams) (pve.UPID, error) {
	c.clone = append(c.clone, pve.PriorityOf(ctx))
	return c.API.Clone(ctx, node, vmid, params)
}

func (c *callPriorities) TaskStatus(ctx context.Context, node string, upid pve.UPID) (pve.TaskStatus, error) {
	c.status = append(c.status, pve.PriorityOf(ctx))
	return c.API.TaskStatus(ctx, node, upid)
}

// A clone, and the looks at its task that hand its storage's slot on when it ends, go before
// the other calls that the call limits hold back; looks at any other task wait their turn.
func TestTaskStatus_theCallsAClonesSlotWaitsOnGoFirst(t *testing.T) {
	f := newFixture(t)
	f.acts.Runs = signalCounter{runs{activities.RunInfo{Running: true, RunID: "r"}}, new(int)}
	seen := &callPriorities{API: f.acts.API}
	f.acts.API = seen
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
		Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
	}))
	handsOn := activities.TaskStatusRequest{UPID: upid, Then: &activities.SignalRunRequest{WorkflowID: "clone-admission/q/pve1/local-lvm", Signal: "clone-release", Arg: []byte(`{}`)}}

	_ = f.run(t, f.acts.TaskStatus, nil, handsOn)
	_ = f.run(t, f.acts.TaskStatus, nil, activities.TaskStatusRequest{UPID: upid})

	assert.Equal(t, []pve.Priority{pve.PrioritySlot}, seen.clone)
	assert.Equal(t, []pve.Priority{pve.PrioritySlot, pve.PriorityDefault}, seen.status)
}
