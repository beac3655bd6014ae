// Package pvesim is an in-memory model of a Proxmox VE 9.x cluster that implements pve.API.
//
// It is the fake behind the activity and workflow tests and the replay tests, and, served over
// HTTP by package simserver, the backend of the demo and the benchmarks. It models what pveflow
// depends on, with PVE's exact texts: VMs and their configs, locks (the config's lock property,
// the config file's flock a clone holds, and the storage lock a clone queues for to allocate a
// disk), tasks with real UPIDs, the clone timeline, disk and ISO volumes, the guest agent, and
// the status cache behind /cluster/resources.
//
// Time comes from a Clock and nothing happens in the background: a task's effects are applied
// by the first call that observes the cluster after the task ended. With a ManualClock the
// model is fully deterministic.
//
// Every failure is a *pve.APIError shaped as PVE's HTTP layer would produce it, or, for a task,
// the task's exit status. Faults (injected errors, stalled or crashed clones, a silent agent,
// blocked calls) are set with the methods in faults.go.
package pvesim

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

var _ pve.API = (*Cluster)(nil)

// Options describe a cluster. The zero value of a field is meaningful (no lag, no delay, no
// faults) except where noted.
type Options struct {
	// Nodes are the cluster's members.
	Nodes []Node
	// VMs exist from the start: templates, foreign VMs, leftovers of earlier runs.
	VMs []VM
	// Clock tells the time; nil is the real clock.
	Clock Clock
	// TaskDurations is how long a task of each type runs (qmclone, qmstart, qmstop,
	// qmreboot, qmdestroy, hastart, hastop, resize, imgcopy, imgdel); a type left out keeps its
	// default of tens of milliseconds. A worker that cannot take a VM's flock fails after its
	// type's duration.
	TaskDurations map[string]time.Duration
	// HARound is how long the HA manager takes to act on a resource's requested state once it
	// was set (ha.go): PVE's CRM and LRM each loop about every 10 s. Zero is 50 ms, so that a
	// hastart or hastop task is seen to end before the VM starts or stops.
	HARound time.Duration
	// AgentBootDelay is how long a VM runs before its guest agent answers.
	AgentBootDelay time.Duration
	// CloudInitDuration is how long cloud-init runs on after the guest agent first answers in a
	// boot before it has finished all its stages and written /run/cloud-init/result.json
	// (AgentFileRead). pveflow's vendor-data starts the agent in cloud-init's final stage, so
	// on a real guest this is what the stage does after that: the user's runcmd, scripts,
	// package installs.
	CloudInitDuration time.Duration
	// NoDHCP are the networks no DHCP server answers on: a guest's NIC there takes no address
	// from DHCP. When the network-config asks DHCP of such a NIC and does not mark it optional
	// (or cloud-init's fallback asks it of net0), systemd-networkd-wait-online holds the boot
	// for WaitOnlineTimeout, and the guest agent cloud-init installs in that boot comes as much
	// later (Cluster.waitOnline).
	NoDHCP []Network
	// WaitOnlineTimeout is systemd-networkd-wait-online's timeout in the guests; zero is its
	// default, 120 s.
	WaitOnlineTimeout time.Duration
	// ResourcesLag is how often the status cache behind /cluster/resources is refreshed, as
	// pvestatd does about every 10 s on a real cluster. The refreshes fall at multiples of it
	// since the nodes booted. Between two, a VM's name, status, template flag, uptime and sizes
	// are as the last refresh saw its VMID, and a VMID no refresh of the last 5 minutes has
	// seen shows as "unknown" without a name. Zero shows every value live.
	ResourcesLag time.Duration
	// PVE82 makes errors look like PVE before 8.3: the text only in the reason phrase, no
	// message in the body.
	PVE82 bool
	// TokenUser is the API token tasks run as; empty is "pveflow@pve!sim".
	TokenUser string
	// Seed seeds the random injected failures.
	Seed int64
	// TransientErrorRate is the share of calls that fail with a 500 PVE gives for trouble in
	// its daemons.
	TransientErrorRate float64
	// DropConnectionRate is the share of calls that fail with ErrDropConnection.
	DropConnectionRate float64
	// FaultRate is the share of calls that fail the ways PVE fails, drawn at random with Seed
	// and in equal parts: a 500 of pvedaemon's, pveproxy's 595 and 596 before the call ran, a
	// lock error (the call refused, or its task failed, as PVE does for that call), and, after
	// the call took effect, pveproxy's 596 timeout, a dropped connection, or an answer held
	// until the client gives up (ErrAnswerHeld). For chaos runs (docs/reliability.md).
	FaultRate float64
	// StallClones makes every clone task run forever, as a clone stuck on its storage does.
	StallClones bool
	// StorageLockHold is how long allocating one disk holds its storage's lock, as lvcreate or
	// qemu-img create does on PVE. A clone's worker allocates its disks one by one (a linked
	// clone's too), each under the lock of the storage it goes to: a node's flock
	// /var/lock/pve-manager/pve-storage-<id> for a local storage, pmxcfs's cluster lock
	// storage-<id> for a shared one, which all nodes queue for. Workers get a lock in the order
	// they ask for it; one that would wait more than 10 s (PVE's lock timeout) fails its clone
	// at the 10 s mark with PVE's text. What a clone waits for and holds locks comes on top of
	// its qmclone duration. Zero holds a lock for no time: clones never wait.
	StorageLockHold time.Duration
	// Pools are the cluster's resource pools; a clone may join one of them.
	Pools []string
	// DenyPrivileges are privileges the token lacks everywhere, such as "VM.Clone": calls that
	// need one fail with 403, and /cluster/resources hides VMs without VM.Audit. It is the
	// default Access, whose one role holds every privilege the model checks but these, granted
	// on / with propagate; with Access set it must be empty.
	DenyPrivileges []string
	// Access is the token's roles, groups and ACL entries; nil is the default DenyPrivileges
	// describes.
	Access *Access
	// Vnets are the cluster's SDN vnets, each in its zone.
	Vnets []pve.SDNVnet
	// Containers are LXC guests. The model only lists them in /cluster/resources, where they
	// share the VMIDs with the VMs; no qemu endpoint finds them, as on PVE.
	Containers []Container
}

// Container is an LXC guest, as /cluster/resources lists it.
type Container struct {
	Node    string
	VMID    int
	Name    string
	Tags    string
	Running bool
}

// Network is where a NIC is, as its net[n] value gives it: a bridge, and a VLAN tag (0:
// untagged).
type Network struct {
	Bridge string
	VLAN   int
}

// Node is a cluster member and its storages.
type Node struct {
	Name     string
	Storages []Storage
}

// Storage is a storage as the node sees it. A Shared storage listed on several nodes is one
// pool of space and volumes; any other storage is the node's own, even if another node has one
// with the same ID.
type Storage struct {
	ID string
	// Type is PVE's storage type: "dir", "lvmthin", "lvm", ... Only storages with a directory
	// ("dir", "nfs", "cifs") take uploads.
	Type string
	// Content is PVE's comma-separated content list, such as "iso,vztmpl,backup".
	Content string
	Shared  bool
	// Total is the storage's size in bytes.
	Total int64
	// Used is the space taken by things the model does not track; volumes come on top.
	Used int64
}

// VM is a guest as set up in Options or AddVM, and as VMs reports it.
type VM struct {
	Node   string
	VMID   int
	Config pve.VMConfig
	// Running VMs given at setup have been up for AgentBootDelay: their agent answers.
	Running bool
	// Pool is the resource pool the VM is in; empty for none.
	Pool string
}

// Volume is a disk image or ISO on a storage, as Volumes reports it.
type Volume struct {
	// Node is the storage's node; empty for a shared storage.
	Node    string
	Storage string
	// VolID is PVE's volume ID, such as "local:iso/seed.iso" or "local-lvm:vm-101-disk-0".
	VolID string
	Size  int64
	// Data is an uploaded ISO's content; nil for disk images.
	Data []byte
}

// Cluster is the model. It is safe for concurrent use.
type Cluster struct {
	clock     Clock
	user      string
	durations map[string]time.Duration
	bootDelay time.Duration
	// cloudInitDuration is Options.CloudInitDuration.
	cloudInitDuration time.Duration
	lag               time.Duration
	pve82             bool
	stall             bool
	lockHold          time.Duration
	access            *Access
	vnets             []pve.SDNVnet
	pools             map[string]bool
	transient         float64
	drop              float64
	faultRate         float64
	epoch             time.Time // the nodes' boot time, for uptimes and pstart

	// noDHCP and waitOnlineTimeout are Options.NoDHCP and Options.WaitOnlineTimeout.
	noDHCP            map[Network]bool
	waitOnlineTimeout time.Duration

	mu         sync.Mutex
	nodes      map[string]*node
	vms        map[int]*vm
	containers map[int]Container
	tasks      map[pve.UPID]*task
	events     eventQueue
	seq        uint64
	pid        int
	rng        *rand.Rand
	faults     faults
	// clones is the clone log, in start order.
	clones []*cloneRecord
	// cache is the status cache by VMID, and nextRefresh its next refresh; both unused when
	// lag is zero.
	cache       map[int]cachedStatus
	nextRefresh time.Time
	// ha is the HA manager's state (ha.go).
	ha haState
}

type node struct {
	name     string
	storages map[string]*storage
}

type storage struct {
	Storage
	node    string // "" when shared
	content map[string]bool
	volumes map[string]*volume // by volume name: "iso/seed.iso", "vm-101-disk-0"
	// reserved is the space of disks that running clones have planned here and not allocated
	// yet: taken, for the clones that come after.
	reserved int64
	// lockFree is when the storage's lock is free again: the end of the last allocation that
	// was granted it.
	lockFree time.Time
}

type volume struct {
	size int64
	data []byte
	// ctime is when the volume was made, which StorageContent reports.
	ctime time.Time
}

func (s *storage) avail() int64 {
	free := s.Total - s.Used - s.reserved
	for _, v := range s.volumes {
		free -= v.size
	}
	return max(free, 0)
}

func (s *storage) volid(name string) string { return s.ID + ":" + name }

// vm is a guest's state. The config holds PVE's keys except digest, which is computed on read.
type vm struct {
	id        int
	node      string
	cfg       pve.VMConfig
	running   bool
	pid       int
	startedAt time.Time
	// bootCPUs and bootMemMiB are the cores and memory the running QEMU started with. PVE keeps
	// a config write of them pending on a running VM (neither hot-plugs by default) until the VM
	// starts again: GET config shows the new values, the status the ones in effect.
	bootCPUs   int
	bootMemMiB int64
	// clone is the running clone writing this VM: it holds the config file's flock since
	// cloneStart.
	clone      *task
	cloneStart time.Time
	// cloneSources counts running clones reading this VM: each holds a shared flock.
	cloneSources int
	// pool is the resource pool the VM is in.
	pool string
	// paused is a running VM whose guest QEMU has stopped (Pause).
	paused bool
	// guest is the guest OS's own state.
	guest guest
	// agentLate is how much later than AgentBootDelay the guest agent answers in this boot.
	agentLate time.Duration
}

// defaultTaskDurations keep a test suite fast while still letting a poll see a task running.
var defaultTaskDurations = map[string]time.Duration{
	"qmclone":   60 * time.Millisecond,
	"qmstart":   30 * time.Millisecond,
	"qmstop":    20 * time.Millisecond,
	"qmreboot":  40 * time.Millisecond,
	"qmdestroy": 30 * time.Millisecond,
	"hastart":   10 * time.Millisecond,
	"hastop":    10 * time.Millisecond,
	"resize":    20 * time.Millisecond,
	"imgcopy":   20 * time.Millisecond,
	"imgdel":    10 * time.Millisecond,
	"qmigrate":  50 * time.Millisecond,
}

// New returns a cluster as opts describe it. It panics on options no cluster can have: a
// duplicate node or VMID, a VM on an unknown node or with a disk on an unknown storage, an
// unknown task type. Those are mistakes in a test's setup, not conditions to handle.
func New(opts Options) *Cluster {
	c := &Cluster{
		clock:             opts.Clock,
		user:              opts.TokenUser,
		durations:         maps.Clone(defaultTaskDurations),
		bootDelay:         opts.AgentBootDelay,
		cloudInitDuration: opts.CloudInitDuration,
		lag:               opts.ResourcesLag,
		pve82:             opts.PVE82,
		stall:             opts.StallClones,
		lockHold:          opts.StorageLockHold,
		access:            opts.Access,
		vnets:             slices.Clone(opts.Vnets),
		pools:             make(map[string]bool),
		transient:         opts.TransientErrorRate,
		drop:              opts.DropConnectionRate,
		faultRate:         opts.FaultRate,
		nodes:             make(map[string]*node),
		vms:               make(map[int]*vm),
		containers:        make(map[int]Container),
		tasks:             make(map[pve.UPID]*task),
		cache:             make(map[int]cachedStatus),
		pid:               0x1000,
		rng:               rand.New(rand.NewPCG(uint64(opts.Seed), 0x9e3779b97f4a7c15)),
		faults:            newFaults(),
		ha:                haState{round: cmp.Or(opts.HARound, defaultHARound)},
	}
	if c.clock == nil {
		c.clock = realClock{}
	}
	if c.user == "" {
		c.user = "pveflow@pve!sim"
	}
	c.waitOnlineTimeout = cmp.Or(opts.WaitOnlineTimeout, 120*time.Second)
	c.noDHCP = make(map[Network]bool, len(opts.NoDHCP))
	for _, n := range opts.NoDHCP {
		c.noDHCP[n] = true
	}
	for typ, d := range opts.TaskDurations {
		mustTaskType(typ)
		c.durations[typ] = d
	}
	if c.access == nil {
		c.access = defaultAccess(c.user, opts.DenyPrivileges)
	} else if len(opts.DenyPrivileges) > 0 {
		panic("pvesim: DenyPrivileges is the default Access: set one or the other")
	}
	for _, p := range opts.Pools {
		c.pools[p] = true
	}
	now := c.clock.Now()
	c.epoch = now.Add(-20 * 24 * time.Hour)
	shared := make(map[string]*storage)
	for _, n := range opts.Nodes {
		if _, dup := c.nodes[n.Name]; dup || n.Name == "" {
			panic(fmt.Sprintf("pvesim: node %q is empty or listed twice", n.Name))
		}
		nd := &node{name: n.Name, storages: make(map[string]*storage)}
		for _, s := range n.Storages {
			if _, dup := nd.storages[s.ID]; dup {
				panic(fmt.Sprintf("pvesim: storage %q listed twice on node %s", s.ID, n.Name))
			}
			if st := shared[s.ID]; st != nil && s.Shared {
				nd.storages[s.ID] = st
				continue
			}
			st := &storage{Storage: s, node: n.Name, content: make(map[string]bool), volumes: make(map[string]*volume)}
			for _, ct := range splitList(s.Content) {
				st.content[ct] = true
			}
			if s.Shared {
				st.node = ""
				shared[s.ID] = st
			}
			nd.storages[s.ID] = st
		}
		c.nodes[n.Name] = nd
	}
	for _, ct := range opts.Containers {
		if err := c.addContainer(ct); err != nil {
			panic(err)
		}
	}
	for _, v := range opts.VMs {
		if err := c.addVM(v, now); err != nil {
			panic(err)
		}
	}
	c.primeCache(now)
	return c
}

// primeCache fills the status cache with the VMs there are now, as they were at its last
// refresh: for a cluster that starts with VMs.
func (c *Cluster) primeCache(now time.Time) {
	if c.lag > 0 {
		tick := c.lastRefresh(now)
		c.refresh(tick)
		c.nextRefresh = tick.Add(c.lag)
	}
}

// Default is a ready cluster: nodes pve1 and pve2, each with its own "local" (dir: ISOs,
// templates, backups) and "local-lvm" (lvmthin: disks), and the template 9000
// "debian-13-template" on pve1, configured as the seed plan's recipe makes it: Template(9000,
// "pve1", 2).
func Default() Options {
	const gib = 1 << 30
	storages := []Storage{
		{ID: "local", Type: "dir", Content: "iso,vztmpl,backup,import", Total: 94 * gib, Used: 9 * gib},
		{ID: "local-lvm", Type: "lvmthin", Content: "images,rootdir", Total: 1735 * gib, Used: 118 * gib},
	}
	return Options{
		Nodes:          []Node{{Name: "pve1", Storages: storages}, {Name: "pve2", Storages: storages}},
		VMs:            []VM{Template(defaultTemplateID, "pve1", 2)},
		AgentBootDelay: 50 * time.Millisecond,
		// Enough for a wait to see cloud-init not done yet, little enough for fast tests.
		CloudInitDuration: 50 * time.Millisecond,
	}
}

// defaultTemplateID is Default's template. It keeps the NIC MAC and UUIDs the fixtures in
// testdata/pve recorded; other templates get their own, derived from their VMID.
const defaultTemplateID = 9000

// Template is a "debian-13-template" VM template on node with disks disks on its local-lvm,
// the shape that decides how a clone's config grows (PVE clones disks one by one, in
// drive-key order, and rewrites the config after each):
//
//   - 1: scsi0 (3 GiB) only, booting with SeaBIOS;
//   - 2: efidisk0 (4 MiB) and scsi0, booting with OVMF, as Default's template;
//   - more: efidisk0, scsi0 and data disks scsi1, scsi2, ... of 8 GiB each.
//
// Disks are base-<vmid>-disk-N, numbered in that order. It panics on fewer than 1 or more disks
// than efidisk0 and scsi0 to scsi30 can hold: a mistake in a test's setup.
func Template(vmid int, node string, disks int) VM {
	if disks < 1 || disks > 32 {
		panic(fmt.Sprintf("pvesim: a template has 1 to 32 disks, not %d", disks))
	}
	mac := "BC:24:11:5E:7A:01"
	uuid := "0b6f3c57-2d1e-4f8a-9c34-7e5a1d2b9f60"
	genid := "c2d4e6f8-1a3b-4c5d-8e7f-9a0b1c2d3e4f"
	if vmid != defaultTemplateID {
		mac, uuid, genid = macFor(vmid, "net0"), uuidFor(vmid, "smbios1"), uuidFor(vmid, "vmgenid")
	}
	cfg := pve.VMConfig{
		"name":     "debian-13-template",
		"memory":   "2048",
		"cores":    "2",
		"ostype":   "l26",
		"machine":  "q35",
		"scsihw":   "virtio-scsi-pci",
		"net0":     "virtio=" + mac + ",bridge=vmbr0",
		"serial0":  "socket",
		"vga":      "serial0",
		"agent":    "1",
		"boot":     "order=scsi0",
		"meta":     "creation-qemu=10.1.2,ctime=1794578112",
		"smbios1":  "uuid=" + uuid,
		"vmgenid":  genid,
		"template": "1",
	}
	disk := 0
	volume := func() string {
		name := fmt.Sprintf("local-lvm:base-%d-disk-%d", vmid, disk)
		disk++
		return name
	}
	if disks > 1 {
		cfg["bios"] = "ovmf"
		cfg["efidisk0"] = volume() + ",efitype=4m,pre-enrolled-keys=0,size=4M"
	}
	cfg["scsi0"] = volume() + ",size=3G"
	for i := 1; i < disks-1; i++ {
		cfg["scsi"+strconv.Itoa(i)] = volume() + ",size=8G"
	}
	return VM{Node: node, VMID: vmid, Config: cfg}
}

// AddVM puts a VM into the cluster as it is, without validating its config: a foreign VM, a
// clone a crashed host left locked. Its disks ("<storage>:<volume>,size=...") and cloud-init
// disk are created on the node's storages. It is in the status cache at once, as a VM that was
// there at the last refresh.
func (c *Cluster) AddVM(v VM) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.advance(now)
	if err := c.addVM(v, now); err != nil {
		return err
	}
	if c.lag > 0 {
		c.cache[v.VMID] = c.snapshot(c.vms[v.VMID], c.lastRefresh(now))
	}
	return nil
}

func (c *Cluster) addVM(v VM, now time.Time) error {
	nd := c.nodes[v.Node]
	switch {
	case nd == nil:
		return fmt.Errorf("pvesim: add VM %d: no node %q", v.VMID, v.Node)
	case v.VMID < minVMID || v.VMID > maxVMID:
		return fmt.Errorf("pvesim: add VM %d: VMID out of range", v.VMID)
	case c.vms[v.VMID] != nil:
		return fmt.Errorf("pvesim: add VM %d: VMID in use on node %s", v.VMID, c.vms[v.VMID].node)
	case c.hasContainer(v.VMID):
		return fmt.Errorf("pvesim: add VM %d: VMID in use by a container", v.VMID)
	}
	g := &vm{id: v.VMID, node: v.Node, cfg: maps.Clone(v.Config), pool: v.Pool}
	if g.cfg == nil {
		g.cfg = pve.VMConfig{}
	}
	for key, value := range g.cfg {
		if !isDiskKey(key) || isCDROM(value) && !isCloudInit(value) {
			continue
		}
		sid, name, ok := strings.Cut(driveVolID(value), ":")
		st := nd.storages[sid]
		if !ok || st == nil {
			return fmt.Errorf("pvesim: add VM %d: %s is on no storage of node %s", v.VMID, key, v.Node)
		}
		if st.volumes[name] == nil {
			st.volumes[name] = &volume{size: driveSize(value), ctime: now}
		}
	}
	if v.Running {
		c.boot(g, now.Add(-c.bootDelay))
	}
	c.vms[v.VMID] = g
	return nil
}

func (c *Cluster) addContainer(ct Container) error {
	switch {
	case c.nodes[ct.Node] == nil:
		return fmt.Errorf("pvesim: add container %d: no node %q", ct.VMID, ct.Node)
	case ct.VMID < minVMID || ct.VMID > maxVMID:
		return fmt.Errorf("pvesim: add container %d: VMID out of range", ct.VMID)
	case c.vms[ct.VMID] != nil || c.hasContainer(ct.VMID):
		return fmt.Errorf("pvesim: add container %d: VMID in use", ct.VMID)
	}
	c.containers[ct.VMID] = ct
	return nil
}

func (c *Cluster) hasContainer(vmid int) bool {
	_, ok := c.containers[vmid]
	return ok
}

// VMs lists every VM, by VMID, with a copy of its config.
func (c *Cluster) VMs() []VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance(c.clock.Now())
	out := make([]VM, 0, len(c.vms))
	for _, id := range slices.Sorted(maps.Keys(c.vms)) {
		g := c.vms[id]
		out = append(out, VM{Node: g.node, VMID: g.id, Config: maps.Clone(g.cfg), Running: g.running, Pool: g.pool})
	}
	return out
}

// Volumes lists every disk image and ISO on every storage, sorted by node and volume ID.
func (c *Cluster) Volumes() []Volume {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance(c.clock.Now())
	var out []Volume
	c.eachVolume(func(st *storage, name string, v *volume) {
		out = append(out, Volume{Node: st.node, Storage: st.ID, VolID: st.volid(name), Size: v.size, Data: slices.Clone(v.data)})
	})
	slices.SortFunc(out, func(a, b Volume) int {
		return strings.Compare(a.Node+"\x00"+a.VolID, b.Node+"\x00"+b.VolID)
	})
	return out
}

// eachVolume calls fn for every volume of every storage, a shared storage's once, in the order
// of node, storage and volume name. The caller holds c.mu; fn may delete the volume.
func (c *Cluster) eachVolume(fn func(st *storage, name string, v *volume)) {
	seen := make(map[*storage]bool)
	for _, nodeName := range slices.Sorted(maps.Keys(c.nodes)) {
		nd := c.nodes[nodeName]
		for _, id := range slices.Sorted(maps.Keys(nd.storages)) {
			st := nd.storages[id]
			if seen[st] {
				continue
			}
			seen[st] = true
			for _, name := range slices.Sorted(maps.Keys(st.volumes)) {
				fn(st, name, st.volumes[name])
			}
		}
	}
}

// call runs one API method: it honours ctx, records the call, waits while the method is
// blocked, and then, under the lock and after applying what happened up to now, injects a fault
// or runs fn. Errors are rendered for the configured PVE version.
func call[T any](c *Cluster, ctx context.Context, rec Call, fn func(now time.Time) (T, error)) (T, error) {
	var zero T
	if err := c.enter(ctx, rec); err != nil {
		return zero, err
	}
	return locked(c, rec, fn)
}

// locked is the second half of call, for UploadISO, which reads its body in between. A random
// fault (Options.FaultRate) fails the call before fn runs, or replaces the answer of an fn that
// succeeded.
func locked[T any](c *Cluster, rec Call, fn func(now time.Time) (T, error)) (T, error) {
	var zero T
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.advance(now)
	if err := c.injected(rec.Method); err != nil {
		return zero, err
	}
	fault, chaos := c.drawChaos()
	if chaos {
		if err := c.chaosBefore(fault, rec); err != nil {
			return zero, c.render(err)
		}
	}
	v, err := fn(now)
	c.faults.taskLock = ""
	if err != nil {
		return zero, c.render(err)
	}
	if chaos {
		if err := chaosAfter(fault); err != nil {
			return zero, err
		}
	}
	return v, nil
}

// render drops the body's message for PVE before 8.3, which sent the text only in the reason.
func (c *Cluster) render(err error) error {
	ae, ok := err.(*pve.APIError)
	if !ok || !c.pve82 {
		return err
	}
	old := *ae
	old.Message = ""
	return &old
}

// event is an effect due at a time: a task's end, a clone writing its config after a disk.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].seq < q[j].seq
	}
	return q[i].at.Before(q[j].at)
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// at schedules fn for time t.
func (c *Cluster) at(t time.Time, fn func()) {
	c.seq++
	heap.Push(&c.events, &event{at: t, seq: c.seq, fn: fn})
}

// advance applies, in time order, every effect due by now and the status cache's refreshes
// among them. An effect due at the instant of a refresh comes first: the refresh sees the
// cluster as it is at its time.
func (c *Cluster) advance(now time.Time) {
	for c.events.Len() > 0 && !c.events[0].at.After(now) {
		e := heap.Pop(&c.events).(*event)
		c.refreshThrough(e.at.Add(-time.Nanosecond))
		e.fn()
	}
	c.refreshThrough(now)
}

// nodeNamed is the node a call's path names.
func (c *Cluster) nodeNamed(name string) (*node, error) {
	nd := c.nodes[name]
	if nd == nil {
		return nil, serverErr(noNodeText(name))
	}
	return nd, nil
}

// vmOn is the VM a call's path names. PVE finds a VM by its config file in the node's
// directory, so a VM on another node does not exist for this call.
func (c *Cluster) vmOn(node string, vmid int) (*vm, error) {
	if _, err := c.nodeNamed(node); err != nil {
		return nil, err
	}
	if err := checkVMID("vmid", vmid); err != nil {
		return nil, err
	}
	g := c.vms[vmid]
	if g == nil || g.node != node {
		return nil, serverErr(noConfigText(node, vmid))
	}
	return g, nil
}
