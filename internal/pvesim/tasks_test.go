package pvesim

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pve/pvefixture"
)

func TestTaskStatus_runningUntilDurationPassed(t *testing.T) {
	c, clk := newCluster(t)
	upid := startClone(t, c, newID)

	clk.Advance(defaultTaskDurations["qmclone"] - 1)
	st, err := c.TaskStatus(t.Context(), "pve1", upid)
	require.NoError(t, err)
	assert.Equal(t, pve.TaskRunning, st.Status)
	assert.Empty(t, st.ExitStatus)

	clk.Advance(1)
	st, err = c.TaskStatus(t.Context(), "pve1", upid)
	require.NoError(t, err)
	assert.Equal(t, pve.TaskStopped, st.Status)
	assert.Equal(t, "OK", st.ExitStatus)
}

func TestTaskRuns_recordWhenATaskStatusFirstFoundTheTaskStopped(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 10 * time.Second} })
	start := clk.Now()
	upid := startClone(t, c, newID)
	look := func(after time.Duration) {
		clk.Advance(after)
		_, err := c.TaskStatus(t.Context(), "pve1", upid)
		require.NoError(t, err)
	}

	look(9 * time.Second)
	running := c.TaskRuns()
	look(3 * time.Second)
	look(5 * time.Second)

	require.Len(t, running, 1)
	assert.Zero(t, running[0].End, "no end while it runs")
	assert.Zero(t, running[0].Seen, "not seen to end while it runs")
	runs := c.TaskRuns()
	require.Len(t, runs, 1)
	assert.Equal(t, TaskRun{UPID: upid, Type: "qmclone", Start: start, End: start.Add(10 * time.Second), Seen: start.Add(12 * time.Second)}, runs[0])
}

func TestTaskStatus_durationsConfigurable(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 10 * time.Minute} })
	upid := startClone(t, c, newID)

	clk.Advance(9 * time.Minute)
	st, err := c.TaskStatus(t.Context(), "pve1", upid)
	require.NoError(t, err)
	assert.Equal(t, pve.TaskRunning, st.Status)
}

func TestTaskStatus_tokenSplitIntoUserAndTokenID(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.TokenUser = "pveflow@pve!worker" })
	upid := startClone(t, c, newID)

	st, err := c.TaskStatus(t.Context(), "pve1", upid)
	require.NoError(t, err)
	info, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	assert.Equal(t, pve.TaskStatus{
		UPID: upid, Node: "pve1", PID: info.PID, PStart: info.PStart, StartTime: t0.Unix(),
		Type: "qmclone", ID: "9000", User: "pveflow@pve", TokenID: "worker", Status: pve.TaskRunning,
	}, st)
}

func TestTaskStatus_warnings(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	exit := fixtureExit(t, "task_status_stopped_warnings")
	c.FailTask("qmdestroy", exit)

	upid, err := c.Destroy(t.Context(), "pve1", newID)
	require.NoError(t, err)
	st := finish(t, c, clk, upid)
	assert.Equal(t, exit, st.ExitStatus)
	warnings, err := st.Result()
	require.NoError(t, err)
	assert.Equal(t, 2, warnings)
	_, exists := vmByID(c, newID)
	assert.False(t, exists, "the VM is gone")
	assert.NotEmpty(t, volumesOf(c, newID), "its disks are left behind")
}

func TestTaskStatus_unknownUPIDIsNoSuchTask(t *testing.T) {
	tests := []struct {
		name, node string
		upid       pve.UPID
		want       string
	}{
		{"unknown task", "pve1", "UPID:pve1:00001234:00005678:6B005320:qmclone:9000:pveflow@pve!sim:", "no such task"},
		{"malformed", "pve1", "UPID:nonsense", "unable to parse worker upid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newCluster(t)
			_, err := c.TaskStatus(t.Context(), tt.node, tt.upid)
			assert.Equal(t, paramErr(map[string]string{"upid": tt.want}), err)
		})
	}
}

func TestTaskStatus_onlyOnItsOwnNode(t *testing.T) {
	c, _ := newCluster(t)
	upid := startClone(t, c, newID)

	_, err := c.TaskStatus(t.Context(), "pve2", upid)
	assert.Equal(t, paramErr(map[string]string{"upid": "no such task"}), err)
}

func TestFailTask_spentOnlyByTaskThatWouldSucceed(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	c.FailTask("qmstart", "start failed: QEMU exited with code 1")

	template, err := c.Start(t.Context(), "pve1", tmplID)
	require.NoError(t, err)
	vm, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "you can't start a vm if it's a template", finish(t, c, clk, template).ExitStatus)
	assert.Equal(t, "start failed: QEMU exited with code 1", finish(t, c, clk, vm).ExitStatus)
	st, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "stopped", st.Status)
}

func TestUPIDs_typeAndIDMatchFixtures(t *testing.T) {
	c, clk := newCluster(t)
	ctx := t.Context()
	clone := startClone(t, c, newID)
	finish(t, c, clk, clone)
	resize, _ := c.Resize(ctx, "pve1", newID, "scsi0", "20G")
	start, _ := c.Start(ctx, "pve1", newID)
	stop, _ := c.Stop(ctx, "pve1", newID)
	destroy, _ := c.Destroy(ctx, "pve1", newID)
	upload, _ := c.UploadISO(ctx, "pve1", "local", "seed.iso", bytes.NewReader(nil), 0)
	del, _ := c.DeleteVolume(ctx, "pve1", "local", "local:iso/seed.iso")

	for fixture, upid := range map[string]pve.UPID{
		"clone_response":          clone,
		"resize_response":         resize,
		"start_response":          start,
		"stop_response":           stop,
		"destroy_response":        destroy,
		"upload_response":         upload,
		"content_delete_response": del,
	} {
		var body struct {
			Data pve.UPID `json:"data"`
		}
		require.NoError(t, json.Unmarshal([]byte(pvefixture.Load(t, fixture).Body), &body), fixture)
		want, err := pve.ParseUPID(body.Data)
		require.NoError(t, err, fixture)
		got, err := pve.ParseUPID(upid)
		require.NoError(t, err, fixture)
		assert.Equal(t, [3]string{want.Node, want.Type, want.ID}, [3]string{got.Node, got.Type, got.ID}, fixture)
	}
}

func TestNew_realClockByDefault(t *testing.T) {
	opts := Default()
	opts.TaskDurations = map[string]time.Duration{"qmclone": time.Millisecond}
	c := New(opts)
	upid, err := c.Clone(t.Context(), "pve1", tmplID, cloneParams(newID))
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		st, err := c.TaskStatus(t.Context(), "pve1", upid)
		return err == nil && st.Status == pve.TaskStopped && st.ExitStatus == "OK"
	}, 10*time.Second, 5*time.Millisecond)
	vm, _ := vmByID(c, newID)
	assert.NotContains(t, vm.Config, "lock")
}
