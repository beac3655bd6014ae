package pvesim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// cachedStatus is what pvestatd's RRD data holds about a VMID: its VM as the refresh at time
// at saw it.
type cachedStatus struct {
	at       time.Time
	name     string
	running  bool
	uptime   int64
	template bool
	maxDisk  int64
	maxMem   int64
	maxCPU   int
}

// cacheExpiry is how long pmxcfs keeps the RRD data of a VMID no refresh updates any more.
const cacheExpiry = 5 * time.Minute

// snapshot is g as a refresh at time at sees it.
func (c *Cluster) snapshot(g *vm, at time.Time) cachedStatus {
	s := cachedStatus{
		at:       at,
		name:     displayName(g),
		template: g.cfg["template"] == "1",
		maxDisk:  bootDiskSize(g.cfg),
		maxMem:   g.memoryMiB() * mib,
		maxCPU:   g.cpus(),
	}
	if g.running {
		s.running = true
		s.uptime = max(int64(at.Sub(g.startedAt).Seconds()), 0)
	}
	return s
}

// lastRefresh is the last refresh of the status cache at or before t.
func (c *Cluster) lastRefresh(t time.Time) time.Time {
	return c.epoch.Add(t.Sub(c.epoch) / c.lag * c.lag)
}

// refreshThrough applies the refreshes due by t. Between two changes of the cluster every
// refresh sees the same VMs, so only the last one is applied.
func (c *Cluster) refreshThrough(t time.Time) {
	if c.lag <= 0 || t.Before(c.nextRefresh) {
		return
	}
	tick := c.lastRefresh(t)
	c.refresh(tick)
	c.nextRefresh = tick.Add(c.lag)
}

// refresh is pvestatd's round at time at: every VM's status is written down, keyed by VMID as
// PVE's RRD data is, and what no round has updated for cacheExpiry is dropped. A VMID that is
// destroyed and used again between two rounds therefore shows the old VM's values until the
// next.
func (c *Cluster) refresh(at time.Time) {
	for id, g := range c.vms {
		c.cache[id] = c.snapshot(g, at)
	}
	maps.DeleteFunc(c.cache, func(_ int, s cachedStatus) bool { return at.Sub(s.at) > cacheExpiry })
}

// ClusterResources lists every guest the token may audit, by VMID: VMs and containers. The list and each VM's node, lock and
// tags are live; as on PVE, name, status, template, uptime and the sizes come from a status
// cache that pvestatd refreshes every ResourcesLag. A VMID the cache has not seen yet shows
// as "unknown" without a name; a VM changed since the last refresh shows as it was then (a
// clone as "VM <id>", the name of its temporary config, a VM started since as "stopped").
// With no ResourcesLag everything is live.
func (c *Cluster) ClusterResources(ctx context.Context) ([]pve.VMResource, error) {
	return call(c, ctx, Call{Method: "ClusterResources"}, func(now time.Time) ([]pve.VMResource, error) {
		out := []pve.VMResource{}
		for _, id := range slices.Sorted(maps.Keys(c.vms)) {
			if c.allow(vmPath(id), "VM.Audit") != nil {
				continue
			}
			g := c.vms[id]
			r := pve.VMResource{
				ID:     fmt.Sprintf("qemu/%d", id),
				VMID:   id,
				Node:   g.node,
				Type:   "qemu",
				Status: "unknown",
				Lock:   g.cfg["lock"],
				Tags:   g.cfg["tags"],
			}
			s, seen := c.cache[id]
			if c.lag <= 0 {
				s, seen = c.snapshot(g, now), true
			}
			if seen {
				r.Name = s.name
				r.Status = "stopped"
				if s.running {
					r.Status = "running"
				}
				r.Uptime = s.uptime
				r.Template = s.template
				r.MaxDisk = s.maxDisk
				r.MaxMem = s.maxMem
				r.MaxCPU = s.maxCPU
			}
			out = append(out, r)
		}
		for _, ct := range c.containers {
			r := pve.VMResource{ID: fmt.Sprintf("lxc/%d", ct.VMID), VMID: ct.VMID, Name: ct.Name, Node: ct.Node, Type: "lxc", Status: "stopped", Tags: ct.Tags}
			if ct.Running {
				r.Status = "running"
			}
			out = append(out, r)
		}
		slices.SortFunc(out, func(a, b pve.VMResource) int { return a.VMID - b.VMID })
		return out, nil
	})
}
