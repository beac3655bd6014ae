package pvesim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestVMConfig_missingVMIsConfigFileDoesNotExist(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*Cluster)
	}{
		{"no such VM", func(*Cluster) {}},
		{"VM on another node", func(c *Cluster) {
			require.NoError(t, c.AddVM(VM{Node: "pve2", VMID: newID, Config: pve.VMConfig{"name": "elsewhere"}}))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newCluster(t)
			tt.setup(c)
			_, err := c.VMConfig(t.Context(), "pve1", newID)
			requireFixtureError(t, "err_vm_missing", err)
			assert.Equal(t, pve.NotFound, pve.Classify(err))
		})
	}
}

func TestVMConfig_unknownNodeIsHostnameLookupFailure(t *testing.T) {
	c, _ := newCluster(t)
	_, err := c.VMConfig(t.Context(), "pve9", tmplID)
	assert.Equal(t, serverErr("hostname lookup 'pve9' failed - failed to get address info for: pve9: Name or service not known"), err)
}

func TestVMConfig_digestChangesWithConfig(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	before, err := c.VMConfig(t.Context(), "pve1", newID)
	require.NoError(t, err)
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4"}))
	after, err := c.VMConfig(t.Context(), "pve1", newID)
	require.NoError(t, err)

	assert.Len(t, before["digest"], 40)
	assert.NotEqual(t, before["digest"], after["digest"])
}

func TestSetVMConfig_lockedIsVMLocked(t *testing.T) {
	c, _ := newCluster(t)
	startClone(t, c, newID)

	err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4"})
	requireFixtureError(t, "err_locked", err)
	assert.Equal(t, pve.Locked, pve.Classify(err))
}

func TestSetVMConfig_writesWhatPveflowSets(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	upload(t, c, clk, "proxy-3k7q2m9x4w8p1r5t-seed.iso", []byte("seed"))

	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{
		"cores":  "4",
		"memory": "4096",
		"agent":  "1",
		"tags":   "proxy_operator",
		"ide2":   "local:iso/proxy-3k7q2m9x4w8p1r5t-seed.iso,media=cdrom",
		"net0":   "virtio=BC:24:11:2E:C5:4A,bridge=vmbr1",
	}))
	vm, _ := vmByID(c, newID)
	assert.Subset(t, vm.Config, pve.VMConfig{
		"cores":  "4",
		"memory": "4096",
		"agent":  "1",
		"tags":   "proxy_operator",
		"ide2":   "local:iso/proxy-3k7q2m9x4w8p1r5t-seed.iso,media=cdrom",
		"net0":   "virtio=BC:24:11:2E:C5:4A,bridge=vmbr1",
	})
}

func TestSetVMConfig_ide2NeedsExistingISO(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"ide2": "local:iso/missing.iso,media=cdrom"})
	assert.Equal(t, serverErr("volume 'local:iso/missing.iso' does not exist"), err)
	err = c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"ide2": "nope:iso/missing.iso,media=cdrom"})
	assert.Equal(t, serverErr("storage 'nope' does not exist"), err)
	vm, _ := vmByID(c, newID)
	assert.NotContains(t, vm.Config, "ide2")
}

func TestSetVMConfig_parameterErrorsNamedPerParameter(t *testing.T) {
	tests := []struct {
		param, value, want string
	}{
		{"cores", "0", "value must have a minimum value of 1"},
		{"cores", "many", "type check ('integer') failed - got 'many'"},
		{"memory", "8", "invalid format - format error\nmemory.current: value must have a minimum value of 16\n"},
		{"agent", "maybe", "invalid format - format error\nagent.enabled: type check ('boolean') failed - got 'maybe'\n"},
		{"name", "proxy_1", "invalid format - value does not look like a valid DNS name\n"},
		{"tags", "-bad", "invalid format - invalid characters in tag\n"},
		{"net0", "bridge=vmbr0", "invalid format - format error\nnet0.model: property is missing and it is not optional\n"},
		{"net1", "virtio,bridge=vmbr1,tag=4095", "invalid format - format error\nnet1.tag: value must have a maximum value of 4094\n"},
		{"net1", "virtio=01:24:11:00:00:01,bridge=vmbr1", "invalid format - format error\nnet1.macaddr: invalid format - value does not look like a valid unicast MAC address\n\n"},
		{"net1", "virtio,bridge=vmbr1,vlan=20", "invalid format - invalid key in comma-separated list property: vlan\n"},
		{"ide2", "media=cdrom", "invalid format - format error\nide2.file: property is missing and it is not optional\n"},
		{"scsi1", "local-lvm:vm-1-disk-1,cache=fast", "invalid format - format error\nscsi1.cache: value 'fast' does not have a value in the enumeration 'none, writethrough, writeback, unsafe, directsync'\n"},
		{"ipconfig0", "gw=192.0.2.1", "invalid format - format error\nipconfig0.ip: missing property required by 'ipconfig0.gw'\n"},
		{"onboot", "yes", "type check ('boolean') failed - got 'yes'"},
		{"hostpci0", "0000:01:00.0", "property is not defined in schema and the schema does not allow additional properties"},
	}
	for _, tt := range tests {
		t.Run(tt.param+"="+tt.value, func(t *testing.T) {
			c, clk := newCluster(t)
			createVM(t, c, clk, newID)
			err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{tt.param: tt.value})
			assert.Equal(t, paramErr(map[string]string{tt.param: tt.want}), err)
		})
	}
}

func TestSetVMConfig_storesPropertyStringsThatPassTheSchema(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	set := pve.VMConfig{"ipconfig0": "ip=192.0.2.10/24,gw=192.0.2.1", "net1": "virtio=BC:24:11:00:00:01,bridge=vmbr1,firewall=yes,tag=4094"}

	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, set))

	vm, _ := vmByID(c, newID)
	assert.Equal(t, set["ipconfig0"], vm.Config["ipconfig0"])
	assert.Equal(t, set["net1"], vm.Config["net1"])
}

func TestSetVMConfig_net0WithoutMACGetsOne(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"net1": "virtio,bridge=vmbr1"}))
	vm, _ := vmByID(c, newID)
	assert.Regexp(t, `^virtio=BC:24:11:[0-9A-F]{2}:[0-9A-F]{2}:[0-9A-F]{2},bridge=vmbr1$`, vm.Config["net1"])
}

func TestSetVMConfig_deleteRemovesKeysAndKeepsDisksAsUnused(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"delete": "vga;scsi0,serial0"}))
	vm, _ := vmByID(c, newID)
	assert.NotContains(t, vm.Config, "vga")
	assert.NotContains(t, vm.Config, "serial0")
	assert.NotContains(t, vm.Config, "scsi0")
	assert.Equal(t, "local-lvm:vm-123456-disk-1", vm.Config["unused0"])
}

func TestSetVMConfig_setAndDeleteSameKeyRefused(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4", "delete": "cores"})
	assert.Equal(t, paramErr(map[string]string{"delete": "you can't use '-cores' and -delete cores' at the same time"}), err)
}

func TestSetVMConfig_staleDigestRefused(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4", "digest": "0000000000000000000000000000000000000000"})
	assert.Equal(t, serverErr("detected modified configuration - file changed by other user? Try again."), err)
}

func TestSetVMConfig_descriptionReadsBackWithNewline(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"description": "a\nb\n\n"}))
	cfg, err := c.VMConfig(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "a\nb\n", cfg["description"])
}

func TestTags_lowerCasedSortedJoined(t *testing.T) {
	tests := []struct{ in, want string }{
		{"proxy_operator", "proxy_operator"},
		{"Foo,bar", "bar;foo"},
		{"b;a a , B", "a;b"},
		{"v1.2+x", "v1.2+x"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			c, clk := newCluster(t)
			createVM(t, c, clk, newID)
			require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"tags": tt.in}))
			st, err := c.VMStatus(t.Context(), "pve1", newID)
			require.NoError(t, err)
			assert.Equal(t, tt.want, st.Tags)
		})
	}
}

func TestStart_whileCloningFailsWithLockTimeout(t *testing.T) {
	c, clk := newCluster(t)
	startClone(t, c, newID)

	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, fixtureExit(t, "task_status_lock_timeout"), finish(t, c, clk, upid).ExitStatus)
}

func TestStart_templateRefused(t *testing.T) {
	c, clk := newCluster(t)
	upid, err := c.Start(t.Context(), "pve1", tmplID)
	require.NoError(t, err)
	assert.Equal(t, fixtureExit(t, "task_status_start_template"), finish(t, c, clk, upid).ExitStatus)
}

func TestStart_runningVMAlreadyRunning(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)

	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "VM 123456 already running", finish(t, c, clk, upid).ExitStatus)
}

func TestStart_deletedISOFailsTask(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	upload(t, c, clk, "seed.iso", []byte("seed"))
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"ide2": "local:iso/seed.iso,media=cdrom"}))
	del, err := c.DeleteVolume(t.Context(), "pve1", "local", "local:iso/seed.iso")
	require.NoError(t, err)
	finish(t, c, clk, del)

	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "volume 'local:iso/seed.iso' does not exist", finish(t, c, clk, upid).ExitStatus)
}

func TestStart_runsWhenTaskEnds(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)

	st, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "stopped", st.Status)
	finish(t, c, clk, upid)
	st, err = c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "running", st.Status)
}

func TestStop_stoppedVMIsOK(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	upid, err := c.Stop(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
}

func TestStop_stopsRunningVM(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)

	upid, err := c.Stop(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
	vm, _ := vmByID(c, newID)
	assert.False(t, vm.Running)
}

func TestReboot_agentSilentForBootDelayAfterTheTask(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.AgentBootDelay = 30 * time.Second })
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	clk.Advance(time.Minute)
	_, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	require.NoError(t, err)

	upid, err := c.Reboot(t.Context(), "pve1", newID)
	require.NoError(t, err)
	info, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	assert.Equal(t, "qmreboot", info.Type)
	assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)

	_, err = c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_agent_not_running", err)
	vm, _ := vmByID(c, newID)
	assert.True(t, vm.Running)
	clk.Advance(30 * time.Second)
	ifaces, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.NotEmpty(t, ifaces)
}

func TestReboot_uptimeStartsAgainWhenTheTaskEnds(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	clk.Advance(time.Hour)
	before, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)

	upid, err := c.Reboot(t.Context(), "pve1", newID)
	require.NoError(t, err)
	finish(t, c, clk, upid)

	after, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "running", after.Status)
	assert.Equal(t, int64(3600), before.Uptime)
	assert.Zero(t, after.Uptime)
	assert.NotEqual(t, before.PID, after.PID, "a new QEMU process")
}

func TestReboot_appliesTheCoresAndMemoryPendingOnARunningVM(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)

	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4", "memory": "4096"}))
	cfg, err := c.VMConfig(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "4", cfg["cores"], "GET config shows the pending value")
	pending, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, 2, pending.CPUs, "the running QEMU keeps its cores")
	assert.Equal(t, int64(2048*mib), pending.MaxMem)

	upid, err := c.Reboot(t.Context(), "pve1", newID)
	require.NoError(t, err)
	finish(t, c, clk, upid)

	applied, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, 4, applied.CPUs)
	assert.Equal(t, int64(4096*mib), applied.MaxMem)
}

func TestStart_runsWithTheConfigsCoresAndMemory(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": "4", "memory": "4096"}))

	startVM(t, c, clk, newID)

	st, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, 4, st.CPUs)
	assert.Equal(t, int64(4096*mib), st.MaxMem)
}

func TestReboot_stoppedVMRefusedBeforeATask(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	tasks := len(c.tasks)

	_, err := c.Reboot(t.Context(), "pve1", newID)

	requireFixtureError(t, "err_reboot_not_running", err)
	assert.Equal(t, pve.NotRunning, pve.Classify(err))
	assert.Len(t, c.tasks, tasks, "no task started")
}

func TestReboot_pausedVMRefused(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	require.NoError(t, c.Pause(newID))

	_, err := c.Reboot(t.Context(), "pve1", newID)

	assert.ErrorContains(t, err, "VM is paused - cannot shutdown")
}

func TestReboot_missingVMIsConfigFileDoesNotExist(t *testing.T) {
	c, _ := newCluster(t)
	_, err := c.Reboot(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_vm_missing", err)
}

func TestReboot_lockedVMFailsTheTask(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	require.NoError(t, c.HoldLock(newID, "backup", time.Hour))
	pid := c.vms[newID].pid

	upid, err := c.Reboot(t.Context(), "pve1", newID)
	require.NoError(t, err)

	st := finish(t, c, clk, upid)
	assert.Equal(t, "VM is locked (backup)", st.ExitStatus)
	assert.Equal(t, pid, c.vms[newID].pid, "the guest runs on, not rebooted")
}

func TestReboot_failTaskLeavesTheGuestRunning(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	pid := c.vms[newID].pid
	c.FailTask("qmreboot", "shutdown failed")

	upid, err := c.Reboot(t.Context(), "pve1", newID)
	require.NoError(t, err)

	assert.Equal(t, "shutdown failed", finish(t, c, clk, upid).ExitStatus)
	vm, _ := vmByID(c, newID)
	assert.True(t, vm.Running)
	assert.Equal(t, pid, c.vms[newID].pid)
}

func TestDestroy_runningRefused(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)

	_, err := c.Destroy(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_destroy_running", err)
}

func TestDestroy_protectedRefused(t *testing.T) {
	c, _ := newCluster(t)
	require.NoError(t, c.AddVM(VM{Node: "pve1", VMID: newID, Config: pve.VMConfig{"protection": "1"}}))

	_, err := c.Destroy(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_destroy_protected", err)
}

func TestDestroy_removesVMAndDisksButNotISOs(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	upload(t, c, clk, "seed.iso", []byte("seed"))
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"ide2": "local:iso/seed.iso,media=cdrom"}))
	require.NotEmpty(t, volumesOf(c, newID))

	upid, err := c.Destroy(t.Context(), "pve1", newID)
	require.NoError(t, err)
	vm, _ := vmByID(c, newID)
	assert.Equal(t, "destroyed", vm.Config["lock"], "destroy locks the VM while it runs")
	assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)

	_, exists := vmByID(c, newID)
	assert.False(t, exists)
	assert.Empty(t, volumesOf(c, newID))
	assert.Equal(t, []string{"local:iso/seed.iso"}, isoNames(c))
}

func TestDestroy_whileCloningFailsWithLockTimeout(t *testing.T) {
	c, clk := newCluster(t)
	startClone(t, c, newID)

	upid, err := c.Destroy(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, fixtureExit(t, "task_status_lock_timeout"), finish(t, c, clk, upid).ExitStatus)
	_, exists := vmByID(c, newID)
	assert.True(t, exists)
}

func TestResize_isATask(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	upid, err := c.Resize(t.Context(), "pve1", newID, "scsi0", "20G")
	require.NoError(t, err)
	info, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	assert.Equal(t, "resize", info.Type)
	assert.Equal(t, "123456", info.ID)
	vm, _ := vmByID(c, newID)
	assert.Equal(t, "local-lvm:vm-123456-disk-1,size=3G", vm.Config["scsi0"], "the disk grows when the task ends")

	assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
	vm, _ = vmByID(c, newID)
	assert.Equal(t, "local-lvm:vm-123456-disk-1,size=20G", vm.Config["scsi0"])
}

func TestResize_relativeSizeGrows(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	upid, err := c.Resize(t.Context(), "pve1", newID, "scsi0", "+512M")
	require.NoError(t, err)
	finish(t, c, clk, upid)
	vm, _ := vmByID(c, newID)
	assert.Equal(t, "local-lvm:vm-123456-disk-1,size=3584M", vm.Config["scsi0"])
}

func TestResize_shrinkFails(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	upid, err := c.Resize(t.Context(), "pve1", newID, "scsi0", "2G")
	require.NoError(t, err)
	assert.Equal(t, fixtureExit(t, "task_status_resize_shrink"), finish(t, c, clk, upid).ExitStatus)
}

func TestResize_sameSizeIsNoOp(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	before, _ := vmByID(c, newID)

	upid, err := c.Resize(t.Context(), "pve1", newID, "scsi0", "3G")
	require.NoError(t, err)
	assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
	after, _ := vmByID(c, newID)
	assert.Equal(t, before, after)
}

func TestResize_refusals(t *testing.T) {
	tests := []struct {
		name, disk, size string
		wantSync         error
		wantExit         string
	}{
		{"bad size", "scsi0", "20 GB", paramErr(map[string]string{"size": "value does not match the regex pattern"}), ""},
		{"missing disk", "scsi5", "20G", nil, "disk 'scsi5' does not exist"},
		{"cdrom", "ide2", "20G", nil, "you can't resize a cdrom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newCluster(t)
			createVM(t, c, clk, newID)
			require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"ide2": "none,media=cdrom"}))
			upid, err := c.Resize(t.Context(), "pve1", newID, tt.disk, tt.size)
			if tt.wantSync != nil {
				assert.Equal(t, tt.wantSync, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantExit, finish(t, c, clk, upid).ExitStatus)
		})
	}
}

func TestVMStatus_runningVM(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"tags": "proxy_operator"}))
	startVM(t, c, clk, newID)
	clk.Advance(97 * time.Second)

	st, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.NotZero(t, st.PID)
	st.PID = 0
	assert.Equal(t, pve.VMStatus{
		VMID: newID, Status: "running", QMPStatus: "running", Name: "proxy-3k7q2m9x4w8p1r5t",
		Tags: "proxy_operator", Agent: true, CPUs: 2, MaxMem: 2 << 30, MaxDisk: 3 << 30, Uptime: 97,
	}, st)
}

func TestVMStatus_unnamedVMIsNamedAfterVMID(t *testing.T) {
	c, _ := newCluster(t)
	startClone(t, c, newID)

	st, err := c.VMStatus(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "VM 123456", st.Name)
	assert.Equal(t, "clone", st.Lock)
}
