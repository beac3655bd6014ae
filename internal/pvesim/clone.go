package pvesim

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// Clone clones VM vmid into params.NewID, following PVE's timeline:
//
//   - the checks before the worker forks are synchronous errors, among them a NewID whose config
//     file exists on this node;
//   - except when that config is a clone's that started less than 1 s ago: both requests passed
//     the check before the first worker wrote its temporary config. The second worker waits
//     for the new config's flock with PVE's 1 s timeout and fails with "can't lock file
//     '/var/lock/qemu-server/lock-<newid>.conf' - got timeout"; if the first clone ends within
//     that second, the second worker takes the flock, checks again and fails with "unable to
//     create VM <newid>: config file already exists" (or, if the first failed and removed its
//     VM, clones). A worker that fails this way creates and removes nothing;
//   - a NewID used on another node fails the task: pmxcfs refuses the temporary config;
//   - otherwise the new VM exists at once with a temporary config (no name, "lock: clone");
//     the worker then clones the disks one by one in drive-key order. Each disk is allocated
//     under its storage's lock (see Options.StorageLockHold; a worker that waits more than 10 s
//     for it fails the clone with PVE's lock timeout), then copied, taking a share of the task's
//     duration in proportion to its size, and after each the worker rewrites the config with
//     everything so far (name, description, new MACs and the disks cloned, still locked);
//     when the last is done the lock is removed (and the VM moved to the target node, if one
//     was given). So with a single disk the name and description appear only as the task ends;
//   - a cloud-init disk is allocated anew, linked clone or not, under the fixed name
//     vm-<newid>-cloudinit, so a leftover one on an LVM storage fails the clone with lvcreate's
//     "already exists"; an iSCSI storage allocates nothing and fails it at its first disk;
//   - a stalled clone never gets past the temporary config; a crashed one ends with the full
//     config and the lock left;
//   - a clone that fails removes the new VM and the disks it allocated when it ends, but the
//     disks of one made to leak them (LeakClone), which stay with no VM. One that
//     fails for lack of space or by FailTask knows it from the start: it allocates nothing and
//     takes no storage lock, and ends after its duration.
//
// While the clone runs it holds the new VM's config flock and a shared flock on the source, so
// any number of clones of one template run at once.
func (c *Cluster) Clone(ctx context.Context, node string, vmid int, params pve.CloneParams) (pve.UPID, error) {
	return call(c, ctx, Call{Method: "Clone", Node: node, VMID: vmid}, func(now time.Time) (pve.UPID, error) {
		return c.clone(now, node, vmid, params)
	})
}

// cloneDisk is one disk of a clone: where it goes and what the new config says about it.
type cloneDisk struct {
	key   string
	st    *storage
	name  string
	size  int64
	drive string
	// cloudinit is a cloud-init disk: a new volume under a fixed name, even in a linked clone.
	cloudinit bool
}

// cloneFlockTimeout is how long a clone waits for the flock of its new VM's config.
const cloneFlockTimeout = time.Second

func (c *Cluster) clone(now time.Time, node string, vmid int, p pve.CloneParams) (pve.UPID, error) {
	src, disks, err := c.checkClone(node, vmid, p)
	if err != nil {
		return "", err
	}
	other := c.vms[p.NewID]
	switch {
	case other == nil:
		t := c.startTask(now, node, "qmclone", strconv.Itoa(vmid), spaceExit(disks, p.Full))
		c.logClone(t, now, src, p, disks)
		c.runClone(t, now, src, p, disks)
		return t.upid, nil
	case other.node != node:
		// The early check sees only this node's config files; pmxcfs refuses the temporary
		// config of a VMID another node has.
		t := c.startTask(now, node, "qmclone", strconv.Itoa(vmid), fileExistsText(node, p.NewID))
		c.logClone(t, now, src, p, disks)
		return t.upid, nil
	case other.clone != nil && now.Sub(other.cloneStart) < cloneFlockTimeout:
		return c.waitForFlock(now, src, p, disks, other.clone), nil
	}
	return "", serverErr(configExistsText(p.NewID))
}

func configExistsText(newid int) string {
	return fmt.Sprintf("unable to create VM %d: config file already exists", newid)
}

func fileExistsText(node string, newid int) string {
	return fmt.Sprintf("close (rename) atomic file '/etc/pve/nodes/%s/qemu-server/%d.conf' failed: File exists", node, newid)
}

// waitForFlock starts the worker of a clone that lost the race for its new VMID to clone
// winner, which holds the new config's flock until it ends. The worker holds the source's
// shared flock while it waits, up to cloneFlockTimeout.
func (c *Cluster) waitForFlock(now time.Time, src *vm, p pve.CloneParams, disks []cloneDisk, winner *task) pve.UPID {
	t := c.startTask(now, src.node, "qmclone", strconv.Itoa(src.id), flockText(p.NewID))
	t.end = time.Time{}
	rec := c.logClone(t, now, src, p, disks)
	rec.copying = time.Time{}
	deadline := now.Add(cloneFlockTimeout)
	src.cloneSources++
	waiting := true
	c.onEnd(winner, func() {
		if !waiting || !winner.end.Before(deadline) {
			return
		}
		waiting = false
		src.cloneSources--
		c.afterFlock(rec, winner.end, src.node, src.id, p)
	})
	c.at(deadline, func() {
		if !waiting {
			return
		}
		waiting = false
		src.cloneSources--
		c.setEnd(t, deadline)
	})
	return t.upid
}

// afterFlock is the worker of clone rec taking the new config's flock at now, after the clone
// that held it ended: it runs the checks again, and clones if they pass.
func (c *Cluster) afterFlock(rec *cloneRecord, now time.Time, node string, vmid int, p pve.CloneParams) {
	t := rec.t
	rec.copying = now
	src, disks, err := c.checkClone(node, vmid, p)
	other := c.vms[p.NewID]
	switch {
	case err != nil:
		t.exit = errText(err)
	case other != nil && other.node == node:
		t.exit = configExistsText(p.NewID)
	case other != nil:
		t.exit = fileExistsText(node, p.NewID)
	default:
		t.exit = c.taskExit("qmclone", spaceExit(disks, p.Full))
		t.end = now.Add(c.durations["qmclone"])
		c.runClone(t, now, src, p, disks)
		return
	}
	c.setEnd(t, now)
}

// errText is the text a worker's task ends with when it dies of err.
func errText(err error) string {
	if ae, ok := err.(*pve.APIError); ok && ae.Message != "" {
		return ae.Message
	}
	return err.Error()
}

// checkClone is the clone's synchronous checks, in PVE's order. It returns the source and the
// plan for its disks.
func (c *Cluster) checkClone(node string, vmid int, p pve.CloneParams) (*vm, []cloneDisk, error) {
	if err := c.allow(vmPath(vmid), "VM.Clone"); err != nil {
		return nil, nil, err
	}
	if err := c.allowAllocate(p.NewID, p.Pool); err != nil {
		return nil, nil, err
	}
	nd, err := c.nodeNamed(node)
	if err != nil {
		return nil, nil, err
	}
	if err := checkVMID("newid", p.NewID); err != nil {
		return nil, nil, err
	}
	if p.Name != "" {
		if _, msg := checkName("name", p.Name); msg != "" {
			return nil, nil, paramErr(map[string]string{"name": msg})
		}
	}
	// qemu-server's clone_vm checks the pool first of its early checks ($load_and_check:
	// check_pool_exist, then the target node, then the storage), and pve-access-control's
	// RPCEnvironment::check_pool_exist raises it as a permission error: 403
	// "Permission check failed (pool '<pool>' does not exist)".
	if p.Pool != "" && !c.pools[p.Pool] {
		return nil, nil, apiErr(http.StatusForbidden, "Permission check failed (pool '%s' does not exist)", p.Pool)
	}
	if p.Target != "" && c.nodes[p.Target] == nil {
		return nil, nil, serverErr(fmt.Sprintf("no such cluster node '%s'", p.Target))
	}
	var dest *storage
	if p.Storage != "" {
		if dest, err = c.storageOn(node, p.Storage); err != nil {
			return nil, nil, err
		}
		if !dest.content["images"] {
			return nil, nil, paramErr(map[string]string{"storage": fmt.Sprintf("storage '%s' does not support vm images", p.Storage)})
		}
	}
	src, err := c.vmOn(node, vmid)
	if err != nil {
		return nil, nil, err
	}
	if lock := src.cfg["lock"]; lock != "" {
		return nil, nil, serverErr(lockedText(lock))
	}
	if !p.Full && dest != nil {
		return nil, nil, serverErr("parameter 'storage' not allowed for linked clones")
	}
	disks, err := c.planDisks(nd, src, p.NewID, dest, p.Full)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range disks {
		if err := c.allow("/storage/"+d.st.ID, "Datastore.AllocateSpace"); err != nil {
			return nil, nil, err
		}
	}
	// clone_vm checks the bridges of the config it copies, after its storages.
	if err := c.allowBridges(src.cfg); err != nil {
		return nil, nil, err
	}
	if p.Target != "" && p.Target != node && !c.sharedClone(nd, src, disks) {
		return nil, nil, serverErr(fmt.Sprintf("can't clone VM to node '%s' (VM uses local storage)", p.Target))
	}
	return src, disks, nil
}

// runClone is clone task t's worker from the moment it holds the new config's flock, from, to
// its end: it writes the temporary config and starts on the disks. t's exit and end are the
// clone's outcome as known at from, without the faults for its new VMID, which it applies.
func (c *Cluster) runClone(t *task, from time.Time, src *vm, p pve.CloneParams, disks []cloneDisk) {
	crashed := c.faults.crashClone[p.NewID] && succeeded(t.exit)
	stalled := (c.stall || c.faults.stallClone[p.NewID]) && succeeded(t.exit)
	leaked := c.faults.leakClone[p.NewID] && succeeded(t.exit) && !crashed && !stalled
	delete(c.faults.crashClone, p.NewID)
	delete(c.faults.leakClone, p.NewID)
	delete(c.faults.stallClone, p.NewID)
	if crashed {
		t.exit = crashedExit
	}

	g := &vm{
		id:         p.NewID,
		node:       src.node,
		cfg:        pve.VMConfig{"description": description(" qmclone temporary file"), "lock": "clone"},
		clone:      t,
		cloneStart: from,
	}
	c.vms[p.NewID] = g
	src.cloneSources++
	full := cloneConfig(src, p, disks)
	full["lock"] = "clone"
	r := &cloneRun{t: t, src: src, g: g, p: p, disks: disks, from: from, crashed: crashed, leaked: leaked && len(disks) > 0}
	switch {
	case stalled:
		// Stuck on its storage after allocating: the task never ends.
		t.end = time.Time{}
		for _, d := range disks {
			d.st.volumes[d.name] = &volume{size: d.size, ctime: from}
		}
	case (succeeded(t.exit) || crashed) && len(disks) > 0:
		// The disks decide when it ends, and whether it fails on a storage's lock.
		t.end = time.Time{}
		r.plan(full, c.durations["qmclone"])
	}
	c.onEnd(t, func() { c.endClone(r, full) })
	if r.copied != nil {
		c.nextDisk(r, 0, from)
	}
}

// endClone is clone r's end: it gives back the flocks and the space it reserved, and keeps or
// removes the new VM and its disks as the clone's exit says.
func (c *Cluster) endClone(r *cloneRun, full pve.VMConfig) {
	r.src.cloneSources--
	r.g.clone = nil
	if r.copied != nil {
		for _, d := range r.disks[r.allocated:] {
			d.st.reserved -= d.size
		}
	}
	failed := !succeeded(r.t.exit) && !r.crashed
	if failed && !r.leaked {
		for _, d := range r.disks[:r.allocated] {
			delete(d.st.volumes, d.name)
		}
	}
	if c.vms[r.p.NewID] != r.g {
		return
	}
	switch {
	case r.crashed:
		// It got as far as writing the full config.
		r.g.cfg = full
	case failed:
		delete(c.vms, r.p.NewID)
	default:
		delete(full, "lock")
		r.g.cfg = full
		r.g.pool = r.p.Pool // PVE adds the clone to its pool when it has finished
		if r.p.Target != "" {
			r.g.node = r.p.Target
		}
	}
}

// planDisks decides where each of the source's disks goes: onto dest (or the disk's own
// storage) under the first free vm-<newid>-disk-N name, or for a linked clone as a child of
// the template's base volume.
func (c *Cluster) planDisks(nd *node, src *vm, newid int, dest *storage, full bool) ([]cloneDisk, error) {
	var disks []cloneDisk
	taken := make(map[*storage]map[string]bool)
	for _, key := range slices.Sorted(maps.Keys(src.cfg)) {
		value := src.cfg[key]
		cloudinit := isCloudInit(value)
		if !isDiskKey(key) || isCDROM(value) && !cloudinit {
			continue
		}
		volid := driveVolID(value)
		sid, srcName, ok := strings.Cut(volid, ":")
		st := nd.storages[sid]
		if !ok || st == nil {
			return nil, serverErr(noStorageText(sid))
		}
		if cloudinit {
			// clone_disk allocates it anew under a fixed name, with no data to copy.
			if full && dest != nil {
				st = dest
			}
			name := fmt.Sprintf("vm-%d-cloudinit", newid)
			disks = append(disks, cloneDisk{key: key, st: st, name: name, size: cloudInitSize,
				drive: withDrive(value, st.volid(name), cloudInitSize), cloudinit: true})
			continue
		}
		size := driveSize(value)
		if v := st.volumes[srcName]; size == 0 && v != nil {
			size = v.size
		}
		if !full && (st.Type != "lvmthin" || !strings.HasPrefix(srcName, "base-")) {
			return nil, serverErr(fmt.Sprintf("Linked clone feature is not supported for '%s' (%s)", volid, key))
		}
		if full && dest != nil {
			st = dest
		}
		if taken[st] == nil {
			taken[st] = make(map[string]bool)
		}
		name := freeDiskName(st, newid, taken[st])
		taken[st][name] = true
		if !full {
			name = srcName + "/" + name
		}
		disks = append(disks, cloneDisk{key: key, st: st, name: name, size: size, drive: withDrive(value, st.volid(name), size)})
	}
	return disks, nil
}

// freeDiskName is PVE's find_free_diskname: the first vm-<vmid>-disk-N no volume on the
// storage (a linked clone's included) and no disk of this clone uses.
func freeDiskName(st *storage, vmid int, taken map[string]bool) string {
	prefix := fmt.Sprintf("vm-%d-disk-", vmid)
	used := make(map[string]bool)
	for name := range st.volumes {
		_, base, ok := strings.Cut(name, "/")
		if !ok {
			base = name
		}
		if strings.HasPrefix(base, prefix) {
			used[base] = true
		}
	}
	for n := 0; ; n++ {
		name := fmt.Sprintf("vm-%d-disk-%d", vmid, n)
		if !used[name] && !taken[name] {
			return name
		}
	}
}

// sharedClone reports whether every volume of the clone is on shared storage, which a clone
// to another node requires; an ISO on a local storage counts too.
func (c *Cluster) sharedClone(nd *node, src *vm, disks []cloneDisk) bool {
	for _, d := range disks {
		if !d.st.Shared {
			return false
		}
	}
	for key, value := range src.cfg {
		if !isDiskKey(key) || !isCDROM(value) || isCloudInit(value) {
			continue
		}
		volid := driveVolID(value)
		if volid == "none" {
			continue
		}
		sid, _, _ := strings.Cut(volid, ":")
		if st := nd.storages[sid]; st == nil || !st.Shared {
			return false
		}
	}
	return true
}

// spaceExit is the clone's outcome as far as space goes: a full clone allocates its disks one
// by one and fails on the first that does not fit, with LVM's message (sizes in KiB).
func spaceExit(disks []cloneDisk, full bool) string {
	if !full {
		return "OK"
	}
	planned := make(map[*storage]int64)
	for _, d := range disks {
		free := d.st.avail() - planned[d.st]
		if free < d.size {
			return fmt.Sprintf("clone failed: not enough free space (%d < %d)", free/1024, d.size/1024)
		}
		planned[d.st] += d.size
	}
	return "OK"
}

// cloneConfig is the new VM's config: the source's, without what PVE drops (template flag,
// lock, unused disks, snapshot state), with new disks, new NIC MACs, a new SMBIOS UUID and
// generation ID, and the clone's name and description. PVE's default name is
// "Copy-of-VM-<source name>".
func cloneConfig(src *vm, p pve.CloneParams, disks []cloneDisk) pve.VMConfig {
	cfg := pve.VMConfig{}
	for key, value := range src.cfg {
		switch {
		case key == "template", key == "lock", key == "parent", key == "snaptime", key == "vmstate",
			strings.HasPrefix(key, "unused"):
			continue
		case netKeyRE.MatchString(key):
			value = withNetMAC(value, macFor(p.NewID, key))
		case key == "smbios1":
			value = withSMBIOSUUID(value, uuidFor(p.NewID, key))
		case key == "vmgenid":
			value = uuidFor(p.NewID, key)
		}
		cfg[key] = value
	}
	for _, d := range disks {
		cfg[d.key] = d.drive
	}
	cfg["name"] = p.Name
	if p.Name == "" {
		srcName := src.cfg["name"]
		if srcName == "" {
			srcName = strconv.Itoa(src.id)
		}
		cfg["name"] = "Copy-of-VM-" + srcName
	}
	if p.Description != "" {
		cfg["description"] = description(p.Description)
	}
	return cfg
}

func withSMBIOSUUID(value, uuid string) string {
	parts := strings.Split(value, ",")
	for i, part := range parts {
		if strings.HasPrefix(part, "uuid=") {
			parts[i] = "uuid=" + uuid
			return strings.Join(parts, ",")
		}
	}
	return strings.Join(append(parts, "uuid="+uuid), ",")
}
