package pvesim

import (
	"fmt"
	"maps"
	"regexp"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// storageLockTimeout is how long a worker waits for a storage's lock before it gives up: the
// default timeout of PVE's lock_file (a local storage's flock) and of pmxcfs's cfs_lock (a
// shared storage's cluster lock).
const storageLockTimeout = 10 * time.Second

// minDiskWeight is the size a disk of unknown size counts as when a clone's duration is shared
// among its disks: a small share, as an EFI vars disk takes.
const minDiskWeight = 1 << 20

// cloudInitSize is the size of a cloud-init disk, which qemu-server allocates at a fixed 4 MiB.
const cloudInitSize = 4 * mib

// cloudInitRE is qemu-server's drive_is_cloudinit on a drive's volume ID.
var cloudInitRE = regexp.MustCompile(`[:/](?:vm-\d+-)?cloudinit(?:\.(?:raw|qcow|qcow2|qed|vmdk|cloop))?$`)

// isCloudInit reports whether a drive is a cloud-init disk. It is a CD-ROM to the guest, but a
// clone allocates it like a disk.
func isCloudInit(value string) bool { return cloudInitRE.MatchString(driveVolID(value)) }

// cloneRun is a clone's worker from the moment it holds the new config's flock until it ends.
// It takes the disks one by one: it asks for the lock of the disk's storage, allocates the disk
// while it holds it, copies it, and writes the config.
type cloneRun struct {
	t     *task
	src   *vm
	g     *vm // the new VM
	p     pve.CloneParams
	disks []cloneDisk
	from  time.Time
	// copied is when each disk is copied, counted from from, in a clone that never waits: the
	// disks share the task's duration in proportion to their sizes, and the last ends with it.
	// Nil for a clone that does not take disks one by one: one without disks, a stalled one,
	// one that fails from the start.
	copied []time.Duration
	// configs is the config written after each disk: all but the disks still to come.
	configs []pve.VMConfig
	// waited is how long the disks so far waited for their storage's lock and held it.
	waited time.Duration
	// allocated counts the disks allocated; a failed clone frees them.
	allocated int
	// crashed is a clone that ends as if its host crashed, unless it fails first.
	crashed bool
	// leaked is a clone that fails after its last disk and cannot free its disks (LeakClone).
	leaked bool
}

// plan spreads span over the disks and reserves their space, so that other clones see it taken
// while this one has not allocated them yet. full is the config after the last disk.
func (r *cloneRun) plan(full pve.VMConfig, span time.Duration) {
	cfg := maps.Clone(full)
	var total, done float64
	for _, d := range r.disks {
		delete(cfg, d.key)
		total += float64(max(d.size, minDiskWeight))
		d.st.reserved += d.size
	}
	r.copied = make([]time.Duration, len(r.disks))
	r.configs = make([]pve.VMConfig, len(r.disks))
	for i, d := range r.disks {
		done += float64(max(d.size, minDiskWeight))
		r.copied[i] = span
		if i < len(r.disks)-1 {
			r.copied[i] = min(time.Duration(float64(span)*done/total), span)
		}
		cfg[d.key] = d.drive
		r.configs[i] = maps.Clone(cfg)
	}
}

// nextDisk is clone r at time at, done with the disks before disk i: it asks for disk i's
// storage lock.
func (c *Cluster) nextDisk(r *cloneRun, i int, at time.Time) {
	d := r.disks[i]
	// Requests reach a lock in time order, so the lock is a queue: a request is granted when
	// the grants before it are done.
	grant := at
	if d.st.lockFree.After(grant) {
		grant = d.st.lockFree
	}
	if grant.Sub(at) > storageLockTimeout {
		c.failClone(r, at.Add(storageLockTimeout), storageLockText(d.st))
		return
	}
	d.st.lockFree = grant.Add(c.lockHold)
	c.at(grant, func() { c.allocate(r, i, at, grant) })
}

// allocate is clone r allocating disk i, which it asked for at asked, under the storage's lock
// it was granted at grant; then it copies the disk and writes the config.
func (c *Cluster) allocate(r *cloneRun, i int, asked, grant time.Time) {
	d := r.disks[i]
	released := grant.Add(c.lockHold)
	r.waited += released.Sub(asked)
	if text := allocProblem(d); text != "" {
		c.failClone(r, released, text)
		return
	}
	d.st.reserved -= d.size
	d.st.volumes[d.name] = &volume{size: d.size, ctime: grant}
	r.allocated++
	done := r.from.Add(r.copied[i] + r.waited)
	cfg := r.configs[i]
	c.at(done, func() {
		if c.vms[r.g.id] == r.g {
			r.g.cfg = cfg
		}
	})
	if i == len(r.disks)-1 {
		if r.leaked {
			c.failClone(r, done, "interrupted by signal")
			return
		}
		c.setEnd(r.t, done)
		return
	}
	c.at(done, func() { c.nextDisk(r, i+1, done) })
}

// failClone ends clone r at end with "clone failed: <text>", as PVE's clone wraps what its
// worker died of.
func (c *Cluster) failClone(r *cloneRun, end time.Time, text string) {
	r.t.exit = "clone failed: " + text
	r.crashed = false
	c.setEnd(r.t, end)
}

// allocProblem is why a storage plugin refuses to allocate disk d, empty when it does not. An
// iSCSI storage allocates nothing. A cloud-init disk has a fixed name, so a leftover one is in
// its way: LVM's lvcreate says so (the model calls every LVM volume group "pve", as PVE's
// installer does); other storage types are not modelled here and allocate it anew.
func allocProblem(d cloneDisk) string {
	switch {
	case d.st.Type == "iscsi" || d.st.Type == "iscsidirect":
		return "can't allocate space in iscsi storage"
	case d.cloudinit && d.st.volumes[d.name] != nil && (d.st.Type == "lvm" || d.st.Type == "lvmthin"):
		return fmt.Sprintf(`lvcreate 'pve/%s' error:   Logical Volume "%s" already exists in volume group "pve"`, d.name, d.name)
	}
	return ""
}

// storageLockText is what a worker dies with that waited storageLockTimeout for st's lock: a
// node's flock for a local storage, pmxcfs's cluster lock for a shared one.
func storageLockText(st *storage) string {
	if st.Shared {
		return fmt.Sprintf("cfs-lock 'storage-%s' error: got lock request timeout", st.ID)
	}
	return fmt.Sprintf("can't lock file '/var/lock/pve-manager/pve-storage-%s' - got timeout", st.ID)
}
