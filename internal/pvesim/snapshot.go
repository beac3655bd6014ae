package pvesim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// Snapshot is what a cluster keeps across a restart of the simulator's process (cmd/pvesim's
// -state-file), as a real cluster keeps its disks and /etc/pve across a restart of its
// daemons: the VMs with their configs and guests, the volumes with the ISOs' content, the
// tasks, and the HA manager's resources. What lives only in a running process is not in it:
//
//   - a task that runs when the snapshot is taken is restored stopped with "unexpected status",
//     as PVE shows a task whose worker died: what it had done stays (a clone's VM, still
//     locked "clone"), what it had yet to do is lost;
//   - the VMs that ran run on, their guest agents answering at once, with the cores and memory
//     they ran with and what their guests' cloud-init keeps;
//   - the clone log, the faults and the status cache are the new process's: the cache is
//     refreshed at the restore.
type Snapshot struct {
	// PID is the last process ID the cluster handed out: the UPIDs after a restore never
	// repeat one from before it.
	PID     int              `json:"pid"`
	VMs     []SnapshotVM     `json:"vms"`
	Volumes []SnapshotVolume `json:"volumes"`
	// Tasks are in the order they started.
	Tasks       []SnapshotTask                  `json:"tasks"`
	HAResources map[string]pve.HAResourceParams `json:"haResources,omitempty"`
	// Maintenance are the nodes in HA maintenance mode.
	Maintenance []string `json:"maintenance,omitempty"`
}

// SnapshotVM is a VM with what its config does not show.
type SnapshotVM struct {
	VM
	Paused bool `json:"paused,omitempty"`
	// QEMUPID is a running VM's QEMU's process ID.
	QEMUPID int `json:"qemuPID,omitempty"`
	// BootCores and BootMemoryMiB are what a running VM's QEMU started with: a change of the
	// config waits for the next start.
	BootCores     int           `json:"bootCores,omitempty"`
	BootMemoryMiB int64         `json:"bootMemoryMiB,omitempty"`
	Guest         SnapshotGuest `json:"guest"`
}

// SnapshotGuest is what the guest OS keeps across its boots (guest, cloudInit).
type SnapshotGuest struct {
	Seed          map[string]string `json:"seed,omitempty"`
	InstanceID    string            `json:"instanceID,omitempty"`
	NewInstances  int               `json:"newInstances,omitempty"`
	Trust         bool              `json:"trust,omitempty"`
	InstallsHook  bool              `json:"installsHook,omitempty"`
	ReseedHook    bool              `json:"reseedHook,omitempty"`
	NetworkConfig string            `json:"networkConfig,omitempty"`
}

// SnapshotVolume is a volume with when it was made.
type SnapshotVolume struct {
	Volume
	Created time.Time `json:"created"`
}

// SnapshotTask is a task. End is zero for a task that ran when the snapshot was taken.
type SnapshotTask struct {
	UPID  pve.UPID  `json:"upid"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"`
	Seen  time.Time `json:"seen,omitzero"`
	Exit  string    `json:"exit,omitempty"`
	Log   []string  `json:"log,omitempty"`
}

// Snapshot returns the cluster's Snapshot.
func (c *Cluster) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.advance(now)
	s := Snapshot{PID: c.pid, HAResources: maps.Clone(c.ha.resources)}
	for _, id := range slices.Sorted(maps.Keys(c.vms)) {
		g := c.vms[id]
		ci := g.guest.cloudInit
		s.VMs = append(s.VMs, SnapshotVM{
			VM:     VM{Node: g.node, VMID: g.id, Config: maps.Clone(g.cfg), Running: g.running, Pool: g.pool},
			Paused: g.paused, QEMUPID: g.pid, BootCores: g.bootCPUs, BootMemoryMiB: g.bootMemMiB,
			Guest: SnapshotGuest{
				Seed: maps.Clone(g.guest.seed), InstanceID: ci.instanceID, NewInstances: ci.newInstances, Trust: ci.trust,
				InstallsHook: ci.installsHook, ReseedHook: ci.reseedHook, NetworkConfig: g.guest.networkConfig,
			},
		})
	}
	c.eachVolume(func(st *storage, name string, v *volume) {
		s.Volumes = append(s.Volumes, SnapshotVolume{
			Volume:  Volume{Node: st.node, Storage: st.ID, VolID: st.volid(name), Size: v.size, Data: slices.Clone(v.data)},
			Created: v.ctime,
		})
	})
	for _, t := range c.tasksInOrder() {
		st := SnapshotTask{UPID: t.upid, Start: t.start, Seen: t.seen, Log: slices.Clone(t.log)}
		if t.done(now) {
			st.End, st.Exit = t.end, t.exit
		}
		s.Tasks = append(s.Tasks, st)
	}
	for _, node := range slices.Sorted(maps.Keys(c.ha.maintenance)) {
		if c.ha.maintenance[node] {
			s.Maintenance = append(s.Maintenance, node)
		}
	}
	return s
}

// Restore makes the cluster the one s describes, in place of the VMs it was made with. It
// needs a cluster New has just made, with the nodes and storages s has volumes on.
func (c *Cluster) Restore(s Snapshot) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tasks) > 0 || len(c.faults.calls) > 0 {
		return errors.New("pvesim: restore: the cluster has been used since New")
	}
	now := c.clock.Now()
	c.vms = make(map[int]*vm)
	c.eachVolume(func(st *storage, name string, _ *volume) { delete(st.volumes, name) })
	for _, v := range s.Volumes {
		st, name, err := c.volumeHome(v.Volume)
		if err != nil {
			return err
		}
		st.volumes[name] = &volume{size: v.Size, data: slices.Clone(v.Data), ctime: v.Created}
	}
	c.pid = max(c.pid, s.PID)
	for _, sv := range s.VMs {
		stopped := sv.VM
		stopped.Running = false
		if err := c.addVM(stopped, now); err != nil {
			return fmt.Errorf("pvesim: restore: %w", err)
		}
		g := c.vms[sv.VMID]
		if sv.Running {
			// Up for AgentBootDelay already, as a running VM given to New is.
			g.running, g.paused, g.pid, g.startedAt = true, sv.Paused, sv.QEMUPID, now.Add(-c.bootDelay)
			g.bootCPUs, g.bootMemMiB = sv.BootCores, sv.BootMemoryMiB
		}
		sg := sv.Guest
		g.guest = guest{
			seed: maps.Clone(sg.Seed),
			cloudInit: cloudInit{
				instanceID: sg.InstanceID, newInstances: sg.NewInstances, trust: sg.Trust,
				installsHook: sg.InstallsHook, reseedHook: sg.ReseedHook,
			},
			network: parseNetworkConfig(sg.NetworkConfig), networkConfig: sg.NetworkConfig,
		}
	}
	for _, st := range s.Tasks {
		info, err := pve.ParseUPID(st.UPID)
		if err != nil {
			return fmt.Errorf("pvesim: restore: %w", err)
		}
		t := &task{upid: st.UPID, info: info, start: st.Start, seen: st.Seen, end: st.End, exit: st.Exit, log: slices.Clone(st.Log)}
		if t.end.IsZero() {
			// Its worker died with the process that ran it.
			t.end, t.exit = now, crashedExit
		}
		c.tasks[t.upid] = t
	}
	c.ha.resources = maps.Clone(s.HAResources)
	c.ha.maintenance = make(map[string]bool, len(s.Maintenance))
	for _, node := range s.Maintenance {
		c.ha.maintenance[node] = true
	}
	c.cache = make(map[int]cachedStatus)
	c.primeCache(now)
	return nil
}

// volumeHome is the storage a volume of a Snapshot is on, and its name there.
func (c *Cluster) volumeHome(v Volume) (*storage, string, error) {
	sid, name, ok := strings.Cut(v.VolID, ":")
	if !ok || sid != v.Storage {
		return nil, "", fmt.Errorf("pvesim: restore: volume %q is not on storage %q", v.VolID, v.Storage)
	}
	for _, nd := range c.nodes {
		if st := nd.storages[sid]; st != nil && st.node == v.Node {
			return st, name, nil
		}
	}
	return nil, "", fmt.Errorf("pvesim: restore: volume %q: no storage %q on node %q", v.VolID, sid, v.Node)
}
