package pvesim

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

// resourceOf is vmid's entry in /cluster/resources when the clock has moved d since t0.
func resourceOf(t *testing.T, c *Cluster, clk *ManualClock, vmid int, d time.Duration) pve.VMResource {
	t.Helper()
	clk.Advance(t0.Add(d).Sub(clk.Now()))
	rs, err := c.ClusterResources(t.Context())
	require.NoError(t, err)
	for _, r := range rs {
		if r.VMID == vmid {
			return r
		}
	}
	require.Failf(t, "no resource", "VM %d is not in %v", vmid, rs)
	return pve.VMResource{}
}

func TestClusterResources_freshCloneShowsUnknownDuringLag(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.ResourcesLag = 10 * time.Second })
	upid := startClone(t, c, newID)

	rs, err := c.ClusterResources(t.Context())
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, pve.VMResource{ID: "qemu/123456", VMID: newID, Node: "pve1", Type: "qemu", Status: "unknown", Lock: "clone"}, rs[1])
	assert.Equal(t, "debian-13-template", rs[0].Name, "old VMs are in the status cache")

	finish(t, c, clk, upid)
	rs, err = c.ClusterResources(t.Context())
	require.NoError(t, err)
	assert.Equal(t, pve.VMResource{ID: "qemu/123456", VMID: newID, Node: "pve1", Type: "qemu", Status: "unknown"}, rs[1],
		"the clone ended and unlocked the VM before the cache saw it")

	clk.Advance(10 * time.Second)
	rs, err = c.ClusterResources(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", rs[1].Name)
	assert.Equal(t, "stopped", rs[1].Status)
}

func TestClusterResources_listsEveryVM(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	require.NoError(t, c.AddVM(VM{Node: "pve2", VMID: 101, Config: pve.VMConfig{"name": "web", "tags": "a;b"}, Running: true}))

	rs, err := c.ClusterResources(t.Context())
	require.NoError(t, err)
	require.Len(t, rs, 3)
	assert.Equal(t, pve.VMResource{ID: "qemu/101", VMID: 101, Name: "web", Node: "pve2", Type: "qemu", Status: "running",
		Tags: "a;b", MaxMem: 512 << 20, MaxCPU: 1, Uptime: 0}, rs[0])
	assert.Equal(t, pve.VMResource{ID: "qemu/9000", VMID: 9000, Name: "debian-13-template", Node: "pve1", Type: "qemu",
		Status: "stopped", Template: true, MaxDisk: 3 << 30, MaxMem: 2 << 30, MaxCPU: 2}, rs[1])
	assert.Equal(t, newID, rs[2].VMID)
}

func TestClusterResources_cloneShowsTemporaryNameUntilRefreshAfterMark(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) {
		o.ResourcesLag = 10 * time.Second
		o.TaskDurations = map[string]time.Duration{"qmclone": 15 * time.Second}
		o.VMs = []VM{Template(tmplID, "pve1", 1)}
	})
	startClone(t, c, newID)

	tests := []struct {
		at         time.Duration
		name, lock string
	}{
		{0, "", "clone"},
		{10 * time.Second, "VM 123456", "clone"}, // the refresh saw the temporary config
		{15 * time.Second, "VM 123456", ""},      // the name is written and the lock gone
		{20 * time.Second, "proxy-3k7q2m9x4w8p1r5t", ""},
	}
	for _, tt := range tests {
		r := resourceOf(t, c, clk, newID, tt.at)
		assert.Equal(t, tt.name, r.Name, tt.at)
		assert.Equal(t, tt.lock, r.Lock, "the lock is read live, at %v", tt.at)
	}
}

func TestClusterResources_powerChangeShowsAtNextRefresh(t *testing.T) {
	tests := []struct {
		name        string
		running     bool
		op          func(context.Context, *Cluster) (pve.UPID, error)
		stale, next pve.VMResource
	}{
		{
			name:  "started since shows stopped",
			op:    func(ctx context.Context, c *Cluster) (pve.UPID, error) { return c.Start(ctx, "pve1", newID) },
			stale: pve.VMResource{Status: "stopped"},
			next:  pve.VMResource{Status: "running", Uptime: 9}, // started at 30.03 s, refreshed at 40 s
		},
		{
			name:    "stopped since shows running",
			running: true,
			op:      func(ctx context.Context, c *Cluster) (pve.UPID, error) { return c.Stop(ctx, "pve1", newID) },
			stale:   pve.VMResource{Status: "running", Uptime: 30}, // as refreshed at 30 s
			next:    pve.VMResource{Status: "stopped"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newCluster(t, func(o *Options) { o.ResourcesLag = 10 * time.Second })
			require.NoError(t, c.AddVM(VM{Node: "pve1", VMID: newID, Config: pve.VMConfig{"name": "web"}, Running: tt.running}))
			clk.Advance(30 * time.Second)
			upid, err := tt.op(t.Context(), c)
			require.NoError(t, err)
			require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)

			st, err := c.VMStatus(t.Context(), "pve1", newID)
			require.NoError(t, err)
			assert.Equal(t, tt.next.Status, st.Status, "status/current is live")
			r := resourceOf(t, c, clk, newID, 40*time.Second-time.Nanosecond)
			assert.Equal(t, tt.stale, pve.VMResource{Status: r.Status, Uptime: r.Uptime})
			r = resourceOf(t, c, clk, newID, 40*time.Second)
			assert.Equal(t, tt.next, pve.VMResource{Status: r.Status, Uptime: r.Uptime})
		})
	}
}

func TestClusterResources_refreshesAtMultiplesOfLagSinceBoot(t *testing.T) {
	// The nodes booted 20 days before t0, 1 s after a multiple of 7 s: the refreshes fall at
	// t0-1s, t0+6s, ...
	c, clk := newCluster(t, func(o *Options) { o.ResourcesLag = 7 * time.Second })
	createVM(t, c, clk, newID)

	assert.Equal(t, "unknown", resourceOf(t, c, clk, newID, 6*time.Second-time.Nanosecond).Status)
	assert.Equal(t, "stopped", resourceOf(t, c, clk, newID, 6*time.Second).Status)
}

func TestClusterResources_refreshSeesEffectDueAtItsInstant(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) {
		o.ResourcesLag = 10 * time.Second
		o.TaskDurations = map[string]time.Duration{"qmclone": 10 * time.Second}
		o.VMs = []VM{Template(tmplID, "pve1", 1)}
	})
	startClone(t, c, newID)

	r := resourceOf(t, c, clk, newID, 10*time.Second)
	assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", r.Name, "the clone's last write, due with the refresh, comes first")
}

func TestClusterResources_reusedVMIDShowsOldVMUntilNextRefresh(t *testing.T) {
	tests := []struct {
		name   string
		wait   time.Duration // between the destroy and the clone
		reused string
	}{
		{"at once", 0, "old-vm"},
		{"within the cache's 5 minutes", time.Minute, "old-vm"},
		{"after the cache forgot it", 6 * time.Minute, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newCluster(t, func(o *Options) { o.ResourcesLag = 10 * time.Second })
			require.NoError(t, c.AddVM(VM{Node: "pve1", VMID: newID, Config: pve.VMConfig{"name": "old-vm"}}))
			upid, err := c.Destroy(t.Context(), "pve1", newID)
			require.NoError(t, err)
			require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
			clk.Advance(tt.wait)
			createVM(t, c, clk, newID)

			at := clk.Now().Sub(t0)
			assert.Equal(t, tt.reused, resourceOf(t, c, clk, newID, at).Name)
			next := at.Truncate(10*time.Second) + 10*time.Second
			assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", resourceOf(t, c, clk, newID, next).Name)
		})
	}
}

func TestClusterResources_zeroLagIsLive(t *testing.T) {
	c, clk := newCluster(t)
	upid := startClone(t, c, newID)

	assert.Equal(t, pve.VMResource{ID: "qemu/123456", VMID: newID, Name: "VM 123456", Node: "pve1", Type: "qemu",
		Status: "stopped", Lock: "clone", MaxMem: 512 << 20, MaxCPU: 1}, resourceOf(t, c, clk, newID, 0))
	finish(t, c, clk, upid)
	startVM(t, c, clk, newID)
	r := resourceOf(t, c, clk, newID, clk.Now().Sub(t0))
	assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", r.Name)
	assert.Equal(t, "running", r.Status)
}

func TestAddVM_inStatusCacheAtOnce(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.ResourcesLag = 10 * time.Second })
	clk.Advance(3 * time.Second)
	require.NoError(t, c.AddVM(VM{Node: "pve2", VMID: newID, Config: pve.VMConfig{"name": "foreign"}}))

	r := resourceOf(t, c, clk, newID, 3*time.Second)
	assert.Equal(t, "foreign", r.Name)
	assert.Equal(t, "stopped", r.Status)
}

func TestClusterResources_consistentUnderConcurrentClonesOnRealClock(t *testing.T) {
	opts := Default()
	opts.ResourcesLag = time.Millisecond
	opts.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Millisecond, "qmdestroy": time.Millisecond}
	c := New(opts)

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			upid, err := c.Clone(t.Context(), "pve1", tmplID, cloneParams(newID+i))
			if !assert.NoError(t, err) {
				return
			}
			for {
				rs, err := c.ClusterResources(t.Context())
				if !assert.NoError(t, err) {
					return
				}
				for _, r := range rs {
					assert.Equal(t, r.Status == "unknown", r.Name == "", "%+v", r)
				}
				st, err := c.TaskStatus(t.Context(), "pve1", upid)
				if !assert.NoError(t, err) {
					return
				}
				if st.Status == pve.TaskStopped {
					assert.Equal(t, "OK", st.ExitStatus)
					break
				}
			}
			_, err = c.Destroy(t.Context(), "pve1", newID+i)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
}

func TestClusterResources_listsContainersBesideVMsByVMID(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) {
		o.Containers = []Container{{Node: "pve2", VMID: 150, Name: "proxy-in-a-box", Tags: "proxy_operator", Running: true}}
	})

	rs, err := c.ClusterResources(t.Context())

	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, pve.VMResource{ID: "lxc/150", VMID: 150, Name: "proxy-in-a-box", Node: "pve2", Type: "lxc", Status: "running", Tags: "proxy_operator"}, rs[0])
	assert.Equal(t, tmplID, rs[1].VMID)
	_, err = c.VMConfig(t.Context(), "pve2", 150)
	require.Error(t, err, "no qemu endpoint finds a container")
	assert.Error(t, c.AddVM(VM{Node: "pve1", VMID: 150}), "a container's VMID is taken")
}
