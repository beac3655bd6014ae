package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// createdAt is the time in the marks of the proxy VMs these tests put on the cluster.
var createdAt = time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC)

// proxyVM is the VM of proxy uid at its home VMID on pve1, as a create leaves it: named, marked,
// tagged, with a NIC and the guest agent on; running when running is set.
func proxyVM(w *world, uid string, running bool) pvesim.VM {
	return pvesim.VM{Node: "pve1", VMID: proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0), Running: running, Config: pve.VMConfig{
		"name":        proxy.NameFromUID(uid),
		"description": proxy.FormatDescription(proxy.Mark{UID: uid, CreatedAt: createdAt}),
		"tags":        proxy.Tag,
		"net0":        "virtio=BC:24:11:AA:00:01,bridge=vmbr0",
		"agent":       "1",
	}}
}

func (w *world) add(vms ...pvesim.VM) {
	w.t.Helper()
	for _, v := range vms {
		require.NoError(w.t, w.cluster.AddVM(v))
	}
}

func (w *world) get(in proxyvm.GetProxyInput) (proxyvm.GetProxyResult, error) {
	env := w.env()
	env.ExecuteWorkflow(core.GetProxyName, in)
	require.True(w.t, env.IsWorkflowCompleted())
	var res proxyvm.GetProxyResult
	if err := env.GetWorkflowError(); err != nil {
		return res, err
	}
	require.NoError(w.t, env.GetWorkflowResult(&res))
	return res, nil
}

// byUID and byProviderID are the two ways to ask for the proxy uid, whose home VMID is in w.
func byUID() proxyvm.GetProxyInput { return proxyvm.GetProxyInput{UID: uid} }

func byProviderID(w *world) proxyvm.GetProxyInput {
	return proxyvm.GetProxyInput{ProviderID: proxy.FormatProviderID(proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0), proxy.NameFromUID(uid))}
}

// bothWays runs a test by UID and by provider ID.
func bothWays(t *testing.T, test func(t *testing.T, w *world, in func(*world) proxyvm.GetProxyInput)) {
	t.Run("uid", func(t *testing.T) { test(t, newWorld(t), func(*world) proxyvm.GetProxyInput { return byUID() }) })
	t.Run("providerID", func(t *testing.T) { test(t, newWorld(t), byProviderID) })
}

func TestGet_runningWithIPIsRunningInThreeCalls(t *testing.T) {
	bothWays(t, func(t *testing.T, w *world, in func(*world) proxyvm.GetProxyInput) {
		v := proxyVM(w, uid, true)
		w.add(v)

		res, err := w.get(in(w))

		require.NoError(t, err)
		assert.Equal(t, proxy.Running, res.State)
		assert.Regexp(t, `^10\.\d+\.\d+\.\d+$`, res.IPv4)
		assert.Equal(t, proxy.FormatProviderID(v.VMID, proxy.NameFromUID(uid)), res.ProviderID)
		assert.Equal(t, "pve1", res.Node)
		assert.Equal(t, v.VMID, res.VMID)
		assert.Len(t, w.cluster.Calls(), 3, "cluster resources, config, agent: %v", w.cluster.Calls())
	})
}

func TestGet_readsUIDAndCreatedAtFromTheMark(t *testing.T) {
	w := newWorld(t)
	w.add(proxyVM(w, uid, false))

	res, err := w.get(byProviderID(w))

	require.NoError(t, err)
	assert.Equal(t, uid, res.UID)
	assert.Equal(t, createdAt, res.CreatedAt)
}

func TestGet_missingVMIsNotFound(t *testing.T) {
	bothWays(t, func(t *testing.T, w *world, in func(*world) proxyvm.GetProxyInput) {
		got, err := w.get(in(w))

		require.NoError(t, err)
		assert.NotEmpty(t, got.NotFound)
	})
}

func TestGet_nameMismatchIsNotFound(t *testing.T) {
	w := newWorld(t)
	v := proxyVM(w, uid, true)
	v.Config["name"] = "reused-vmid"
	w.add(v)

	got, err := w.get(byProviderID(w))

	require.NoError(t, err)
	assert.NotEmpty(t, got.NotFound)
	assert.Contains(t, got.NotFound, `named "reused-vmid"`)
}

func TestGet_unmarkedIsNotFound(t *testing.T) {
	bothWays(t, func(t *testing.T, w *world, in func(*world) proxyvm.GetProxyInput) {
		v := proxyVM(w, uid, true)
		delete(v.Config, "description")
		w.add(v)

		got, err := w.get(in(w))

		require.NoError(t, err)
		assert.NotEmpty(t, got.NotFound)
	})
}

func TestGet_anotherProxysMarkIsNotFound(t *testing.T) {
	w := newWorld(t)
	w.add(proxyVM(w, uid, true))
	in := byProviderID(w)
	in.UID = otherUID

	got, err := w.get(in)

	require.NoError(t, err)
	assert.NotEmpty(t, got.NotFound)
	assert.Contains(t, got.NotFound, "carries the mark of proxy")
}

func TestGet_runningWithoutIPIsProvisioning(t *testing.T) {
	w := newWorld(t)
	v := proxyVM(w, uid, true)
	delete(v.Config, "net0") // the guest has only its loopback
	w.add(v)

	res, err := w.get(byUID())

	require.NoError(t, err)
	assert.Equal(t, proxy.Provisioning, res.State)
	assert.Empty(t, res.IPv4)
}

func TestGet_agentNotRunningIsProvisioning(t *testing.T) {
	w := newWorld(t)
	v := proxyVM(w, uid, true)
	w.add(v)
	w.cluster.StallAgent(v.VMID)

	res, err := w.get(byUID())

	require.NoError(t, err)
	assert.Equal(t, proxy.Provisioning, res.State)
	assert.Equal(t, 1, w.cluster.CallCount("AgentNetworkInterfaces"), "a silent agent is an answer, not retried")
	assert.Equal(t, 1, w.cluster.CallCount("VMStatus"), "QEMU's status tells booting from paused")
}

func TestGet_agentOtherErrorIsTransient(t *testing.T) {
	w := newWorld(t)
	w.add(proxyVM(w, uid, true))
	for range 2 {
		w.cluster.FailNext("AgentNetworkInterfaces", &pve.APIError{Status: 500, Reason: "got no worker", Message: "got no worker"})
	}

	_, err := w.get(byUID())

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.ErrorContains(t, err, "got no worker")
}

func TestGet_stoppedIsStopped(t *testing.T) {
	bothWays(t, func(t *testing.T, w *world, in func(*world) proxyvm.GetProxyInput) {
		w.add(proxyVM(w, uid, false))

		res, err := w.get(in(w))

		require.NoError(t, err)
		assert.Equal(t, proxy.Stopped, res.State)
		assert.Zero(t, w.cluster.CallCount("AgentNetworkInterfaces"), "a stopped VM's agent is not asked")
	})
}

func TestGet_pausedIsStopped(t *testing.T) {
	w := newWorld(t)
	v := proxyVM(w, uid, true)
	w.add(v)
	require.NoError(t, w.cluster.Pause(v.VMID))

	res, err := w.get(byUID())

	require.NoError(t, err)
	assert.Equal(t, proxy.Stopped, res.State)
}

func TestGet_unknownStatusIsReadLive(t *testing.T) {
	// The status cache refreshes once an hour, so a VM cloned since the last refresh shows as
	// "unknown", as one on a node that is down does.
	w := newWorld(t, func(o *pvesim.Options) { o.ResourcesLag = time.Hour })
	cloneInProgress(t, w, uid, proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0), "")
	w.advance(time.Minute) // the clone has ended

	res, err := w.get(byProviderID(w))

	require.NoError(t, err)
	assert.Equal(t, proxy.Stopped, res.State)
}

func TestGet_unknownStatusThatCannotBeReadIsTransient(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.ResourcesLag = time.Hour })
	cloneInProgress(t, w, uid, proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0), "")
	w.advance(time.Minute)
	for range 2 { // the read and its one retry
		w.cluster.FailNext("VMStatus", &pve.APIError{Status: 595, Reason: "No route to host"})
	}

	_, err := w.get(byProviderID(w))

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.ErrorContains(t, err, "does not know the status")
}

// Right after a create the status cache still shows the VM as it was before it started: get
// reads it live rather than call it stopped.
func TestGet_rightAfterACreateWithTheCacheLaggingIsRunning(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.ResourcesLag = time.Hour })
	w.advance(time.Hour) // the cache was refreshed before the create, which it has not seen since
	created, err := w.create(createInput())
	require.NoError(t, err)

	res, err := w.get(proxyvm.GetProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Equal(t, proxy.Running, res.State)
	assert.Equal(t, created.IPv4, res.IPv4)
}

func TestGet_lockedIsTransientNeverNotFound(t *testing.T) {
	t.Run("backup", func(t *testing.T) {
		bothWays(t, func(t *testing.T, w *world, in func(*world) proxyvm.GetProxyInput) {
			v := proxyVM(w, uid, true)
			v.Config["lock"] = "backup"
			w.add(v)

			_, err := w.get(in(w))

			assert.Equal(t, core.FailTransient, failureType(t, err))
			assert.ErrorContains(t, err, "locked (backup)")
		})
	})
	t.Run("clone still copying", func(t *testing.T) {
		bothWays(t, func(t *testing.T, w *world, in func(*world) proxyvm.GetProxyInput) {
			cloneInProgress(t, w, uid, proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0), "")

			_, err := w.get(in(w))

			assert.Equal(t, core.FailTransient, failureType(t, err))
			assert.ErrorContains(t, err, "being cloned")
		})
	})
}

func TestGet_malformedInputIsPermanent(t *testing.T) {
	for name, in := range map[string]proxyvm.GetProxyInput{
		"nothing":     {},
		"bad uid":     {UID: "not a uid"},
		"bad ID":      {ProviderID: "vms/12/proxy-x"},
		"not vms/...": {ProviderID: "proxy-x"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)

			_, err := w.get(in)

			assert.Equal(t, core.FailPermanent, failureType(t, err))
			assert.Empty(t, w.cluster.Calls(), "refused before any call")
		})
	}
}

func TestGet_resourcesFailureIsTransient(t *testing.T) {
	w := newWorld(t)
	w.add(proxyVM(w, uid, true))
	for range 2 {
		w.cluster.FailNext("ClusterResources", &pve.APIError{Status: 596, Reason: "Connection timed out"})
	}

	_, err := w.get(byUID())

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.Equal(t, 2, w.cluster.CallCount("ClusterResources"), "one retry, no long wait")
}

func TestGet_twoVMsWithOurMarkIsPermanent(t *testing.T) {
	w := newWorld(t)
	first := proxyVM(w, uid, true)
	second := proxyVM(w, uid, false)
	second.VMID = proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 1)
	second.Config["net0"] = "virtio=BC:24:11:AA:00:02,bridge=vmbr0"
	w.add(first, second)

	_, err := w.get(byUID())

	assert.Equal(t, core.FailPermanent, failureType(t, err))
}

func TestGet_afterCreateRunningAndAfterDeleteNotFound(t *testing.T) {
	w := newWorld(t)
	created, err := w.create(createInput())
	require.NoError(t, err)

	got, err := w.get(proxyvm.GetProxyInput{ProviderID: created.ProviderID})
	require.NoError(t, err)
	assert.Equal(t, proxy.Running, got.State)
	assert.Equal(t, created.IPv4, got.IPv4)
	assert.Equal(t, created.CreatedAt, got.CreatedAt)

	_, err = w.delete(proxyvm.DeleteProxyInput{UID: uid})
	require.NoError(t, err)
	got, err = w.get(byUID())
	require.NoError(t, err)
	assert.NotEmpty(t, got.NotFound)
}

func TestGet_reportsTheMachineTheConfigGivesTheVM(t *testing.T) {
	w := newWorld(t)
	_, err := w.create(createInput())
	require.NoError(t, err)
	vmid := firstVMID(w)
	// Someone resized the VM by hand.
	require.NoError(t, w.cluster.SetVMConfig(t.Context(), "pve1", vmid, pve.VMConfig{"cores": "3", "memory": "3072"}))

	got, err := w.get(byUID())

	require.NoError(t, err)
	assert.Equal(t, 3, got.Cores)
	assert.Equal(t, int64(3072), got.MemoryMiB)
	assert.Equal(t, int64(10), got.DiskGiB, "the machine type's 10 GiB")
}

func TestGet_reportsTheVMsNICs(t *testing.T) {
	w := newWorld(t)
	_, err := w.create(createInput())
	require.NoError(t, err)
	vmid := firstVMID(w)
	require.NoError(t, w.cluster.SetVMConfig(t.Context(), "pve1", vmid, pve.VMConfig{"net1": "virtio,bridge=vmbr1,tag=20"}))
	cfg := vmConfig(t, w, vmid)

	got, err := w.get(byUID())

	require.NoError(t, err)
	assert.Equal(t, pve.VMConfig{"net0": cfg["net0"], "net1": cfg["net1"]}, got.NICs)
}

func TestGet_machineTheConfigDoesNotTellIsZero(t *testing.T) {
	w := newWorld(t)
	v := proxyVM(w, uid, false) // no disk
	v.Config["cores"] = "lots"
	w.add(v)

	got, err := w.get(byUID())

	require.NoError(t, err)
	assert.Zero(t, got.Cores)
	assert.Equal(t, int64(512), got.MemoryMiB, "PVE's default")
	assert.Zero(t, got.DiskGiB)
}
