package pvesim

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestErrors_pve82ModeHasNoMessage(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.PVE82 = true })
	_, err := c.VMConfig(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_vm_missing_pve82", err)
}

func TestErrors_pve82ModeKeepsParameterErrors(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.PVE82 = true })
	_, err := c.StorageStatus(t.Context(), "pve1", "nope")
	assert.Equal(t, &pve.APIError{Status: 400, Reason: "Parameter verification failed.", Errors: map[string]string{"storage": "No such storage."}}, err)
}

func TestErrors_reasonIsFirstLineOfMessage(t *testing.T) {
	err := apiErr(400, "invalid format - format error\nboot.legacy: value does not match the regex pattern\n")
	assert.Equal(t, "invalid format - format error", err.Reason)
	assert.Equal(t, "invalid format - format error\nboot.legacy: value does not match the regex pattern", err.Message)
}

func TestPermissions_deniedPrivilegeIs403(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.DenyPrivileges = []string{"VM.Clone"} })
	_, err := c.Clone(t.Context(), "pve1", tmplID, cloneParams(newID))
	requireFixtureError(t, "err_forbidden", err)
	assert.Equal(t, pve.Permanent, pve.Classify(err))
}

func TestPermissions_cloneWithoutAllocateIsBare403(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.DenyPrivileges = []string{"VM.Allocate"} })
	_, err := c.Clone(t.Context(), "pve1", tmplID, cloneParams(newID))
	requireFixtureError(t, "err_forbidden_bare", err)
}

func TestPermissions_configWriteNeedsPrivilegeOfEachParameter(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.DenyPrivileges = []string{"VM.Config.CPU"} })
	createVM(t, c, clk, newID)

	assert.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"memory": "4096"}))
	err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4"})
	assert.Equal(t, apiErr(403, "Permission check failed (/vms/123456, VM.Config.CPU)"), err)
}

func TestPermissions_resourcesHideVMsWithoutAudit(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.DenyPrivileges = []string{"VM.Audit"} })
	rs, err := c.ClusterResources(t.Context())
	require.NoError(t, err)
	assert.Empty(t, rs)
}

func TestFaults_injectedErrorReturnedOnce(t *testing.T) {
	c, _ := newCluster(t)
	injected := errors.New("boom")
	c.FailNext("Version", injected)

	_, err := c.Version(t.Context())
	assert.Same(t, injected, err)
	_, err = c.Version(t.Context())
	assert.NoError(t, err)
}

func TestFaults_injectedErrorsQueue(t *testing.T) {
	c, _ := newCluster(t)
	c.FailNext("Version", ErrDropConnection)
	c.FailNext("Version", serverErr(transientText))

	_, first := c.Version(t.Context())
	_, second := c.Version(t.Context())
	assert.ErrorIs(t, first, ErrDropConnection)
	requireFixtureError(t, "err_internal_generic", second)
}

func TestFaults_transientRateIsSeeded(t *testing.T) {
	pattern := func(seed int64) []bool {
		c, _ := newCluster(t, func(o *Options) { o.Seed, o.TransientErrorRate = seed, 0.3 })
		var failed []bool
		for range 200 {
			_, err := c.Version(t.Context())
			if err != nil {
				requireFixtureError(t, "err_internal_generic", err)
			}
			failed = append(failed, err != nil)
		}
		return failed
	}
	a, b := pattern(7), pattern(7)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, pattern(8))
	n := 0
	for _, f := range a {
		if f {
			n++
		}
	}
	assert.InDelta(t, 60, n, 30)
}

func TestFaults_dropConnectionRate(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.DropConnectionRate = 1 })
	_, err := c.Version(t.Context())
	assert.ErrorIs(t, err, ErrDropConnection)
	assert.Equal(t, pve.Transient, pve.Classify(err))
}

func TestFaults_unknownNamesPanic(t *testing.T) {
	c, _ := newCluster(t)
	assert.Panics(t, func() { c.FailNext("Clones", errors.New("x")) })
	assert.Panics(t, func() { c.Block("status") })
	assert.Panics(t, func() { c.FailTask("clone", "x") })
}

func TestBlock_holdsCallUntilReleased(t *testing.T) {
	c, _ := newCluster(t)
	release := c.Block("VMStatus")
	done := make(chan error, 1)
	go func() {
		_, err := c.VMStatus(context.Background(), "pve1", tmplID)
		done <- err
	}()

	require.Eventually(t, func() bool { return c.CallCount("VMStatus") == 1 }, 5*time.Second, time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the blocked call returned %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the released call did not return")
	}
	release()
	_, err := c.VMStatus(t.Context(), "pve1", tmplID)
	assert.NoError(t, err, "a released method is not blocked any more")
}

func TestBlock_cancelledContextReturns(t *testing.T) {
	c, _ := newCluster(t)
	defer c.Block("Clone")()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Clone(ctx, "pve1", tmplID, cloneParams(newID))
		done <- err
	}()

	require.Eventually(t, func() bool { return c.CallCount("Clone") == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled call did not return")
	}
	_, exists := vmByID(c, newID)
	assert.False(t, exists)
}

func TestContext_cancelledCallReturnsAtOnce(t *testing.T) {
	c, _ := newCluster(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err := c.Clone(ctx, "pve1", tmplID, cloneParams(newID))
	assert.ErrorIs(t, err, context.Canceled)
	_, err = c.UploadISO(ctx, "pve1", "local", "seed.iso", bytes.NewReader(nil), 0)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, c.Calls())
	_, exists := vmByID(c, newID)
	assert.False(t, exists)
}

func TestCalls_countsPerMethod(t *testing.T) {
	c, _ := newCluster(t)
	for range 3 {
		_, _ = c.VMStatus(t.Context(), "pve1", tmplID)
	}
	_, _ = c.Version(t.Context())

	assert.Equal(t, 3, c.CallCount("VMStatus"))
	assert.Equal(t, 1, c.CallCount("Version"))
	assert.Equal(t, 0, c.CallCount("Clone"))
	assert.Equal(t, Call{Method: "VMStatus", Node: "pve1", VMID: tmplID}, c.Calls()[0])
}

func TestCalls_recordEveryMethodByItsName(t *testing.T) {
	c, _ := newCluster(t)
	ctx := t.Context()
	_, _ = c.Version(ctx)
	_, _ = c.NodeStatus(ctx, "pve1")
	_, _ = c.StorageStatus(ctx, "pve1", "local")
	_, _ = c.ClusterResources(ctx)
	_, _ = c.VMConfig(ctx, "pve1", tmplID)
	_ = c.SetVMConfig(ctx, "pve1", tmplID, pve.VMConfig{})
	_, _ = c.Clone(ctx, "pve1", tmplID, cloneParams(newID))
	_, _ = c.Resize(ctx, "pve1", tmplID, "scsi0", "3G")
	_, _ = c.Start(ctx, "pve1", tmplID)
	_, _ = c.Stop(ctx, "pve1", tmplID)
	_, _ = c.Reboot(ctx, "pve1", tmplID)
	_, _ = c.VMStatus(ctx, "pve1", tmplID)
	_, _ = c.Destroy(ctx, "pve1", tmplID)
	_, _ = c.TaskStatus(ctx, "pve1", "UPID:nonsense")
	_, _ = c.AgentNetworkInterfaces(ctx, "pve1", tmplID)
	_, _ = c.AgentFileRead(ctx, "pve1", tmplID, CloudInitResultPath)
	_, _ = c.UploadISO(ctx, "pve1", "local", "seed.iso", bytes.NewReader(nil), 0)
	_, _ = c.DeleteVolume(ctx, "pve1", "local", "iso/seed.iso")
	_, _ = c.StorageContent(ctx, "pve1", "local", "iso")
	_, _ = c.TaskLog(ctx, "pve1", "UPID:nonsense")
	_, _ = c.Permissions(ctx, "/")
	_, _ = c.Migrate(ctx, "pve1", tmplID, pve.MigrateParams{Target: "pve2"})
	_, _ = c.HAManagerStatus(ctx)
	_, _ = c.SDNVnets(ctx)
	_, _ = c.NodeTasks(ctx, "pve1", pve.TaskListParams{})
	_ = c.AddHAResource(ctx, pve.HAResourceParams{SID: "vm:9000"})
	_ = c.DeleteHAResource(ctx, "vm:9000")

	seen := make(map[string]bool)
	for _, rec := range c.Calls() {
		seen[rec.Method] = true
	}
	assert.Equal(t, apiMethods, seen)
}

func TestNew_panicsOnImpossibleSetup(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Options)
	}{
		{"duplicate VMID", func(o *Options) { o.VMs = append(o.VMs, VM{Node: "pve2", VMID: tmplID}) }},
		{"unknown node", func(o *Options) { o.VMs = append(o.VMs, VM{Node: "pve9", VMID: 100}) }},
		{"duplicate node", func(o *Options) { o.Nodes = append(o.Nodes, Node{Name: "pve1"}) }},
		{"disk on unknown storage", func(o *Options) {
			o.VMs = append(o.VMs, VM{Node: "pve1", VMID: 100, Config: pve.VMConfig{"scsi0": "tank:vm-100-disk-0,size=1G"}})
		}},
		{"unknown task type", func(o *Options) { o.TaskDurations = map[string]time.Duration{"clone": time.Second} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Panics(t, func() { newCluster(t, tt.edit) })
		})
	}
}

func TestAddVM_refusesUsedVMID(t *testing.T) {
	c, _ := newCluster(t)
	err := c.AddVM(VM{Node: "pve2", VMID: tmplID})
	assert.EqualError(t, err, "pvesim: add VM 9000: VMID in use on node pve1")
}
