package pvesim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// BusyVolume makes volume volid, a disk on an LVM or LVM-thin storage, one that a destroy
// cannot remove, as when a process still holds the logical volume open: the destroy removes
// the VM and its other disks, logs a warning for this one, which stays, and ends "WARNINGS: N".
// It panics on a volume ID whose storage no node has as LVM or LVM-thin: the text PVE logs is
// LVM's.
func (c *Cluster) BusyVolume(volid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sid, _, _ := strings.Cut(volid, ":")
	if !slices.ContainsFunc(slices.Collect(maps.Values(c.nodes)), func(n *node) bool {
		st := n.storages[sid]
		return st != nil && (st.Type == "lvm" || st.Type == "lvmthin")
	}) {
		panic(fmt.Sprintf("pvesim: volume %q is not on an LVM or LVM-thin storage", volid))
	}
	c.faults.busyVolumes[volid] = true
}

// busyDisks are the warnings a destroy of g logs for the disks it cannot remove, sorted by
// volume ID, and those volume IDs; nil when it removes every disk. The text is qemu-server's
// (src/PVE/QemuServer.pm destroy_vm: log_warn("Could not remove disk '$volid', check manually:
// $@")) around pve-storage's lvremove failure (src/PVE/Storage/LvmThinPlugin.pm and
// LVMPlugin.pm free_image: run_command($cmd, errmsg => "lvremove '$vg/$volname' error"), which
// pve-common src/PVE/Cmd.pm ends with LVM's last stderr line) and lvm2's message for an open
// volume (lib/activate/activate.c: "Logical volume %s in use.", after LVM's two-space prefix).
// The model's LVM storages are on the volume group "pve", as a default install's local-lvm.
func (c *Cluster) busyDisks(g *vm) (warnings []string, kept map[string]bool) {
	var volids []string
	for _, st := range c.nodes[g.node].storages {
		for name := range st.volumes {
			volid := st.ID + ":" + name
			if volumeOwner(name) == g.id && c.faults.busyVolumes[volid] {
				volids = append(volids, volid)
			}
		}
	}
	if len(volids) == 0 {
		return nil, nil
	}
	slices.Sort(volids)
	kept = make(map[string]bool, len(volids))
	for _, volid := range volids {
		_, name, _ := strings.Cut(volid, ":")
		lv := "pve/" + name
		warnings = append(warnings, fmt.Sprintf("WARN: Could not remove disk '%s', check manually: lvremove '%s' error:   Logical volume %s in use.", volid, lv, lv))
		kept[volid] = true
	}
	return warnings, kept
}
