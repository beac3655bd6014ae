package activities_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

const (
	template = 9000
	newVMID  = 123456
)

// fixture is an activity environment over a simulated cluster on a manual clock, with the
// worker's log captured at debug level.
type fixture struct {
	env     *testsuite.TestActivityEnvironment
	cluster *pvesim.Cluster
	clock   *pvesim.ManualClock
	acts    *activities.Activities
	log     *bytes.Buffer
}

func newFixture(t *testing.T, change ...func(*pvesim.Options)) *fixture {
	t.Helper()
	clock := pvesim.NewManualClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	opts := pvesim.Default()
	opts.Clock = clock
	opts.AgentBootDelay = 5 * time.Second
	for _, c := range change {
		c(&opts)
	}
	cluster := pvesim.New(opts)
	log := &bytes.Buffer{}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	env := suite.NewTestActivityEnvironment()
	cfg := config.Default()
	acts := &activities.Activities{API: cluster, Proxmox: cfg.Proxmox, Now: clock.Now}
	env.RegisterActivity(acts)
	return &fixture{env: env, cluster: cluster, clock: clock, acts: acts, log: log}
}

// run executes one activity and decodes its result into out (which may be nil).
func (f *fixture) run(t *testing.T, activity any, out any, args ...any) error {
	t.Helper()
	val, err := f.env.ExecuteActivity(activity, args...)
	if err != nil {
		return err
	}
	if out != nil {
		require.NoError(t, val.Get(out))
	}
	return nil
}

// waitTask advances the clock until the task has ended and returns TaskStatus's answer.
func (f *fixture) waitTask(t *testing.T, upid pve.UPID) (activities.TaskResult, error) {
	t.Helper()
	var res activities.TaskResult
	for range 100 {
		err := f.run(t, f.acts.TaskStatus, &res, activities.TaskStatusRequest{UPID: upid})
		if !isType(err, activities.ErrTaskRunning) {
			return res, err
		}
		f.clock.Advance(time.Second)
	}
	t.Fatalf("task %s still running after 100 s", upid)
	return res, nil
}

// clone clones the template to newVMID and waits for the clone.
func (f *fixture) clone(t *testing.T) activities.VMRef {
	t.Helper()
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
		Node: "pve1", TemplateVMID: template,
		Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
	}))
	_, err := f.waitTask(t, upid)
	require.NoError(t, err)
	return activities.VMRef{Node: "pve1", VMID: newVMID}
}

// start starts a VM and waits for the start task.
func (f *fixture) start(t *testing.T, ref activities.VMRef) {
	t.Helper()
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Start, &upid, ref))
	_, err := f.waitTask(t, upid)
	require.NoError(t, err)
}

func isType(err error, errType string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == errType
}

func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	return appErr
}

func TestVersion_readsVersion(t *testing.T) {
	f := newFixture(t)
	var v pve.Version
	require.NoError(t, f.run(t, f.acts.Version, &v))
	assert.NotEmpty(t, v.Version)
	assert.NotEmpty(t, v.Release)
}

func TestNodeStatus_readsNode(t *testing.T) {
	f := newFixture(t)
	var s pve.NodeStatus
	require.NoError(t, f.run(t, f.acts.NodeStatus, &s, "pve1"))
	assert.NotEmpty(t, s.PVEVersion)
}

func TestStorageStatus_readsStorage(t *testing.T) {
	f := newFixture(t)
	var s pve.StorageStatus
	require.NoError(t, f.run(t, f.acts.StorageStatus, &s, activities.StorageRef{Node: "pve1", Storage: "local"}))
	assert.Contains(t, s.Content, "iso")
	assert.Positive(t, s.Avail)
}

func TestClusterResources_listsTemplate(t *testing.T) {
	f := newFixture(t)
	var rs []pve.VMResource
	require.NoError(t, f.run(t, f.acts.ClusterResources, &rs, activities.ResourcesFilter{}))
	require.Len(t, rs, 1)
	assert.Equal(t, template, rs[0].VMID)
	assert.True(t, rs[0].Template)
}

func TestClusterResources_keepsOnlyTheVMsTheFilterNames(t *testing.T) {
	f := newFixture(t)
	var all []pve.VMResource
	require.NoError(t, f.run(t, f.acts.ClusterResources, &all, activities.ResourcesFilter{}))
	require.Len(t, all, 1)
	tests := []struct {
		name   string
		filter activities.ResourcesFilter
		want   int
	}{
		{"by VMID", activities.ResourcesFilter{VMIDs: []int{newVMID, template}}, 1},
		{"by name", activities.ResourcesFilter{Names: []string{all[0].Name}}, 1},
		{"neither", activities.ResourcesFilter{VMIDs: []int{newVMID}, Names: []string{"proxy-test"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rs []pve.VMResource
			require.NoError(t, f.run(t, f.acts.ClusterResources, &rs, tt.filter))
			assert.Len(t, rs, tt.want)
		})
	}
}

func TestClone_returnsCloneTask(t *testing.T) {
	f := newFixture(t)
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
		Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
	}))
	info, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	assert.Equal(t, "qmclone", info.Type)
	assert.Equal(t, "9000", info.ID, "a clone's task id is the source VMID")
}

func TestTaskStatus_runningIsRetryableBenignTaskRunning(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 30 * time.Second} })
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
		Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
	}))
	f.clock.Advance(12 * time.Second)

	err := f.run(t, f.acts.TaskStatus, nil, activities.TaskStatusRequest{UPID: upid})

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrTaskRunning, appErr.Type())
	assert.False(t, appErr.NonRetryable())
	assert.Equal(t, temporal.ApplicationErrorCategoryBenign, appErr.Category())
	assert.Contains(t, appErr.Message(), "clone task "+string(upid)+" still running on node pve1")
	assert.Contains(t, appErr.Message(), "12s", "the message says how long the task has run")
}

// A look that finds the task running says when the next comes, by the wait's pace, and so does
// one that meets Proxmox's trouble: the retry policy's interval is left to looks lost with their
// worker.
func TestTaskStatus_aLookIsMadeAgainAtItsWaitsPace(t *testing.T) {
	poll := config.Default().Poll
	for _, tc := range []struct {
		name     string
		paced    bool
		waited   time.Duration
		trouble  bool
		wantType string
		next     time.Duration
	}{
		{"without a pace, the retry policy spaces the looks", false, 20 * time.Second, false, activities.ErrTaskRunning, 0},
		{"a young wait looks every second", true, 3 * time.Second, false, activities.ErrTaskRunning, time.Second},
		{"then after a fifth of the time waited", true, 20 * time.Second, false, activities.ErrTaskRunning, 4 * time.Second},
		{"at most ten seconds apart", true, 5 * time.Minute, false, activities.ErrTaskRunning, 10 * time.Second},
		{"Proxmox's trouble without a pace, by the retry policy", false, 20 * time.Second, true, activities.ErrTransient, 0},
		{"Proxmox's trouble at the pace", true, 20 * time.Second, true, activities.ErrTransient, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": time.Hour} })
			var upid pve.UPID
			require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
				Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
			}))
			req := activities.TaskStatusRequest{UPID: upid}
			if tc.paced {
				req.Pace = &activities.Pace{Since: f.clock.Now(), Poll: poll}
			}
			f.clock.Advance(tc.waited)
			if tc.trouble {
				f.cluster.FailNext("TaskStatus", apiErr(596, "Connection timed out"))
			}

			err := f.run(t, f.acts.TaskStatus, nil, req)

			appErr := appError(t, err)
			assert.Equal(t, tc.wantType, appErr.Type())
			assert.False(t, appErr.NonRetryable())
			assert.Equal(t, tc.next, appErr.NextRetryDelay())
		})
	}
}

func TestTaskStatus_successAfterTaskEnds(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 30 * time.Second} })
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
		Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
	}))
	f.clock.Advance(31 * time.Second)

	var res activities.TaskResult
	require.NoError(t, f.run(t, f.acts.TaskStatus, &res, activities.TaskStatusRequest{UPID: upid}))

	assert.Equal(t, "OK", res.ExitStatus)
	assert.Zero(t, res.Warnings)
}

func TestTaskStatus_failedTaskIsNonRetryableTaskFailedWithExitStatus(t *testing.T) {
	f := newFixture(t)
	const exit = "clone failed: not enough free space (10737418240 < 21474836480)"
	f.cluster.FailTask("qmclone", exit)
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
		Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
	}))

	_, err := f.waitTask(t, upid)

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrTaskFailed, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), exit)
	var class string
	require.NoError(t, appErr.Details(&class))
	assert.Equal(t, string(pve.QuotaExceeded), class, "the detail classifies the exit status")
}

func TestTaskStatus_warningsAreSuccess(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.cluster.FailTask("qmstart", "WARNINGS: 1")
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Start, &upid, ref))

	res, err := f.waitTask(t, upid)

	require.NoError(t, err)
	assert.Equal(t, 1, res.Warnings)
	assert.Equal(t, "WARNINGS: 1", res.ExitStatus)
}

func TestTaskStatus_malformedUPIDIsPermanent(t *testing.T) {
	f := newFixture(t)
	err := f.run(t, f.acts.TaskStatus, nil, activities.TaskStatusRequest{UPID: "not-a-upid"})
	appErr := appError(t, err)
	assert.Equal(t, activities.ErrPermanent, appErr.Type())
	assert.True(t, appErr.NonRetryable())
}

func TestVMConfig_readsClonedConfig(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	var cfg pve.VMConfig
	require.NoError(t, f.run(t, f.acts.VMConfig, &cfg, activities.VMConfigRequest{VMRef: ref}))
	assert.Equal(t, "proxy-test", cfg["name"])
	assert.Contains(t, cfg["scsi0"], "vm-123456-disk")
}

func TestSetVMConfig_writesKeys(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	require.NoError(t, f.run(t, f.acts.SetVMConfig, nil, activities.SetVMConfigRequest{
		VMRef: ref, Params: pve.VMConfig{"cores": "4", "tags": "Proxy_Operator"},
	}))
	var cfg pve.VMConfig
	require.NoError(t, f.run(t, f.acts.VMConfig, &cfg, activities.VMConfigRequest{VMRef: ref}))
	assert.Equal(t, "4", cfg["cores"])
	assert.Equal(t, "proxy_operator", cfg["tags"])
}

func TestResize_growsDisk(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Resize, &upid, activities.ResizeRequest{VMRef: ref, Disk: "scsi0", Size: "20G"}))
	_, err := f.waitTask(t, upid)
	require.NoError(t, err)
	var cfg pve.VMConfig
	require.NoError(t, f.run(t, f.acts.VMConfig, &cfg, activities.VMConfigRequest{VMRef: ref}))
	assert.Contains(t, cfg["scsi0"], "size=20G")
}

func TestStartAndStop_changeStatus(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.start(t, ref)
	var st pve.VMStatus
	require.NoError(t, f.run(t, f.acts.VMStatus, &st, activities.VMStatusRequest{VMRef: ref}))
	assert.Equal(t, "running", st.Status)

	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Stop, &upid, ref))
	_, err := f.waitTask(t, upid)
	require.NoError(t, err)
	require.NoError(t, f.run(t, f.acts.VMStatus, &st, activities.VMStatusRequest{VMRef: ref}))
	assert.Equal(t, "stopped", st.Status)
}

func TestReboot_restartsTheGuest(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.start(t, ref)
	f.clock.Advance(time.Minute)
	var before pve.VMStatus
	require.NoError(t, f.run(t, f.acts.VMStatus, &before, activities.VMStatusRequest{VMRef: ref}))

	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Reboot, &upid, ref))
	res, err := f.waitTask(t, upid)

	require.NoError(t, err)
	assert.Equal(t, "OK", res.ExitStatus)
	var after pve.VMStatus
	require.NoError(t, f.run(t, f.acts.VMStatus, &after, activities.VMStatusRequest{VMRef: ref}))
	assert.Equal(t, "running", after.Status)
	assert.Less(t, after.Uptime, before.Uptime, "the guest started again")
}

func TestReboot_stoppedVMIsNonRetryableNotRunning(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)

	err := f.run(t, f.acts.Reboot, nil, ref)

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrNotRunning, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "VM 123456 not running")
}

func TestTaskStatus_hastartTaskReadsHAStartRequest(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"hastart": 30 * time.Second} })
	ref := f.clone(t)
	require.NoError(t, f.cluster.AddHAResource(t.Context(), pve.HAResourceParams{SID: "vm:123456", State: "stopped"}))
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Start, &upid, ref))

	err := f.run(t, f.acts.TaskStatus, nil, activities.TaskStatusRequest{UPID: upid})

	assert.Contains(t, appError(t, err).Message(), "HA start request task "+string(upid)+" still running on node pve1")
}

func TestTaskStatus_rebootTaskReadsReboot(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmreboot": 30 * time.Second} })
	ref := f.clone(t)
	f.start(t, ref)
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Reboot, &upid, ref))

	err := f.run(t, f.acts.TaskStatus, nil, activities.TaskStatusRequest{UPID: upid})

	assert.Contains(t, appError(t, err).Message(), "reboot task "+string(upid)+" still running on node pve1")
}

func TestVMStatus_waitRunningIsNotReadyUntilRunning(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	err := f.run(t, f.acts.VMStatus, nil, activities.VMStatusRequest{VMRef: ref, WaitFor: activities.WaitRunning})
	appErr := appError(t, err)
	assert.Equal(t, activities.ErrNotReady, appErr.Type())
	assert.False(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "VM 123456 on node pve1 is stopped")

	f.start(t, ref)
	var st pve.VMStatus
	require.NoError(t, f.run(t, f.acts.VMStatus, &st, activities.VMStatusRequest{VMRef: ref, WaitFor: activities.WaitRunning}))
	assert.Equal(t, "running", st.Status)
}

func TestVMStatus_waitStoppedIsNotReadyWhileRunning(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.start(t, ref)
	err := f.run(t, f.acts.VMStatus, nil, activities.VMStatusRequest{VMRef: ref, WaitFor: activities.WaitStopped})
	appErr := appError(t, err)
	assert.Equal(t, activities.ErrNotReady, appErr.Type())
	assert.False(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "VM 123456 on node pve1 runs, waiting for it to stop")

	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Stop, &upid, ref))
	_, err = f.waitTask(t, upid)
	require.NoError(t, err)
	var st pve.VMStatus
	require.NoError(t, f.run(t, f.acts.VMStatus, &st, activities.VMStatusRequest{VMRef: ref, WaitFor: activities.WaitStopped}))
	assert.Equal(t, "stopped", st.Status)
}

func TestVMStatus_waitUnlockedIsNotReadyWhileCloning(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": time.Minute} })
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
		Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test", Full: true},
	}))
	ref := activities.VMRef{Node: "pve1", VMID: newVMID}

	err := f.run(t, f.acts.VMStatus, nil, activities.VMStatusRequest{VMRef: ref, WaitFor: activities.WaitUnlocked})
	assert.True(t, isType(err, activities.ErrNotReady))
	assert.Contains(t, appError(t, err).Message(), "locked (clone)")

	f.clock.Advance(time.Minute)
	require.NoError(t, f.run(t, f.acts.VMStatus, nil, activities.VMStatusRequest{VMRef: ref, WaitFor: activities.WaitUnlocked}))
}

func TestVMConfig_waitOwnerKnownIsNotReadyUntilTheCloneShowsItsMark(t *testing.T) {
	// A single-disk template: PVE writes the clone's config with its mark only when the disk is
	// copied, at the clone's end.
	f := newFixture(t, func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": time.Minute}
		o.VMs = []pvesim.VM{pvesim.Template(template, "pve1", 1)}
	})
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
		Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{
			NewID: newVMID, Name: "proxy-test", Full: true, Description: "proxy-operator-managed=true\nproxy-operator-uid=uid-a",
		},
	}))
	req := activities.VMConfigRequest{VMRef: activities.VMRef{Node: "pve1", VMID: newVMID}, WaitFor: activities.WaitOwnerKnown}

	err := f.run(t, f.acts.VMConfig, nil, req)
	assert.True(t, isType(err, activities.ErrNotReady))
	assert.Contains(t, appError(t, err).Message(), "VM 123456 on node pve1 is being cloned")

	f.clock.Advance(time.Minute)
	var cfg pve.VMConfig
	require.NoError(t, f.run(t, f.acts.VMConfig, &cfg, req))
	assert.Contains(t, cfg["description"], "proxy-operator-uid=uid-a")
}

func TestVMConfig_waitUnlockedIsNotReadyWhileLocked(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.cluster.AddVM(pvesim.VM{Node: "pve1", VMID: newVMID, Config: pve.VMConfig{"lock": "backup"}}))
	req := activities.VMConfigRequest{VMRef: activities.VMRef{Node: "pve1", VMID: newVMID}, WaitFor: activities.WaitUnlocked}

	err := f.run(t, f.acts.VMConfig, nil, req)

	assert.True(t, isType(err, activities.ErrNotReady))
	assert.Contains(t, appError(t, err).Message(), "locked (backup)")
}

func TestDestroy_removesVM(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Destroy, &upid, ref))
	_, err := f.waitTask(t, upid)
	require.NoError(t, err)
	err = f.run(t, f.acts.VMConfig, nil, activities.VMConfigRequest{VMRef: ref})
	assert.True(t, isType(err, activities.ErrNotFound), "got %v", err)
}

func TestAgentNetworkInterfaces_agentNotRunningIsRetryable(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.start(t, ref)

	err := f.run(t, f.acts.AgentNetworkInterfaces, nil, activities.AgentRequest{VMRef: ref})

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrAgentNotRunning, appErr.Type())
	assert.False(t, appErr.NonRetryable())
	assert.Equal(t, temporal.ApplicationErrorCategoryBenign, appErr.Category())
}

func TestAgentNetworkInterfaces_anAgentNotAnsweringYetIsLookedAtAgainAtTheWaitsPace(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.start(t, ref)
	pace := &activities.Pace{Since: f.clock.Now().Add(-time.Minute), Poll: config.Default().Poll}

	waiting := f.run(t, f.acts.AgentNetworkInterfaces, nil, activities.AgentRequest{VMRef: ref, WaitReady: true, Pace: pace})
	reading := f.run(t, f.acts.AgentNetworkInterfaces, nil, activities.AgentRequest{VMRef: ref, Pace: pace})

	assert.Equal(t, activities.ErrAgentNotRunning, appError(t, waiting).Type())
	assert.Equal(t, 10*time.Second, appError(t, waiting).NextRetryDelay())
	assert.Zero(t, appError(t, reading).NextRetryDelay(), "a read that does not wait leaves its retries to the policy")
}

func TestAgentNetworkInterfaces_reportsRoutableIPv4AfterBoot(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.start(t, ref)
	f.clock.Advance(10 * time.Second)

	var res activities.AgentResult
	require.NoError(t, f.run(t, f.acts.AgentNetworkInterfaces, &res, activities.AgentRequest{VMRef: ref, WaitReady: true}))

	assert.NotEmpty(t, res.Interfaces)
	assert.NotEmpty(t, res.IPv4)
	assert.NotEqual(t, "127.0.0.1", res.IPv4)
}

func TestAgentNetworkInterfaces_aStaticAddressNotReportedIsNotReadyNamingIt(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.start(t, ref)
	f.clock.Advance(10 * time.Second)

	err := f.run(t, f.acts.AgentNetworkInterfaces, nil, activities.AgentRequest{VMRef: ref, WaitReady: true,
		Addresses: proxy.Addresses{IPv4: "192.0.2.10/24", IPv6: "2001:db8::10/64"}})

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrNotReady, appErr.Type())
	assert.False(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "static address 192.0.2.10/24, static address 2001:db8::10/64",
		"the guest took DHCP's address, having no seed: the wait names what it lacks")
}

func TestAgentNetworkInterfaces_stoppedVMIsNonRetryableNotRunning(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	err := f.run(t, f.acts.AgentNetworkInterfaces, nil, activities.AgentRequest{VMRef: ref})
	appErr := appError(t, err)
	assert.Equal(t, activities.ErrNotRunning, appErr.Type())
	assert.True(t, appErr.NonRetryable())
}

func TestUploadISO_uploadsSeedAndReturnsOnlyItsDescription(t *testing.T) {
	f := newFixture(t)
	var res activities.UploadISOResult
	require.NoError(t, f.run(t, f.acts.UploadISO, &res, activities.UploadISORequest{
		StorageRef: activities.StorageRef{Node: "pve1", Storage: "local"},
		Name:       "proxy-test", Seed: "proxy-test", InstanceID: "uid-1", UserData: "#cloud-config\n",
	}))
	_, err := f.waitTask(t, res.UPID)
	require.NoError(t, err)

	assert.Equal(t, "local:iso/proxy-test-seed.iso", res.VolID)
	assert.Positive(t, res.Size)
	assert.Len(t, res.SHA256, 64)
	var found bool
	for _, v := range f.cluster.Volumes() {
		if v.VolID == res.VolID {
			found = true
			assert.Equal(t, res.Size, v.Size)
		}
	}
	assert.True(t, found, "the ISO is on the storage")
}

func TestDeleteVolume_missingISOSucceeds(t *testing.T) {
	f := newFixture(t)
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.DeleteVolume, &upid, activities.DeleteVolumeRequest{
		StorageRef: activities.StorageRef{Node: "pve1", Storage: "local"}, VolID: "local:iso/absent-seed.iso",
	}))
	if upid != "" {
		_, err := f.waitTask(t, upid)
		require.NoError(t, err)
	}
}

func TestStorageContent_listsISOs(t *testing.T) {
	f := newFixture(t)
	started := f.clock.Now()
	var up activities.UploadISOResult
	require.NoError(t, f.run(t, f.acts.UploadISO, &up, activities.UploadISORequest{
		StorageRef: activities.StorageRef{Node: "pve1", Storage: "local"},
		Name:       "proxy-test", Seed: "proxy-test", InstanceID: "uid-1", UserData: "#cloud-config\n",
	}))
	_, err := f.waitTask(t, up.UPID)
	require.NoError(t, err)

	var isos []pve.StorageVolume
	require.NoError(t, f.run(t, f.acts.StorageContent, &isos, activities.StorageContentRequest{
		StorageRef: activities.StorageRef{Node: "pve1", Storage: "local"}, Content: "iso",
	}))

	require.Len(t, isos, 1)
	assert.Equal(t, up.VolID, isos[0].VolID)
	assert.Equal(t, up.Size, isos[0].Size)
	assert.WithinRange(t, time.Unix(isos[0].CTime, 0), started, f.clock.Now(), "made when the upload ended")
}

func TestStorageContent_unknownStorageFailsWithProxmoxMessage(t *testing.T) {
	f := newFixture(t)

	err := f.run(t, f.acts.StorageContent, nil, activities.StorageContentRequest{
		StorageRef: activities.StorageRef{Node: "pve1", Storage: "nope"}, Content: "iso",
	})

	require.Error(t, err)
	assert.Contains(t, err.Error(), "list content of storage nope on node pve1")
	assert.Contains(t, err.Error(), "storage 'nope' does not exist")
}

func TestErrors_classesBecomeApplicationErrorTypes(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantType  string
		retryable bool
	}{
		{"missing VM", apiErr(500, "Configuration file 'nodes/pve1/qemu-server/123456.conf' does not exist"), activities.ErrNotFound, false},
		{"locked", apiErr(500, "VM is locked (backup)"), activities.ErrLocked, true},
		{"lock timeout", apiErr(500, "can't lock file '/var/lock/qemu-server/lock-123456.conf' - got timeout"), activities.ErrLocked, true},
		{"VMID taken", apiErr(500, "unable to create VM 123456: config file already exists"), activities.ErrAlreadyExists, false},
		{"forbidden", apiErr(403, "Permission check failed (/vms/9000, VM.Clone)"), activities.ErrPermanent, false},
		{"bad parameter", &pve.APIError{Status: 400, Reason: "Parameter verification failed.", Errors: map[string]string{"newid": "type check ('integer') failed - got 'abc'"}}, activities.ErrPermanent, false},
		{"backend trouble", apiErr(596, "Connection timed out"), activities.ErrTransient, true},
		{"no space", &pve.TaskError{UPID: "UPID:pve1:0000A1B2:0001C3D4:6750A1B2:qmclone:9000:pveflow@pve!sim:", ExitStatus: "clone failed: not enough free space (1 < 2)"}, activities.ErrTaskFailed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.cluster.FailNext("Clone", tt.err)

			err := f.run(t, f.acts.Clone, nil, activities.CloneRequest{
				Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: newVMID, Name: "proxy-test"},
			})

			appErr := appError(t, err)
			assert.Equal(t, tt.wantType, appErr.Type())
			assert.Equal(t, tt.retryable, !appErr.NonRetryable())
			assert.Contains(t, appErr.Message(), "clone template 9000 on node pve1 to VM 123456", "the message names the step")
		})
	}
}

func TestErrors_faultSaysWhetherAndHowProxmoxAnswered(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want activities.Fault
	}{
		{"unauthorized", apiErr(401, "authentication failure"), activities.Fault{HTTPStatus: 401}},
		{"missing storage", &pve.APIError{Status: 400, Reason: "Parameter verification failed.", Errors: map[string]string{"storage": "No such storage."}}, activities.Fault{HTTPStatus: 400}},
		{"relay failure", apiErr(596, "Connection timed out"), activities.Fault{HTTPStatus: 596}},
		{"request timeout", fmt.Errorf("read version: no answer within 30s: %w", context.DeadlineExceeded), activities.Fault{Timeout: true}},
		{"network timeout", &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}, activities.Fault{Timeout: true}},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, activities.Fault{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.cluster.FailNext("Version", tt.err)

			err := f.run(t, f.acts.Version, nil)

			fault, ok := activities.FaultOf(err)
			require.True(t, ok)
			assert.Equal(t, tt.want, fault)
		})
	}
}

func TestErrors_taskFailureCarriesNoFault(t *testing.T) {
	_, ok := activities.FaultOf(temporal.NewNonRetryableApplicationError("clone failed", activities.ErrTaskFailed, nil, string(pve.Transient)))

	assert.False(t, ok)
}

// timeoutErr is a network error that timed out, as a dial that got no answer is.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func apiErr(status int, msg string) *pve.APIError {
	return &pve.APIError{Status: status, Reason: msg, Message: msg}
}

func TestErrors_aFailedCallNamesItsStepOnce(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"the client's error names its call", &pve.CallError{Op: "version", Err: apiErr(500, "proxy loop")}, "version: proxmox api: 500 proxy loop"},
		{"any other error gets the step", apiErr(500, "proxy loop"), "read version: proxmox api: 500 proxy loop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.cluster.FailNext("Version", tt.err)

			err := f.run(t, f.acts.Version, nil)

			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr)
			assert.Equal(t, tt.want, appErr.Message())
		})
	}
}

// A wait given no expectation expects what the worker saw the last tasks of its kind take: its
// next look comes at nine tenths of that, not a poll interval later.
func TestTaskStatus_aWaitWithoutAnExpectationLooksWhenTheLastTasksOfItsKindEnded(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"resize": 400 * time.Millisecond} })
	poll := config.Default().Poll
	f.clone(t)
	resize := func() activities.TaskStatusRequest {
		var upid pve.UPID
		require.NoError(t, f.run(t, f.acts.Resize, &upid, activities.ResizeRequest{
			VMRef: activities.VMRef{Node: "pve1", VMID: newVMID}, Disk: "scsi0", Size: "+1G"}))
		return activities.TaskStatusRequest{UPID: upid, Pace: &activities.Pace{Since: f.clock.Now(), Poll: poll}}
	}
	first := resize()
	err := f.run(t, f.acts.TaskStatus, nil, first)
	assert.Equal(t, time.Second, appError(t, err).NextRetryDelay(), "with no resize seen yet, the poll's first interval")
	f.clock.Advance(500 * time.Millisecond)
	require.NoError(t, f.run(t, f.acts.TaskStatus, nil, first))

	err = f.run(t, f.acts.TaskStatus, nil, resize())

	assert.Equal(t, 450*time.Millisecond, appError(t, err).NextRetryDelay(), "nine tenths of the 500 ms the last resize's wait saw")
}

// A wait whose workflow expects an end (a clone's, from its admission) keeps that expectation,
// whatever the worker saw the last tasks of its kind take.
func TestTaskStatus_anExpectationGivenIsKept(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 600 * time.Millisecond} })
	poll := config.Default().Poll
	clone := func(vmid int, expected time.Duration) activities.TaskStatusRequest {
		var upid pve.UPID
		require.NoError(t, f.run(t, f.acts.Clone, &upid, activities.CloneRequest{
			Node: "pve1", TemplateVMID: template, Params: pve.CloneParams{NewID: vmid, Name: fmt.Sprintf("proxy-%d", vmid), Full: true},
		}))
		return activities.TaskStatusRequest{UPID: upid, Pace: &activities.Pace{Since: f.clock.Now(), Poll: poll, Expected: expected}}
	}
	seen := clone(newVMID, 0)
	f.clock.Advance(600 * time.Millisecond)
	require.NoError(t, f.run(t, f.acts.TaskStatus, nil, seen))

	err := f.run(t, f.acts.TaskStatus, nil, clone(newVMID+1, 400*time.Millisecond))

	assert.Equal(t, 360*time.Millisecond, appError(t, err).NextRetryDelay(), "nine tenths of the 400 ms given, not of the 600 ms seen")
}

// Near its expected end a task's looks are made by one attempt, in the worker, where each would
// otherwise wait for Temporal's retry timer and dispatch: the look that sees the end comes within
// a fortieth of the expected time, every 25 ms at least.
func TestTaskStatus_looksNearTheExpectedEndAreMadeInOneAttempt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		within time.Duration
		seen   bool
	}{
		{"within LookAgainWithin, the attempt sees the end", activities.DefaultLookAgainWithin, true},
		{"without, the attempt says when to look again", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := pvesim.Default()
			opts.TaskDurations = map[string]time.Duration{"resize": 300 * time.Millisecond}
			cluster := pvesim.New(opts)
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestActivityEnvironment()
			acts := &activities.Activities{API: cluster, Proxmox: config.Default().Proxmox, LookAgainWithin: tc.within}
			env.RegisterActivity(acts)
			val, err := env.ExecuteActivity(acts.Resize, activities.ResizeRequest{VMRef: activities.VMRef{Node: "pve1", VMID: template}, Disk: "scsi0", Size: "+1G"})
			require.NoError(t, err)
			var upid pve.UPID
			require.NoError(t, val.Get(&upid))
			pace := &activities.Pace{Since: time.Now(), Poll: config.Default().Poll, Expected: 300 * time.Millisecond}

			val, err = env.ExecuteActivity(acts.TaskStatus, activities.TaskStatusRequest{UPID: upid, Pace: pace})

			if !tc.seen {
				assert.Equal(t, 270*time.Millisecond, appError(t, err).NextRetryDelay().Round(10*time.Millisecond))
				return
			}
			require.NoError(t, err)
			var res activities.TaskResult
			require.NoError(t, val.Get(&res))
			// The task started just before the pace's Since, so its end may come a little before
			// 300 ms of the wait; no look comes before nine tenths of the expected time.
			assert.GreaterOrEqual(t, res.Waited, 270*time.Millisecond)
			assert.Less(t, res.Waited, 300*time.Millisecond+100*time.Millisecond, "seen within a look's step and a call of its end")
		})
	}
}
