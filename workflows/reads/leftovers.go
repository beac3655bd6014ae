package reads

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
)

// GarbageDisk is a disk image of a VMID in pveflow's range that no VM of the cluster has: one
// that a failed clone could not free (qemu-server src/PVE/API2/Qemu.pm clone_vm: on error
// each new volume is freed with vdisk_free and a failure is only warned of, then the config is
// unlinked), or that a destroy left (src/PVE/QemuServer.pm destroy_vm: "Could not remove disk
// ..., check manually").
type GarbageDisk struct {
	GarbageVolume
	VMID int `json:"vmid"`
}

// CloneLock is a VM of pveflow's (its mark, or with none yet its VMID in pveflow's range)
// that PVE shows with "lock: clone". pveflow cannot clear the lock: PVE takes skiplock from
// root@pam alone (qemu-server src/PVE/API2/Qemu.pm: "Only root may use this option."), and an
// API token is never root@pam. Stale ones are reported with the command that clears them.
type CloneLock struct {
	VMID int    `json:"vmid"`
	Node string `json:"node"`
	Name string `json:"name,omitempty"`
	// UID is the UID the VM's mark carries; empty for a clone that has not written the mark
	// yet (PVE's temporary config), which only its VMID range ties to pveflow.
	UID string `json:"uid,omitempty"`
	// Stale says that no clone task runs on the nodes read, and none ended within the grace:
	// nothing will clear the lock.
	Stale bool `json:"stale"`
	// LastCloneEnd is when the last clone task on the nodes read ended: the lock has had no
	// clone task at least since then. Zero when their task lists hold none.
	LastCloneEnd time.Time `json:"lastCloneEnd,omitzero"`
	// Age is how long the lock has been without a clone task, by LastCloneEnd; zero when that
	// is not known.
	Age time.Duration `json:"age,omitempty"`
	// Detail says why a lock is not stale, or what pveflow does with the VM once unlocked.
	Detail string `json:"detail,omitempty"`
	// Command is what the operator runs as root on Node to clear a stale lock.
	Command string `json:"command,omitempty"`
}

// Leftovers are what failed clones and destroys left on the cluster.
type Leftovers struct {
	// Disks are the orphan disks older than the grace, each GarbageFound, or GarbageSkipped
	// with why.
	Disks []GarbageDisk
	// YoungDisks would be orphans, but are younger than the grace.
	YoungDisks []GarbageDisk
	// CloneLocks are the VMs of pveflow's with "lock: clone".
	CloneLocks []CloneLock
	// Unlisted are the storages whose content could not be listed, with why.
	Unlisted []string
}

// diskNameRE is the name of a VM's disk image as qemu-server allocates it, on any storage
// (vm-<vmid>-disk-N, with the format's extension on a directory storage, under <vmid>/), and
// the cloud-init disk a clone allocates: the first group is the VMID.
var diskNameRE = regexp.MustCompile(`^(?:\d+/)?vm-(\d+)-(?:disk-\d+|cloudinit)(?:\.(?:raw|qcow2|vmdk))?$`)

// diskVMID is the VMID of a disk image's volume ID, or 0 when its name is not one qemu-server
// gives a VM's disk.
func diskVMID(volid string) int {
	_, name, _ := strings.Cut(volid, ":")
	m := diskNameRE.FindStringSubmatch(name)
	if m == nil {
		return 0
	}
	vmid, _ := strconv.Atoi(m[1])
	return vmid
}

// LeftoverFinder finds leftovers with the settings of a run, on the cluster resources it
// read.
type LeftoverFinder struct {
	Ctx       workflow.Context
	Settings  core.Settings
	Resources []pve.VMResource
	// cutoff is the time before which a disk must have been made, and the last clone task
	// ended, to count.
	Cutoff time.Time
	Step   func(string)
}

// Find lists the orphan disks and the clone locks.
//
// A disk is an orphan when its name is a VM disk's (diskNameRE), its VMID is in
// proxmox.vmidRange, the cluster resources list no guest of that VMID (of any kind, on any
// node), the config of that VMID reads as absent on every configured node (resources is a
// cache; the config is what PVE itself reads), and its ctime is older than the grace. A clone
// writes its VM's config before it allocates a disk and a failed one frees its disks before it
// removes the config, and a destroy removes the disks before the config: so a clone or a
// destroy in progress always shows a VM, and the grace covers the rest.
func (f *LeftoverFinder) Find() (Leftovers, error) {
	var out Leftovers
	guests := make(map[int]bool, len(f.Resources))
	for _, r := range f.Resources {
		guests[r.VMID] = true
	}
	storages, err := f.diskStorages()
	if err != nil {
		return out, err
	}
	now := workflow.Now(f.Ctx)
	var a *activities.Activities
	confirmed := map[int]string{} // VMID: why it is not an orphan's, "" when confirmed
	for _, node := range f.Settings.Nodes {
		for _, storage := range storages {
			summary := fmt.Sprintf("list disk images on storage %s on node %s", storage, node)
			f.Step(summary)
			var vols []pve.StorageVolume
			err := core.Execute(f.Ctx, f.Settings.ReadOptions(summary), a.StorageContent,
				activities.StorageContentRequest{StorageRef: activities.StorageRef{Node: node, Storage: storage}, Content: "images"}).Get(f.Ctx, &vols)
			if temporal.IsCanceledError(err) {
				return out, err
			}
			if err != nil {
				// A template's storage may be local to another node: this node has none.
				out.Unlisted = append(out.Unlisted, core.FailureText(summary, err))
				continue
			}
			for _, v := range vols {
				vmid := diskVMID(v.VolID)
				if vmid == 0 || vmid < f.Settings.VMIDRange.Min || vmid > f.Settings.VMIDRange.Max || guests[vmid] ||
					slices.ContainsFunc(out.Disks, func(d GarbageDisk) bool { return d.VolID == v.VolID && d.Node == node }) {
					continue
				}
				d := GarbageDisk{GarbageVolume: FoundVolume(v, node, storage), VMID: vmid}
				switch {
				case v.CTime == 0:
					d.Outcome, d.Detail, d.CreatedAt = GarbageSkipped, "its storage gives no creation time, so its age is not known: delete it by hand", time.Time{}
				case d.CreatedAt.After(f.Cutoff):
					d.SkipYoung(now)
					out.YoungDisks = append(out.YoungDisks, d)
					continue
				default:
					why, asked := confirmed[vmid]
					if !asked {
						if why, err = f.NoVM(vmid); err != nil {
							return out, err
						}
						confirmed[vmid] = why
					}
					if why != "" {
						d.Outcome, d.Detail = GarbageSkipped, why
					}
				}
				out.Disks = append(out.Disks, d)
			}
		}
	}
	out.CloneLocks, err = f.cloneLocks()
	return out, err
}

// diskStorages are the storages a clone allocates disks on: proxmox.storage, else the boot
// disks' storages of the templates the cluster resources list (a template whose config does
// not read is left out).
func (f *LeftoverFinder) diskStorages() ([]string, error) {
	if f.Settings.Storage != "" {
		return []string{f.Settings.Storage}, nil
	}
	var storages []string
	for _, r := range f.Resources {
		if r.Type != "qemu" || !r.Template {
			continue
		}
		cfg, _, err := f.readConfig(activities.VMRef{Node: r.Node, VMID: r.VMID}, "read config of template ")
		if temporal.IsCanceledError(err) {
			return nil, err
		}
		if err != nil {
			continue
		}
		if storage, err := core.BootStorage(cfg); err == nil && !slices.Contains(storages, storage) {
			storages = append(storages, storage)
		}
	}
	slices.Sort(storages)
	return storages, nil
}

// readConfig reads the config of ref as a step named what and ref, and returns that name for
// the caller's messages.
func (f *LeftoverFinder) readConfig(ref activities.VMRef, what string) (pve.VMConfig, string, error) {
	var a *activities.Activities
	summary := what + ref.String()
	f.Step(summary)
	var cfg pve.VMConfig
	err := core.Execute(f.Ctx, f.Settings.ReadOptions(summary), a.VMConfig, activities.VMConfigRequest{VMRef: ref}).Get(f.Ctx, &cfg)
	return cfg, summary, err
}

// NoVM reads the config of vmid on every configured node: "" when it is absent on each, else
// why the disks of vmid are not taken.
func (f *LeftoverFinder) NoVM(vmid int) (string, error) {
	for _, node := range f.Settings.Nodes {
		_, summary, err := f.readConfig(activities.VMRef{Node: node, VMID: vmid}, "read config of ")
		switch {
		case temporal.IsCanceledError(err):
			return "", err
		case core.IsType(err, activities.ErrNotFound):
		case err != nil:
			return fmt.Sprintf("whether VM %d exists could not be read: %s", vmid, core.FailureText(summary, err)), nil
		default:
			return fmt.Sprintf("VM %d exists on node %s (cluster resources did not list it yet)", vmid, node), nil
		}
	}
	return "", nil
}

// cloneLocks are the VMs of pveflow's that PVE shows with "lock: clone": those whose config
// carries pveflow's mark, or with no mark (a clone's temporary config) a VMID in pveflow's
// range. One is stale when no clone task runs on the configured nodes or the VM's node, and
// the last one ended before the grace. A clone's task bears the VMID of its source, not of the
// new VM, so which clone locked a VM cannot be told: any clone task running keeps every lock
// from being stale. The task lists show the token's own tasks, and others' only with
// Sys.Audit on the node.
func (f *LeftoverFinder) cloneLocks() ([]CloneLock, error) {
	var locks []CloneLock
	nodes := slices.Clone(f.Settings.Nodes)
	for _, r := range f.Resources {
		if r.Type != "qemu" || r.Lock != "clone" {
			continue
		}
		cfg, summary, err := f.readConfig(activities.VMRef{Node: r.Node, VMID: r.VMID}, "read config of ")
		switch {
		case temporal.IsCanceledError(err):
			return nil, err
		case core.IsType(err, activities.ErrNotFound):
			continue // gone since resources listed it
		case err != nil:
			if r.VMID >= f.Settings.VMIDRange.Min && r.VMID <= f.Settings.VMIDRange.Max {
				locks = append(locks, CloneLock{VMID: r.VMID, Node: r.Node, Name: r.Name, Detail: core.FailureText(summary, err)})
			}
			continue
		}
		mark, managed := proxy.ParseDescription(cfg["description"])
		inRange := r.VMID >= f.Settings.VMIDRange.Min && r.VMID <= f.Settings.VMIDRange.Max
		if cfg["lock"] != "clone" || !managed && !inRange {
			continue
		}
		locks = append(locks, CloneLock{VMID: r.VMID, Node: r.Node, Name: cfg["name"], UID: mark.UID})
		if !slices.Contains(nodes, r.Node) {
			nodes = append(nodes, r.Node)
		}
	}
	if len(locks) == 0 {
		return locks, nil
	}
	running, lastEnd, why := f.cloneTasks(nodes)
	now := workflow.Now(f.Ctx)
	for i := range locks {
		l := &locks[i]
		if l.Detail != "" {
			continue
		}
		switch {
		case why != "":
			l.Detail = why
		case running != "":
			l.Detail = running
		case lastEnd.After(f.Cutoff):
			l.LastCloneEnd = lastEnd
			l.Detail = fmt.Sprintf("a clone task ended %s ago, within the grace period", now.Sub(lastEnd).Round(time.Second))
		default:
			l.Stale, l.LastCloneEnd = true, lastEnd
			if !lastEnd.IsZero() {
				l.Age = now.Sub(lastEnd)
			}
			l.Command = fmt.Sprintf("qm unlock %d", l.VMID)
			l.Detail = fmt.Sprintf("no clone task runs: run '%s' as root on node %s (PVE lets only root@pam skip a lock)", l.Command, l.Node)
			if l.UID != "" {
				l.Detail += "; then the VM is collected as any VM of its UID"
			} else {
				l.Detail += "; it carries no mark, so pveflow never takes it: check it is pveflow's, then 'qm destroy " + strconv.Itoa(l.VMID) + "'"
			}
		}
	}
	return locks, nil
}

// cloneTasks reads the clone tasks of nodes: a text naming one that runs, else when the last
// one ended (zero when none is listed); or why a task list could not be read.
func (f *LeftoverFinder) cloneTasks(nodes []string) (running string, lastEnd time.Time, why string) {
	var a *activities.Activities
	for _, node := range nodes {
		summary := "list the clone tasks of node " + node
		f.Step(summary)
		var tasks []pve.TaskListEntry
		err := core.Execute(f.Ctx, f.Settings.ReadOptions(summary), a.NodeTasks,
			activities.NodeTasksRequest{Node: node, Source: "all", TypeFilter: "qmclone"}).Get(f.Ctx, &tasks)
		if err != nil {
			return "", time.Time{}, core.FailureText(summary, err)
		}
		for _, t := range tasks {
			if t.Running() {
				running = fmt.Sprintf("clone task %s runs on node %s: it may be this VM's", t.UPID, node)
				continue
			}
			if end := time.Unix(t.EndTime, 0).UTC(); end.After(lastEnd) {
				lastEnd = end
			}
		}
	}
	return running, lastEnd, ""
}
