package workflows_test

import (
	"fmt"
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

// Machine types beside the simulator config's small (2 cores, 2048 MiB, 10 GiB).
var (
	// medium is small with twice the cores and memory.
	medium = config.MachineType{Cores: 4, MemoryMiB: 4096, DiskGiB: 10}
	// bigDisk is small with twice the disk.
	bigDisk = config.MachineType{Cores: 2, MemoryMiB: 2048, DiskGiB: 20}
)

// changeInput changes the proxy of createInput to machine type machineType.
// changeInput is the whole spec of createInput's proxy with another machine type, as its entity
// gives it.
func changeInput(machineType string) proxyvm.ProxySpec {
	return proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: machineType, UserData: createInput().UserData}
}

// changeable is a world with the proxy of createInput created, and the machine types medium and
// bigDisk configured.
func changeable(t *testing.T, change ...func(*pvesim.Options)) (*world, proxyvm.CreateProxyResult) {
	t.Helper()
	w := newWorld(t, change...)
	w.cfg.Proxmox.MachineTypes["medium"] = medium
	w.cfg.Proxmox.MachineTypes["bigDisk"] = bigDisk
	res, err := w.create(createInput())
	require.NoError(t, err)
	return w, res
}

func TestChange_machineTypeSetsCoresAndMemoryAndReboots(t *testing.T) {
	w, vm := changeable(t)

	res, err := w.change(changeInput("medium"))

	require.NoError(t, err)
	assert.Equal(t, []string{"cores 2 -> 4", "memory 2048 -> 4096 MiB"}, res.Changed)
	assert.True(t, res.Restarted)
	assert.Equal(t, vm.VMID, res.VMID)
	assert.Equal(t, vm.Node, res.Node)
	assert.Equal(t, vm.Name, res.Name)
	assert.Equal(t, vm.IPv4, res.IPv4)
	cfg := vmConfig(t, w, vm.VMID)
	assert.Equal(t, "4", cfg["cores"])
	assert.Equal(t, "4096", cfg["memory"])
	assert.Equal(t, 1, w.cluster.CallCount("Reboot"))
	st, err := w.cluster.VMStatus(t.Context(), vm.Node, vm.VMID)
	require.NoError(t, err)
	assert.Equal(t, 4, st.CPUs, "the guest runs with the new cores")
	assert.Equal(t, int64(4096<<20), st.MaxMem)
}

func TestChange_largerDiskGrowsWithoutReboot(t *testing.T) {
	w, vm := changeable(t)

	res, err := w.change(changeInput("bigDisk"))

	require.NoError(t, err)
	assert.Equal(t, []string{"disk scsi0 10G -> 20G"}, res.Changed)
	assert.False(t, res.Restarted)
	assert.Contains(t, vmConfig(t, w, vm.VMID)["scsi0"], "size=20G")
	assert.Zero(t, w.cluster.CallCount("Reboot"))
	assert.Equal(t, 3, w.cluster.CallCount("SetVMConfig"), "the create's (its config and the seed's ejection), and the mark's new machine type")
	mark, _ := proxy.ParseDescription(vmConfig(t, w, vm.VMID)["description"])
	require.NotNil(t, mark.Spec)
	assert.Equal(t, "bigDisk", mark.Spec.MachineType)
}

func TestChange_smallerDiskIsLeftAlone(t *testing.T) {
	w, vm := changeable(t)
	w.cfg.Proxmox.MachineTypes["smallDisk"] = config.MachineType{Cores: 2, MemoryMiB: 2048, DiskGiB: 5}

	res, err := w.change(changeInput("smallDisk"))

	require.NoError(t, err)
	assert.Empty(t, res.Changed)
	assert.Contains(t, vmConfig(t, w, vm.VMID)["scsi0"], "size=10G")
	assert.Equal(t, 1, w.cluster.CallCount("Resize"), "only the create's")
}

func TestChange_matchingRunningVMIsLeftAlone(t *testing.T) {
	w, vm := changeable(t)
	writes := map[string]int{}
	for _, m := range []string{"SetVMConfig", "Resize", "Reboot", "Start", "Stop", "UploadISO", "DeleteVolume"} {
		writes[m] = w.cluster.CallCount(m)
	}

	res, err := w.change(changeInput("small"))

	require.NoError(t, err)
	assert.Empty(t, res.Changed)
	assert.False(t, res.Restarted)
	assert.Equal(t, vm.IPv4, res.IPv4)
	for m, n := range writes {
		assert.Equal(t, n, w.cluster.CallCount(m), "no %s", m)
	}
}

func TestChange_newUserDataMakesANewSeedAndReboots(t *testing.T) {
	w, vm := changeable(t)
	in := changeInput("small")
	in.InstanceID = uid + "-2"
	in.UserData = "#cloud-config\npackages: [squid]\n"

	res, err := w.change(in)

	require.NoError(t, err)
	assert.Equal(t, []string{"user-data (instance-id " + uid + "-2)"}, res.Changed)
	assert.True(t, res.Restarted)
	assert.Equal(t, 1, w.cluster.CallCount("Reboot"))
	assert.Equal(t, in.UserData, seedUserData(t, w))
	assert.Contains(t, seedFile(t, w, "meta-data"), "instance-id: "+uid+"-2\n")
	iid, newInstances, _ := w.cluster.CloudInit(vm.VMID)
	assert.Equal(t, uid+"-2", iid, "the guest's cloud-init took the new seed")
	assert.Equal(t, 2, newInstances)
}

func TestChange_reseedReleasesTheNewSeedOnceTheGuestIsReady(t *testing.T) {
	w, vm := changeable(t)
	in := changeInput("small")
	in.InstanceID, in.UserData = uid+"-2", "#cloud-config\n"

	_, err := w.change(in)

	require.NoError(t, err)
	assert.Equal(t, "none,media=cdrom", vmConfig(t, w, vm.VMID)["ide2"])
	assert.Empty(t, w.isos())
}

func TestChange_reseedKeepsTheSeedAttachedOnTheConfiguredSharedISOStorage(t *testing.T) {
	w, vm := changeable(t, withSharedISOStorage)
	w.cfg.Proxmox.ISOStorage = "isos"
	in := changeInput("small")
	in.InstanceID, in.UserData = uid+"-2", "#cloud-config\n"

	_, err := w.change(in)

	require.NoError(t, err)
	seed := proxy.SeedVolID("isos", proxy.NameFromUID(uid))
	assert.Equal(t, seed+",media=cdrom", vmConfig(t, w, vm.VMID)["ide2"])
	assert.Contains(t, w.isos(), seed)
}

func TestChange_stoppedVMIsStarted(t *testing.T) {
	w, vm := changeable(t)
	_, err := w.cluster.Stop(t.Context(), vm.Node, vm.VMID)
	require.NoError(t, err)
	w.advance(time.Minute)
	starts := w.cluster.CallCount("Start")

	res, err := w.change(changeInput("small"))

	require.NoError(t, err)
	assert.Empty(t, res.Changed)
	assert.True(t, res.Restarted)
	assert.NotEmpty(t, res.IPv4)
	assert.Equal(t, starts+1, w.cluster.CallCount("Start"))
	assert.Zero(t, w.cluster.CallCount("Reboot"))
	v, ok := vmByID(w, vm.VMID)
	require.True(t, ok)
	assert.True(t, v.Running)
}

func TestChange_stoppedVMIsChangedAndStartedWithoutReboot(t *testing.T) {
	w, vm := changeable(t)
	_, err := w.cluster.Stop(t.Context(), vm.Node, vm.VMID)
	require.NoError(t, err)
	w.advance(time.Minute)

	res, err := w.change(changeInput("medium"))

	require.NoError(t, err)
	assert.Equal(t, []string{"cores 2 -> 4", "memory 2048 -> 4096 MiB"}, res.Changed)
	assert.True(t, res.Restarted)
	assert.Zero(t, w.cluster.CallCount("Reboot"))
	assert.Equal(t, "4", vmConfig(t, w, vm.VMID)["cores"])
}

func TestChange_rebootOfAVMThatStoppedMeanwhileStartsIt(t *testing.T) {
	w, vm := changeable(t)
	w.cluster.FailNext("Reboot", &pve.APIError{Status: 500, Reason: "VM " + itoa(vm.VMID) + " not running", Message: "VM " + itoa(vm.VMID) + " not running"})
	starts := w.cluster.CallCount("Start")

	res, err := w.change(changeInput("medium"))

	require.NoError(t, err)
	assert.True(t, res.Restarted)
	assert.Equal(t, starts+1, w.cluster.CallCount("Start"))
}

func TestChange_waitsOutARebootTaskThatFailsOnALock(t *testing.T) {
	w, vm := changeable(t)
	// PVE checks the lock inside the reboot task: the call was taken, its task failed, and the
	// guest still runs with the cores it booted with.
	w.cluster.FailTask("qmreboot", "can't lock file '/var/lock/qemu-server/lock-"+itoa(vm.VMID)+".conf' - got timeout")
	w.cluster.FailTask("qmreboot", "VM is locked (backup)")

	res, err := w.change(changeInput("medium"))

	require.NoError(t, err)
	assert.True(t, res.Restarted)
	assert.Equal(t, 3, w.cluster.CallCount("Reboot"))
	st, err := w.cluster.VMStatus(t.Context(), vm.Node, vm.VMID)
	require.NoError(t, err)
	assert.Equal(t, 4, st.CPUs, "the guest runs with the new cores")
}

func TestChange_noVMIsNotFound(t *testing.T) {
	w := newWorld(t)

	_, err := w.change(changeInput("small"))

	assert.Equal(t, core.FailNotFound, failureType(t, err))
	assert.ErrorContains(t, err, "create the proxy first")
	assert.Zero(t, w.cluster.CallCount("SetVMConfig"))
}

func TestChange_waitsOutABackupLock(t *testing.T) {
	w, vm := changeable(t)
	locked := w.clock.Now()
	require.NoError(t, w.cluster.HoldLock(vm.VMID, "backup", 3*time.Minute))

	res, err := w.change(changeInput("medium"))

	require.NoError(t, err)
	assert.Equal(t, []string{"cores 2 -> 4", "memory 2048 -> 4096 MiB"}, res.Changed)
	assert.GreaterOrEqual(t, w.clock.Now().Sub(locked), 3*time.Minute, "the change waited for the backup")
	assert.Equal(t, "4", vmConfig(t, w, vm.VMID)["cores"])
}

func TestChange_refusesBadInputBeforeAnyCall(t *testing.T) {
	tests := map[string]func(*proxyvm.ProxySpec){
		"invalid UID":              func(in *proxyvm.ProxySpec) { in.UID = "Not A UID" },
		"user-data over the limit": func(in *proxyvm.ProxySpec) { in.UserData = strings.Repeat("x", proxyvm.MaxUserDataBytes+1) },
		"unknown machine type":     func(in *proxyvm.ProxySpec) { in.MachineType = "huge" },
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			in := changeInput("small")
			edit(&in)

			_, err := w.change(in)

			assert.Equal(t, core.FailPermanent, failureType(t, err))
			assert.Empty(t, w.cluster.Calls())
		})
	}
}

// vmByID is the cluster's VM vmid.
func vmByID(w *world, vmid int) (pvesim.VM, bool) {
	for _, v := range w.cluster.VMs() {
		if v.VMID == vmid {
			return v, true
		}
	}
	return pvesim.VM{}, false
}

// withNICs is machine type small with nics.
func withNICs(nics ...config.NIC) config.MachineType {
	mt := config.MachineType{Cores: 2, MemoryMiB: 2048, DiskGiB: 10}
	mt.NICs = nics
	return mt
}

// guestInterface is the interface the guest of VM vmid reports by name, as its agent does.
func guestInterface(t *testing.T, w *world, node string, vmid int, name string) pve.AgentInterface {
	t.Helper()
	ifaces, err := w.cluster.AgentNetworkInterfaces(t.Context(), node, vmid)
	require.NoError(t, err)
	for _, i := range ifaces {
		if i.Name == name {
			return i
		}
	}
	t.Fatalf("the guest of VM %d has no interface %s: %+v", vmid, name, ifaces)
	return pve.AgentInterface{}
}

func TestChangeProxy_toAMachineTypeWithAnotherNICAddsIt(t *testing.T) {
	w, vm := changeable(t)
	w.cfg.Proxmox.MachineTypes["twoNICs"] = withNICs(config.NIC{}, config.NIC{Bridge: "vmbr1", VLAN: 20})
	in := changeInput("twoNICs")
	in.InstanceID, in.UserData = uid+"-2", "#cloud-config\n"

	res, err := w.change(in)

	require.NoError(t, err)
	assert.Equal(t, []string{"net1 added (vmbr1, tag 20)", "user-data (instance-id " + uid + "-2)"}, res.Changed)
	assert.True(t, res.Restarted)
	cfg := vmConfig(t, w, vm.VMID)
	assert.Regexp(t, `^virtio=[0-9A-F:]{17},bridge=vmbr1,tag=20$`, cfg["net1"], "a new NIC with the MAC PVE gave it")
	net1MAC := strings.ToLower(proxy.MACFromNet(cfg["net1"]))
	assert.Contains(t, seedNetworkConfig(t, w), `  net1:
    match:
      macaddress: "`+net1MAC+`"
    set-name: net1
    dhcp4: true
`)
	net1 := guestInterface(t, w, vm.Node, vm.VMID, "net1")
	assert.Equal(t, net1MAC, net1.HardwareAddress)
	assert.Contains(t, fmt.Sprint(net1.IPAddresses), "172.", "the guest configured the new NIC")
	assert.Equal(t, vm.IPv4, res.IPv4, "net0 keeps its address")
}

func TestChangeProxy_aNICToAddWithoutAReseedIsRefusedBeforeAnyWrite(t *testing.T) {
	w, _ := changeable(t)
	w.cfg.Proxmox.MachineTypes["twoNICs"] = withNICs(config.NIC{}, config.NIC{Bridge: "vmbr1", VLAN: 20})
	writes := map[string]int{}
	for _, m := range []string{"SetVMConfig", "Resize", "Reboot", "Start", "Stop", "UploadISO", "DeleteVolume"} {
		writes[m] = w.cluster.CallCount(m)
	}

	_, err := w.change(changeInput("twoNICs"))

	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.ErrorContains(t, err, "net1")
	assert.ErrorContains(t, err, "new instance-id")
	for m, n := range writes {
		assert.Equal(t, n, w.cluster.CallCount(m), "no %s", m)
	}
}

func TestChangeProxy_toAMachineTypeWithoutTheNICRemovesIt(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.MachineTypes["twoNICs"] = withNICs(config.NIC{}, config.NIC{Bridge: "vmbr1", VLAN: 20})
	in := createInput()
	in.MachineType = "twoNICs"
	vm, err := w.create(in)
	require.NoError(t, err)
	net0 := vmConfig(t, w, vm.VMID)["net0"]

	res, err := w.change(changeInput("small"))

	require.NoError(t, err)
	assert.Equal(t, []string{"net1 removed (vmbr1, tag 20)"}, res.Changed)
	cfg := vmConfig(t, w, vm.VMID)
	assert.NotContains(t, cfg, "net1")
	assert.Equal(t, net0, cfg["net0"])
}

func TestChangeProxy_aNICOnAnotherVLANKeepsItsMACAndReboots(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.MachineTypes["twoNICs"] = withNICs(config.NIC{}, config.NIC{Bridge: "vmbr1", VLAN: 20})
	w.cfg.Proxmox.MachineTypes["vlan30"] = withNICs(config.NIC{}, config.NIC{Bridge: "vmbr1", VLAN: 30})
	in := createInput()
	in.MachineType = "twoNICs"
	vm, err := w.create(in)
	require.NoError(t, err)
	mac := proxy.MACFromNet(vmConfig(t, w, vm.VMID)["net1"])

	res, err := w.change(changeInput("vlan30"))

	require.NoError(t, err)
	assert.Equal(t, []string{"net1 (vmbr1, tag 20) -> (vmbr1, tag 30)"}, res.Changed)
	assert.True(t, res.Restarted, "the guest asks DHCP on the NIC's new network as it boots")
	assert.Equal(t, "virtio="+mac+",bridge=vmbr1,tag=30", vmConfig(t, w, vm.VMID)["net1"])
}

// failReboot makes the next reboot call fail as PVE refuses a token without VM.PowerMgmt: the
// change's config write is done, its reboot not, as when its worker dies between the two.
func failReboot(w *world) {
	w.cluster.FailNext("Reboot", &pve.APIError{Status: 403, Reason: "Permission check failed (/vms/100, VM.PowerMgmt)", Message: "Permission check failed"})
}

func TestChange_aChangeWrittenButNotRebootedIsRebootedByTheNextRun(t *testing.T) {
	w, vm := changeable(t)
	failReboot(w)
	_, err := w.change(changeInput("medium"))
	require.Error(t, err)
	st, err := w.cluster.VMStatus(t.Context(), vm.Node, vm.VMID)
	require.NoError(t, err)
	require.Equal(t, 2, st.CPUs, "the guest still runs with its old cores")
	require.Equal(t, "4", vmConfig(t, w, vm.VMID)["cores"], "PVE shows the pending cores in the config")

	res, err := w.change(changeInput("medium"))

	require.NoError(t, err)
	assert.Equal(t, []string{"cores 2 -> 4", "memory 2048 -> 4096 MiB"}, res.Changed, "the answer is the change's")
	assert.True(t, res.Restarted)
	st, err = w.cluster.VMStatus(t.Context(), vm.Node, vm.VMID)
	require.NoError(t, err)
	assert.Equal(t, 4, st.CPUs, "the guest runs with the new cores")
	assert.Equal(t, int64(4096<<20), st.MaxMem)
	mark, _ := proxy.ParseDescription(vmConfig(t, w, vm.VMID)["description"])
	assert.False(t, mark.Op.OwesReboot(), "the reboot ended: nothing is owed")
}

func TestChange_aReseedWrittenButNotRebootedIsRebootedAndReleasedByTheNextRun(t *testing.T) {
	w, vm := changeable(t)
	in := changeInput("small")
	in.InstanceID, in.UserData = uid+"-2", "#cloud-config\npackages: [squid]\n"
	failReboot(w)
	_, err := w.change(in)
	require.Error(t, err)

	res, err := w.change(in)

	require.NoError(t, err)
	assert.Equal(t, []string{"user-data (instance-id " + uid + "-2)"}, res.Changed)
	assert.True(t, res.Restarted)
	iid, _, _ := w.cluster.CloudInit(vm.VMID)
	assert.Equal(t, uid+"-2", iid, "the guest's cloud-init took the new seed")
	assert.Equal(t, "none,media=cdrom", vmConfig(t, w, vm.VMID)["ide2"], "the seed is released once the guest booted from it")
	assert.Empty(t, w.isos())
}

func TestChange_aRunMadeAgainAfterItsWorkerDiedAnswersWhatItChanged(t *testing.T) {
	tests := []struct {
		machineType string
		changed     []string
		restarted   bool
	}{
		{"medium", []string{"cores 2 -> 4", "memory 2048 -> 4096 MiB"}, true},
		{"bigDisk", []string{"disk scsi0 10G -> 20G"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.machineType, func(t *testing.T) {
			w, vm := changeable(t)
			_, err := w.change(changeInput(tt.machineType))
			require.NoError(t, err)
			reboots, resizes := w.cluster.CallCount("Reboot"), w.cluster.CallCount("Resize")
			w.sameRunAgain()

			again, err := w.change(changeInput(tt.machineType))

			require.NoError(t, err)
			assert.Equal(t, tt.changed, again.Changed, "what the run changed before its worker died")
			assert.Equal(t, tt.restarted, again.Restarted)
			assert.Equal(t, reboots, w.cluster.CallCount("Reboot"), "the guest is not rebooted again")
			assert.Equal(t, resizes, w.cluster.CallCount("Resize"), "the disk is not grown again")
			mark, _ := proxy.ParseDescription(vmConfig(t, w, vm.VMID)["description"])
			require.NotNil(t, mark.Op)
			assert.Equal(t, tt.changed, mark.Op.Changed, "the mark records what the change did")
			assert.False(t, mark.Op.OwesReboot())
		})
	}
}

func TestChange_aRebootThatEndedIsNotOwed(t *testing.T) {
	w, vm := changeable(t)
	_, err := w.change(changeInput("medium"))
	require.NoError(t, err)
	reboots := w.cluster.CallCount("Reboot")

	res, err := w.change(changeInput("medium"))

	require.NoError(t, err)
	assert.Empty(t, res.Changed)
	assert.False(t, res.Restarted)
	assert.Equal(t, reboots, w.cluster.CallCount("Reboot"))
	mark, _ := proxy.ParseDescription(vmConfig(t, w, vm.VMID)["description"])
	assert.False(t, mark.Op.OwesReboot())
}
