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
	"github.com/pveflow/pveflow/workflows"
)

// The tests of what a lookup by UID reads: the config of every VM the list of cluster resources
// cannot rule out. A VM's name, status and template flag there come from pvestatd's cache,
// which lags.

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

	rs, err := w.cluster.ClusterResources(context.Background())
	require.NoError(t, err)
	i := -1
	for j, r := range rs {
		if r.VMID == home {
			i = j
		}
	}
	require.GreaterOrEqual(t, i, 0)
	require.True(t, rs[i].Template, "the cache still shows the template")
	require.Equal(t, "debian-13-template", rs[i].Name)
	if copying {
		require.Equal(t, "clone", rs[i].Lock)
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

			res, err := w.delete(workflows.DeleteProxyInput{UID: uid})

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

			res, err := w.delete(workflows.DeleteProxyInput{UID: uid})

			require.NoError(t, err)
			assert.Empty(t, res.Destroyed)
			assert.Empty(t, writesTo(w, home))
			assert.Equal(t, "1", vmConfig(t, w, home)["template"])
			_, err = w.get(byUID())
			assert.Equal(t, workflows.FailNotFound, failureType(t, err), "by UID")
			_, err = w.get(byProviderID(w))
			assert.Equal(t, workflows.FailNotFound, failureType(t, err), "by provider ID")
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

	res, err := w.delete(workflows.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Empty(t, res.Destroyed)
	assert.Equal(t, 1, configReadsOf(w, home), "the container is not followed as a VM")
	assert.Equal(t, 2, w.cluster.CallCount("ClusterResources"), "the lookup's, and one to find where the VM went")
}
