package workflows_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

func firstVMID(w *world) int { return proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0) }

func TestCreate_returnsRunningVMWithIPv4(t *testing.T) {
	w := newWorld(t)

	res, err := w.create(createInput())

	require.NoError(t, err)
	name := proxy.NameFromUID(uid)
	assert.Equal(t, firstVMID(w), res.VMID)
	assert.Equal(t, "pve1", res.Node)
	assert.Equal(t, name, res.Name)
	assert.Equal(t, proxy.FormatProviderID(res.VMID, name), res.ProviderID)
	assert.NotEmpty(t, res.IPv4)
	assert.False(t, res.CreatedAt.IsZero())
	vms := w.vms()
	require.Len(t, vms, 1)
	assert.True(t, vms[0].Running)
}

func TestCreate_configSetsCoresMemoryAgentTagAndSeed(t *testing.T) {
	w := newWorld(t)
	res, err := w.create(createInput())
	require.NoError(t, err)

	cfg := vmConfig(t, w, res.VMID)
	assert.Equal(t, "2", cfg["cores"])
	assert.Equal(t, "2048", cfg["memory"])
	assert.Equal(t, "1", cfg["agent"])
	assert.Equal(t, proxy.Tag, cfg["tags"])
	assert.Equal(t, "1", cfg["onboot"])
}

func TestCreate_seedGoneAfterFirstBootAndARebootKeepsTheInstance(t *testing.T) {
	w := newWorld(t)
	res, err := w.create(createInput())
	require.NoError(t, err)
	assert.Equal(t, "none,media=cdrom", vmConfig(t, w, res.VMID)["ide2"])
	assert.Empty(t, w.isos())

	upid, err := w.cluster.Reboot(t.Context(), res.Node, res.VMID)
	require.NoError(t, err)
	w.advance(time.Second)

	st, err := w.cluster.TaskStatus(t.Context(), res.Node, upid)
	require.NoError(t, err)
	require.Equal(t, "OK", st.ExitStatus)
	iid, newInstances, _ := w.cluster.CloudInit(res.VMID)
	assert.Equal(t, uid, iid)
	assert.Equal(t, 1, newInstances, "the guest's cloud-init ran again")
}

// withSharedISOStorage gives every node the shared ISO storage "isos".
func withSharedISOStorage(o *pvesim.Options) {
	for i := range o.Nodes {
		o.Nodes[i].Storages = append(o.Nodes[i].Storages, pvesim.Storage{ID: "isos", Type: "nfs", Content: "iso", Shared: true, Total: 10 << 30})
	}
}

func TestCreate_seedStaysOnSharedISOStorage(t *testing.T) {
	w := newWorld(t, withSharedISOStorage)
	w.cfg.Proxmox.ISOStorage = "isos"

	res, err := w.create(createInput())

	require.NoError(t, err)
	seed := proxy.SeedVolID("isos", res.Name)
	assert.Equal(t, seed+",media=cdrom", vmConfig(t, w, res.VMID)["ide2"])
	assert.Contains(t, w.isos(), seed)
}

func TestCreate_markWrittenInCloneCall(t *testing.T) {
	w := newWorld(t)
	res, err := w.create(createInput())
	require.NoError(t, err)

	mark, managed := proxy.ParseDescription(vmConfig(t, w, res.VMID)["description"])
	assert.True(t, managed)
	assert.Equal(t, uid, mark.UID)
	assert.Equal(t, res.CreatedAt, mark.CreatedAt)
}

func TestCreate_repeatReturnsSameIDAndCreatesNothing(t *testing.T) {
	w := newWorld(t)
	first, err := w.create(createInput())
	require.NoError(t, err)

	second, err := w.create(createInput())

	require.NoError(t, err)
	assert.True(t, first.Provisioned)
	assert.False(t, second.Provisioned || second.Restarted, "found running and matching: left alone")
	assert.Empty(t, second.Changed)
	second.Provisioned, second.Restarted = true, true
	assert.Equal(t, first, second, "the same VM")
	assert.Equal(t, 1, w.cluster.CallCount("Clone"))
	assert.Len(t, w.vms(), 1)
	assert.Empty(t, w.isos(), "the seed released by the first")
}

func TestCreate_aRunMadeAgainAfterItsWorkerDiedAnswersThatItProvisioned(t *testing.T) {
	w := newWorld(t)
	first, err := w.create(createInput())
	require.NoError(t, err)
	w.sameRunAgain()

	again, err := w.create(createInput())

	require.NoError(t, err)
	assert.True(t, again.Provisioned, "the run provisioned the VM before its worker died")
	assert.True(t, again.Restarted, "and started it")
	assert.Empty(t, again.Changed)
	assert.Equal(t, first.VMID, again.VMID)
	assert.Equal(t, 1, w.cluster.CallCount("Start"), "the VM is not started again")
	assert.Equal(t, 1, w.cluster.CallCount("Clone"))
}

func TestCreate_resumesStoppedVMFromSeedStep(t *testing.T) {
	w := newWorld(t)
	first, err := w.create(createInput())
	require.NoError(t, err)
	// An earlier run stopped after its clone: the VM is ours, stopped, not configured.
	_, err = w.delete(proxyvm.DeleteProxyInput{UID: uid})
	require.NoError(t, err)
	vmid := firstVMID(w)
	require.NoError(t, w.cluster.AddVM(pvesim.VM{Node: "pve1", VMID: vmid, Config: pve.VMConfig{
		"name":        first.Name,
		"description": proxy.FormatDescription(proxy.Mark{UID: uid, CreatedAt: first.CreatedAt}),
		"scsi0":       "local-lvm:vm-" + itoa(vmid) + "-disk-0,size=3G",
		"boot":        "order=scsi0",
		"net0":        "virtio=BC:24:11:00:00:01,bridge=vmbr0",
	}}))
	clones := w.cluster.CallCount("Clone")

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, vmid, res.VMID)
	assert.Equal(t, first.CreatedAt, res.CreatedAt, "created-at comes from the mark")
	assert.Equal(t, clones, w.cluster.CallCount("Clone"), "no new clone")
	assert.Equal(t, "1", vmConfig(t, w, vmid)["agent"])
}

func TestCreate_rejectsUnknownPlacementBeforeAnyCall(t *testing.T) {
	tests := map[string]func(*proxyvm.ProxySpec){
		"image":        func(in *proxyvm.ProxySpec) { in.Image = "windows" },
		"machine type": func(in *proxyvm.ProxySpec) { in.MachineType = "huge" },
		"zone":         func(in *proxyvm.ProxySpec) { in.Zone = "pve9" },
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			in := createInput()
			change(&in)

			_, err := w.create(in)

			assert.Equal(t, core.FailPermanent, failureType(t, err))
			assert.Empty(t, w.cluster.Calls())
		})
	}
}

func TestCreate_refusesANameThatIsNotADNSLabelBeforeAnyCall(t *testing.T) {
	for _, name := range []string{"egress.eu-1", "egress_1", "-egress", strings.Repeat("a", 64)} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			in := createInput()
			in.Name = name

			_, err := w.create(in)

			assert.Equal(t, core.FailPermanent, failureType(t, err))
			assert.ErrorContains(t, err, "is not a DNS label")
			assert.Empty(t, w.cluster.Calls())
		})
	}
}

func TestCreate_aNameWithUpperCaseIsFoundAndDeletedByItsProviderID(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.Name = "Egress-EU-1"
	created, err := w.create(in)
	require.NoError(t, err)
	require.Equal(t, proxy.FormatProviderID(created.VMID, "Egress-EU-1"), created.ProviderID)

	got, err := w.get(proxyvm.GetProxyInput{ProviderID: created.ProviderID})
	require.NoError(t, err)
	assert.Equal(t, created.VMID, got.VMID)
	_, err = w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Empty(t, w.vms())
	assert.Empty(t, w.isos())
}

func TestCreate_regionIgnored(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.Region = "eu-west"
	_, err := w.create(in)
	require.NoError(t, err)
}

func TestCreate_foreignVMWithOurNameIsPermanent(t *testing.T) {
	tests := map[string]string{
		"unmarked":        "a VM someone made by hand",
		"other proxy UID": proxy.FormatDescription(proxy.Mark{UID: "another-uid", CreatedAt: time.Now()}),
	}
	for name, description := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			require.NoError(t, w.cluster.AddVM(pvesim.VM{Node: "pve1", VMID: 4242, Config: pve.VMConfig{
				"name": proxy.NameFromUID(uid), "description": description,
			}}))

			_, err := w.create(createInput())

			assert.Equal(t, core.FailPermanent, failureType(t, err))
			assert.Contains(t, err.Error(), "4242")
			assert.Zero(t, w.cluster.CallCount("Clone"))
		})
	}
}

func TestCreate_twoVMsWithOurMarkIsPermanent(t *testing.T) {
	w := newWorld(t)
	mark := proxy.FormatDescription(proxy.Mark{UID: uid, CreatedAt: time.Now()})
	for _, vmid := range []int{4242, 4243} {
		require.NoError(t, w.cluster.AddVM(pvesim.VM{Node: "pve1", VMID: vmid, Config: pve.VMConfig{"name": proxy.NameFromUID(uid), "description": mark}}))
	}

	_, err := w.create(createInput())

	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "4242")
	assert.Contains(t, err.Error(), "4243")
}

func TestCreate_vmidCollisionProbesForward(t *testing.T) {
	tests := map[string]string{
		"same node":  "pve1", // refused at once: config file already exists
		"other node": "pve2", // the clone task fails: File exists
	}
	for name, node := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			require.NoError(t, w.cluster.AddVM(pvesim.VM{Node: node, VMID: firstVMID(w), Config: pve.VMConfig{"name": "someone-else"}}))

			res, err := w.create(createInput())

			require.NoError(t, err)
			assert.Equal(t, proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 1), res.VMID)
			assert.Len(t, w.vms(), 2)
		})
	}
}

func TestCreate_waitsForCloneLockOnRetry(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Minute} })
	// An earlier run's clone is still copying disks: only PVE's temporary config exists.
	_, err := w.cluster.Clone(t.Context(), "pve1", 9000, pve.CloneParams{
		NewID: firstVMID(w), Name: proxy.NameFromUID(uid), Full: true,
		Description: proxy.FormatDescription(proxy.Mark{UID: uid, CreatedAt: time.Now().UTC().Truncate(time.Second)}),
	})
	require.NoError(t, err)

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, firstVMID(w), res.VMID)
	assert.Equal(t, 1, w.cluster.CallCount("Clone"), "the earlier run's clone was waited for, not repeated")
	assert.Len(t, w.vms(), 1)
}

func TestCreate_cloneTaskFailureIsTransient(t *testing.T) {
	w := newWorld(t)
	w.cluster.FailTask("qmclone", "clone failed: command '/usr/bin/qemu-img convert' failed: exit code 1")

	_, err := w.create(createInput())

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "qemu-img convert")
	assert.Empty(t, w.vms(), "PVE removes a failed clone")
}

func TestCreate_noSpaceIsQuotaExceeded(t *testing.T) {
	w := newWorld(t)
	w.cluster.FailTask("qmclone", "clone failed: not enough free space (1073741824 < 3221225472)")

	_, err := w.create(createInput())

	assert.Equal(t, core.FailQuotaExceeded, failureType(t, err))
}

func TestCreate_cloneTaskTimeoutIsTransient(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.StallClones = true })

	_, err := w.create(createInput())

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "did not finish within its budget")
	assert.Contains(t, err.Error(), "still running")
}

func TestCreate_templateMissingIsPermanent(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.Templates["debian13"] = config.Template{VMID: 9999}

	_, err := w.create(createInput())

	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "template 9999")
}

func TestCreate_seedUploadedBeforeConfig(t *testing.T) {
	w := newWorld(t)
	_, err := w.create(createInput())
	require.NoError(t, err)

	var order []string
	for _, c := range w.cluster.Calls() {
		if c.Method == "UploadISO" || c.Method == "SetVMConfig" || c.Method == "Start" {
			order = append(order, c.Method)
		}
	}
	// The last write ejects the seed once the guest consumed it.
	assert.Equal(t, []string{"UploadISO", "SetVMConfig", "Start", "SetVMConfig"}, order)
}

func TestCreate_bridgeOverrideKeepsMAC(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.Bridge = "vmbr7"
	res, err := w.create(createInput())
	require.NoError(t, err)

	net0 := vmConfig(t, w, res.VMID)["net0"]
	assert.Contains(t, net0, "bridge=vmbr7")
	assert.Regexp(t, `^virtio=BC:24:11:[0-9A-F:]{8},`, net0)
}

func TestCreate_noBridgeOverrideLeavesNet0(t *testing.T) {
	w := newWorld(t)
	res, err := w.create(createInput())
	require.NoError(t, err)
	assert.Contains(t, vmConfig(t, w, res.VMID)["net0"], "bridge=vmbr0", "the template's bridge")
}

func TestCreate_resizeOnlyWhenLarger(t *testing.T) {
	tests := []struct {
		diskGiB     int64
		wantResizes int
		wantSize    string
	}{
		{diskGiB: 10, wantResizes: 1, wantSize: "size=10G"},
		{diskGiB: 3, wantResizes: 0, wantSize: "size=3G"},
		{diskGiB: 0, wantResizes: 0, wantSize: "size=3G"},
	}
	for _, tt := range tests {
		t.Run(itoa(int(tt.diskGiB)), func(t *testing.T) {
			w := newWorld(t)
			w.cfg.Proxmox.MachineTypes["small"] = config.MachineType{Cores: 2, MemoryMiB: 2048, DiskGiB: tt.diskGiB}

			res, err := w.create(createInput())

			require.NoError(t, err)
			assert.Equal(t, tt.wantResizes, w.cluster.CallCount("Resize"))
			assert.Contains(t, vmConfig(t, w, res.VMID)["scsi0"], tt.wantSize)
		})
	}
}

func TestCreate_startTaskFailureIsTransient(t *testing.T) {
	w := newWorld(t)
	w.cluster.FailTask("qmstart", "start failed: QEMU exited with code 1")

	_, err := w.create(createInput())

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "QEMU exited with code 1")
}

func TestCreate_waitsOutAStartTaskThatFailsOnABackupLock(t *testing.T) {
	w := newWorld(t)
	// PVE checks the lock inside the start task: the call was taken, its task failed.
	w.cluster.FailTask("qmstart", "VM is locked (backup)")
	w.cluster.FailTask("qmstart", "VM is locked (backup)")

	_, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, 3, w.cluster.CallCount("Start"))
	require.Len(t, w.vms(), 1)
	assert.True(t, w.vms()[0].Running)
}

func TestCreate_waitsOutAResizeTaskThatFailsOnABackupLock(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.MachineTypes["small"] = config.MachineType{Cores: 2, MemoryMiB: 2048, DiskGiB: 10}
	w.cluster.FailTask("resize", "VM is locked (backup)")

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, 2, w.cluster.CallCount("Resize"))
	assert.Contains(t, vmConfig(t, w, res.VMID)["scsi0"], "size=10G")
}

func TestCreate_aStartTaskLockedBeyondTheUnlockBudgetIsTransient(t *testing.T) {
	w := newWorld(t)
	w.cfg.Budgets.Unlock = 30 * time.Second
	for range 100 {
		w.cluster.FailTask("qmstart", "VM is locked (backup)")
	}

	_, err := w.create(createInput())

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.ErrorContains(t, err, "VM is locked (backup)")
	assert.Less(t, w.cluster.CallCount("Start"), 100, "the unlock budget ended the retries")
}

func TestCreate_agentWaitCapIsTransient(t *testing.T) {
	w := newWorld(t)
	w.cluster.StallAgent(firstVMID(w))

	_, err := w.create(createInput())

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "guest agent")
}

func TestCreate_cloudInitSentinelNeverLoggedOrInErrors(t *testing.T) {
	const sentinel = "s3cr3t-sentinel-d41d8cd98f00"
	in := createInput()
	in.UserData = "#cloud-config\npassword: " + sentinel + "\n"
	for name, fault := range map[string]func(*world){
		"success":     func(*world) {},
		"clone fails": func(w *world) { w.cluster.FailTask("qmclone", "clone failed: boom") },
		"upload fails": func(w *world) {
			w.cluster.FailNext("UploadISO", &pve.APIError{Status: 500, Reason: "upload failed", Message: "upload failed"})
		},
		"config fails": func(w *world) {
			w.cluster.FailNext("SetVMConfig", &pve.APIError{Status: 403, Reason: "Permission check failed", Message: "Permission check failed"})
		},
		"start fails": func(w *world) { w.cluster.FailTask("qmstart", "start failed") },
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			fault(w)

			res, err := w.create(in)

			if err != nil {
				assert.NotContains(t, err.Error(), sentinel)
			}
			assert.NotContains(t, res.ProviderID+res.IPv4+res.Name, sentinel)
			assert.NotContains(t, w.log.String(), sentinel)
		})
	}
}

func TestCreate_statusQueryShowsWhereItWaits(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 5 * time.Minute} })
	env := w.env()
	var seen core.Status
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflowByID(core.CreateWorkflowID(uid), core.StatusQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&seen))
	}, 2*time.Minute)

	w.runOp(env, core.CreateProxyName, createInput())

	require.NoError(t, env.GetWorkflowError())
	assert.Equal(t, core.PhaseCloning, seen.Phase)
	assert.Equal(t, firstVMID(w), seen.VMID)
	assert.Equal(t, "pve1", seen.Node)
	assert.True(t, strings.HasPrefix(string(seen.UPID), "UPID:pve1:"), "the clone's UPID: %q", seen.UPID)
	assert.Equal(t, 1, seen.Attempt)
	assert.Contains(t, seen.Step, "wait for clone")
}

func TestCreate_aVMFoundRunningKeepsItsSeed(t *testing.T) {
	w := newWorld(t)
	first, err := w.create(createInput())
	require.NoError(t, err)
	// The VM as an older pveflow left it: running, its seed attached.
	seed := proxy.SeedVolID("local", first.Name)
	upid, err := w.cluster.UploadISO(t.Context(), first.Node, "local", proxy.SeedISOName(first.Name), strings.NewReader("seed"), 4)
	require.NoError(t, err)
	w.advance(time.Second)
	_, err = w.cluster.TaskStatus(t.Context(), first.Node, upid)
	require.NoError(t, err)
	require.NoError(t, w.cluster.SetVMConfig(t.Context(), first.Node, first.VMID, pve.VMConfig{"ide2": seed + ",media=cdrom"}))

	_, err = w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, seed+",media=cdrom", vmConfig(t, w, first.VMID)["ide2"])
	assert.Contains(t, w.isos(), seed)
}

func TestCreate_onbootOffIsWritten(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.OnBoot = false

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, "0", vmConfig(t, w, res.VMID)["onboot"])
}
