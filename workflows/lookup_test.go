package workflows_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The tests of what a lookup by UID reads: the config of every VM the list of cluster resources
// cannot rule out, and no other. The list rules out only containers: a VM's name, status and
// template flag there come from pvestatd's cache, which lags.

// probeVMID is the proxy uid's probe VMID of the given attempt in w.
func probeVMID(w *world, attempt int) int {
	return proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, attempt)
}

// configReadsOf counts the config reads of VM vmid.
func configReadsOf(w *world, vmid int) int {
	n := 0
	for _, id := range configReads(w) {
		if id == vmid {
			n++
		}
	}
	return n
}

// withContainerOn puts a container named name on the proxy uid's probe VMID of the given
// attempt.
func withContainerOn(t *testing.T, attempt int, name string) func(*pvesim.Options) {
	vmid := proxy.VMIDFor(uid, testConfig(t).Proxmox.VMIDRange, attempt)
	return func(o *pvesim.Options) {
		o.Containers = append(o.Containers, pvesim.Container{Node: "pve1", VMID: vmid, Name: name})
	}
}

// listed is what cluster resources show of VM vmid.
func listed(t *testing.T, w *world, vmid int) pve.VMResource {
	t.Helper()
	rs, err := w.cluster.ClusterResources(context.Background())
	require.NoError(t, err)
	for _, r := range rs {
		if r.VMID == vmid {
			return r
		}
	}
	t.Fatalf("cluster resources do not list VM %d", vmid)
	return pve.VMResource{}
}

// proxyVMOn is the VM of proxy owner on vmid, as a create leaves it.
func proxyVMOn(w *world, owner string, vmid int) pvesim.VM {
	v := proxyVM(w, owner, false)
	v.VMID = vmid
	v.Config["net0"] = fmt.Sprintf("virtio=BC:24:11:AA:%02X:%02X,bridge=vmbr0", vmid/256%256, vmid%256)
	return v
}

func TestLookup_readsTheConfigOfEveryVMOnAProbeVMIDOrWithTheNameAndNoOther(t *testing.T) {
	w := newWorld(t, withContainerOn(t, 4, "db"))
	w.add(proxyVMOn(w, uid, probeVMID(w, 0)))
	for k := 1; k <= 3; k++ {
		w.add(proxyVMOn(w, fmt.Sprintf("other-%d", k), probeVMID(w, k)))
	}
	elsewhere := probeVMID(w, proxy.MaxProbes+10)
	w.add(proxyVMOn(w, "other-far", elsewhere))
	named := probeVMID(w, proxy.MaxProbes+20)
	w.add(pvesim.VM{Node: "pve1", VMID: named, Config: pve.VMConfig{"name": proxy.NameFromUID(uid)}})
	w.add(pvesim.Template(probeVMID(w, 5), "pve1", 1))

	res, err := w.get(byUID())

	require.NoError(t, err)
	assert.Equal(t, probeVMID(w, 0), res.VMID)
	for k := 0; k <= 3; k++ {
		assert.Equal(t, 1, configReadsOf(w, probeVMID(w, k)), "the VM on probe %d", k)
	}
	assert.Zero(t, configReadsOf(w, probeVMID(w, 4)), "the container on a probe VMID")
	assert.Equal(t, 1, configReadsOf(w, probeVMID(w, 5)), "the template on a probe VMID: the cache's flag may be a destroyed template's")
	assert.Zero(t, configReadsOf(w, elsewhere), "a VM neither on a probe VMID nor with the name")
	assert.Equal(t, 1, configReadsOf(w, named), "the VM with the proxy's name")
	assert.Equal(t, 6, w.cluster.CallCount("VMConfig"))
}

func TestLookup_aContainerOnAProbeVMIDIsTakenWithoutItsConfigRead(t *testing.T) {
	// Named as the proxy, and listed as PVE lists it: its type comes from pmxcfs's vmlist, live.
	w := newWorld(t, withContainerOn(t, 0, proxy.NameFromUID(uid)))

	res, err := w.create(createInput())

	require.NoError(t, err)
	// The simulator would clone onto a container's VMID: only Taken keeps the create off it.
	assert.Equal(t, probeVMID(w, 1), res.VMID)
	assert.Zero(t, configReadsOf(w, probeVMID(w, 0)))
	assert.Equal(t, 1, w.cluster.CallCount("Clone"))
}

func TestLookup_anotherProxysVMOnAProbeVMIDIsReadAndNotClonedOnto(t *testing.T) {
	w := newWorld(t)
	home := probeVMID(w, 0)
	w.add(proxyVMOn(w, otherUID, home))

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, probeVMID(w, 1), res.VMID)
	assert.Equal(t, 1, configReadsOf(w, home), "its mark is the one thing that tells whose it is")
	assert.Empty(t, writesTo(w, home))
	assert.Equal(t, 1, w.cluster.CallCount("Clone"))
}

func TestLookup_ourVMThatAPersonRenamedIsFound(t *testing.T) {
	for name, lag := range map[string]time.Duration{"the cache shows the new name": 0, "the cache shows the old name": time.Hour} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, func(o *pvesim.Options) { o.ResourcesLag = lag })
			home := probeVMID(w, 0)
			w.add(proxyVM(w, uid, false))
			require.NoError(t, w.cluster.SetVMConfig(context.Background(), "pve1", home, pve.VMConfig{"name": "web-01"}))
			shown := map[bool]string{true: proxy.NameFromUID(uid), false: "web-01"}[lag > 0]
			require.Equal(t, shown, listed(t, w, home).Name)

			res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

			require.NoError(t, err)
			assert.Equal(t, []activities.VMRef{{Node: "pve1", VMID: home}}, res.Destroyed)
			assert.Empty(t, w.vms())
		})
	}
}

// ourCloneWhereATemplateWas has the proxy's clone on its home VMID, where a template was until
// a moment before. The status cache, refreshed every 10 s, still shows the template there: PVE
// keys it by VMID and keeps what a VMID last showed for 5 minutes. With copying, the clone is
// still copying; without, it has ended, as a linked clone or a small disk's does in seconds.
func ourCloneWhereATemplateWas(t *testing.T, copying bool) *world {
	t.Helper()
	w := newWorld(t, templateDisks(1), func(o *pvesim.Options) {
		o.ResourcesLag = 10 * time.Second
		o.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Second, "qmstart": 3 * time.Second}
		if copying {
			o.TaskDurations["qmclone"] = 4 * time.Minute
		}
	})
	home := probeVMID(w, 0)
	w.add(pvesim.Template(home, "pve1", 1))
	_, err := w.cluster.Destroy(context.Background(), "pve1", home)
	require.NoError(t, err)
	w.advance(time.Second)
	cloneInProgress(t, w, uid, home, "")
	w.advance(4 * time.Second)

	r := listed(t, w, home)
	require.True(t, r.Template, "the cache still shows the template")
	require.Equal(t, "debian-13-template", r.Name)
	if copying {
		require.Equal(t, "clone", r.Lock, "the lock is live")
	} else {
		owner, _ := proxy.OwnerOf(vmConfig(t, w, home))
		require.Equal(t, uid, owner, "the clone has ended with the proxy's mark")
	}
	return w
}

func TestLookup_ourCloneOnAVMIDATemplateLeftIsFoundWhileTheCacheShowsTheTemplate(t *testing.T) {
	for _, copying := range []bool{false, true} {
		name := "clone ended"
		if copying {
			name = "clone still copying"
		}
		t.Run(name+"/delete destroys it", func(t *testing.T) {
			w := ourCloneWhereATemplateWas(t, copying)
			home := probeVMID(w, 0)

			res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

			require.NoError(t, err)
			assert.Equal(t, []activities.VMRef{{Node: "pve1", VMID: home}}, res.Destroyed)
			assert.Empty(t, w.vms())
		})
		t.Run(name+"/create adopts it", func(t *testing.T) {
			w := ourCloneWhereATemplateWas(t, copying)

			res, err := w.create(createInput())

			require.NoError(t, err)
			assert.Equal(t, probeVMID(w, 0), res.VMID)
			assert.Equal(t, 1, w.cluster.CallCount("Clone"), "no second clone")
			assert.Len(t, w.vms(), 1)
		})
	}
	t.Run("get finds it", func(t *testing.T) {
		w := ourCloneWhereATemplateWas(t, false)

		res, err := w.get(byUID())

		require.NoError(t, err)
		assert.Equal(t, probeVMID(w, 0), res.VMID)
	})
}

// cacheBehindTemplates is a status cache that has not yet seen any VM made a template.
type cacheBehindTemplates struct{ pve.API }

func (c cacheBehindTemplates) ClusterResources(ctx context.Context) ([]pve.VMResource, error) {
	rs, err := c.API.ClusterResources(ctx)
	for i := range rs {
		rs[i].Template = false
	}
	return rs, err
}

// A person made a template of the proxy's VM: it keeps the mark, but a template is nobody's VM.
func TestLookup_aTemplateCarryingOurMarkIsNeverOurs(t *testing.T) {
	for name, behind := range map[string]bool{"the cache shows the template": false, "the cache has not seen it yet": true} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			home := probeVMID(w, 0)
			v := proxyVM(w, uid, false)
			v.Config["template"] = "1"
			w.add(v)
			if behind {
				w.wrap = func(api pve.API) pve.API { return cacheBehindTemplates{api} }
			}

			res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

			require.NoError(t, err)
			assert.Empty(t, res.Destroyed)
			assert.Empty(t, writesTo(w, home))
			assert.Equal(t, "1", vmConfig(t, w, home)["template"])
			got, err := w.get(byUID())
			require.NoError(t, err, "by UID")
			assert.NotEmpty(t, got.NotFound, "by UID")
			got, err = w.get(byProviderID(w))
			require.NoError(t, err, "by provider ID")
			assert.NotEmpty(t, got.NotFound, "by provider ID")
		})
	}
}

// listedBeforeAContainerTookIt is a list of cluster resources taken while VM vmid still existed:
// the first shows the container that has its VMID now as that VM.
type listedBeforeAContainerTookIt struct {
	pve.API
	vmid int
	once sync.Once
}

func (l *listedBeforeAContainerTookIt) ClusterResources(ctx context.Context) ([]pve.VMResource, error) {
	rs, err := l.API.ClusterResources(ctx)
	l.once.Do(func() {
		for i, r := range rs {
			if r.VMID == l.vmid {
				rs[i].ID, rs[i].Type = fmt.Sprintf("qemu/%d", l.vmid), "qemu"
			}
		}
	})
	return rs, err
}

func TestLookup_aVMWhoseVMIDAContainerTookSinceTheListIsGone(t *testing.T) {
	w := newWorld(t, withContainerOn(t, 0, "db"))
	home := probeVMID(w, 0)
	w.wrap = func(api pve.API) pve.API { return &listedBeforeAContainerTookIt{API: api, vmid: home} }

	res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Empty(t, res.Destroyed)
	assert.Equal(t, 1, configReadsOf(w, home), "the container is not followed as a VM")
	assert.Equal(t, 2, w.cluster.CallCount("ClusterResources"), "the lookup's, and one to find where the VM went")
}
