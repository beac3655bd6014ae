package pvesim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// Migrate moves a VM to another node as PVE's migrate_vm and its qmigrate task do
// (qemu-server src/PVE/API2/Qemu.pm migrate_vm, src/PVE/QemuMigrate.pm, pve-guest-common
// src/PVE/AbstractMigrate.pm). The request is refused at once for the local node as target, a
// node not in the cluster, a locked VM, a running VM without online, and a volume whose
// storage the target does not have. The task fails ("migration aborted") when a volume cannot
// go: an ISO on storage that is not shared ("can't migrate local disk '<volid>': local cdrom
// image"), a physical CD-ROM ("can't migrate local cdrom drive"), or, running, a disk on such
// storage without with-local-disks ("can't live migrate attached local disks without
// with-local-disks option"). PVE writes those reasons to the task log; the simulator's tasks
// have only their exit status.
//
// While it runs the VM holds the lock "migrate". When it ends the VM is on the target, running
// as it was (the guest keeps its state: an online migration moves the running QEMU), and its
// disks on storage that is not shared moved along.
func (c *Cluster) Migrate(ctx context.Context, node string, vmid int, p pve.MigrateParams) (pve.UPID, error) {
	return call(c, ctx, Call{Method: "Migrate", Node: node, VMID: vmid}, func(now time.Time) (pve.UPID, error) {
		if err := c.allow(vmPath(vmid), "VM.Migrate"); err != nil {
			return "", err
		}
		if _, err := c.nodeNamed(node); err != nil {
			return "", err
		}
		if p.Target == node {
			return "", paramErr(map[string]string{"target": "target is local node."})
		}
		if c.nodes[p.Target] == nil {
			return "", serverErr(fmt.Sprintf("no such cluster node '%s'", p.Target))
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return "", err
		}
		if lock := g.cfg["lock"]; lock != "" {
			return "", serverErr(lockedText(lock))
		}
		if g.running && !p.Online {
			return "", serverErr("can't migrate running VM without --online")
		}
		for _, key := range driveKeys(g) {
			volid := driveVolID(g.cfg[key])
			sid, _, ok := strings.Cut(volid, ":")
			if !ok {
				continue // none, cdrom, a path
			}
			if _, err := c.storageOn(p.Target, sid); err != nil {
				return "", err
			}
		}
		exit := workerLockText(g)
		switch {
		case exit != "":
		case c.migrateProblem(g, p) != "":
			exit = migrationAborted
		default:
			exit = "OK"
		}
		t := c.startTask(now, node, "qmigrate", strconv.Itoa(vmid), exit)
		if !succeeded(t.exit) {
			return t.upid, nil
		}
		g.cfg["lock"] = "migrate"
		c.onEnd(t, func() {
			if c.vms[vmid] != g {
				return
			}
			delete(g.cfg, "lock")
			c.moveLocalDisks(g, p.Target)
			g.node = p.Target
		})
		return t.upid, nil
	})
}

// driveKeys are the VM's drive keys, unusedN among them, in order.
func driveKeys(g *vm) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range maps.Keys(g.cfg) {
			if (isDiskKey(k) || strings.HasPrefix(k, "unused")) && !yield(k) {
				return
			}
		}
	})
}

// migrateProblem is why the migration task fails, as the warning PVE logs before it aborts:
// QemuMigrate's scan_local_volumes over the VM's drives, in its order of checks. Empty when the
// VM can go.
func (c *Cluster) migrateProblem(g *vm, p pve.MigrateParams) string {
	for _, key := range driveKeys(g) {
		value := g.cfg[key]
		volid := driveVolID(value)
		cdrom := isCDROM(value)
		switch {
		case cdrom && volid == "cdrom":
			return "can't migrate local cdrom drive"
		case volid == "none":
			continue
		}
		sid, _, ok := strings.Cut(volid, ":")
		if !ok {
			continue
		}
		st, err := c.storageOn(g.node, sid)
		if err != nil || st.Shared {
			continue
		}
		switch {
		case cdrom && isCloudInit(value):
			// PVE's own cloud-init drive is generated again on the target.
		case cdrom:
			return fmt.Sprintf("can't migrate local disk '%s': local cdrom image", volid)
		case g.running && !p.WithLocalDisks && isDiskKey(key):
			return fmt.Sprintf("can't migrate local disk '%s': can't live migrate attached local disks without with-local-disks option", volid)
		}
	}
	return ""
}

// migrationAborted is the exit status of a migration that failed: PVE logs why
// ("migration aborted (duration ...): Problem found while scanning volumes - can't migrate VM
// - check log", after the warning migrateProblem gives).
const migrationAborted = "migration aborted"

// moveLocalDisks moves the VM's volumes on storage that is not shared to the same storage of
// target, as the migration copies them.
func (c *Cluster) moveLocalDisks(g *vm, target string) {
	for _, st := range c.nodes[g.node].storages {
		if st.Shared {
			continue
		}
		dst := c.nodes[target].storages[st.ID]
		for name, v := range st.volumes {
			if volumeOwner(name) != g.id || dst == nil {
				continue
			}
			dst.volumes[name] = v
			delete(st.volumes, name)
		}
	}
}
