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

func vmPath(vmid int) string { return fmt.Sprintf("/vms/%d", vmid) }

// VMConfig reads a VM's config, with the digest PVE adds.
func (c *Cluster) VMConfig(ctx context.Context, node string, vmid int) (pve.VMConfig, error) {
	return call(c, ctx, Call{Method: "VMConfig", Node: node, VMID: vmid}, func(time.Time) (pve.VMConfig, error) {
		if err := c.allow(vmPath(vmid), "VM.Audit"); err != nil {
			return nil, err
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return nil, err
		}
		cfg := maps.Clone(g.cfg)
		cfg["digest"] = digest(g.cfg)
		return cfg, nil
	})
}

// configPrivs are the privileges a config write may need; the token needs one of them to be
// let in, and then the one for each parameter it writes.
var configPrivs = []string{
	"VM.Config.Disk", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Memory",
	"VM.Config.Network", "VM.Config.HWType", "VM.Config.Options", "VM.Config.Cloudinit",
}

// configPriv is the privilege writing (or deleting) key needs.
func configPriv(key, value string) string {
	switch {
	case key == "cores" || key == "sockets":
		return "VM.Config.CPU"
	case key == "memory":
		return "VM.Config.Memory"
	case netKeyRE.MatchString(key):
		return "VM.Config.Network"
	case isDiskKey(key) && isCDROM(value):
		return "VM.Config.CDROM"
	case isDiskKey(key):
		return "VM.Config.Disk"
	}
	return "VM.Config.Options"
}

// SetVMConfig writes a VM's config synchronously. params are PVE's parameters: config keys,
// plus "delete" (a list of keys to remove) and "digest". A write that PVE would make wait for a
// clone's flock fails at once with the error PVE gives after its 10 s timeout.
func (c *Cluster) SetVMConfig(ctx context.Context, node string, vmid int, params pve.VMConfig) error {
	_, err := call(c, ctx, Call{Method: "SetVMConfig", Node: node, VMID: vmid}, func(time.Time) (struct{}, error) {
		return struct{}{}, c.setVMConfig(node, vmid, params)
	})
	return err
}

func (c *Cluster) setVMConfig(node string, vmid int, params pve.VMConfig) error {
	if err := c.allow(vmPath(vmid), configPrivs...); err != nil {
		return err
	}
	if _, err := c.nodeNamed(node); err != nil {
		return err
	}
	u, err := parseConfigUpdate(params)
	if err != nil {
		return err
	}
	g, err := c.vmOn(node, vmid)
	if err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(u.set))
	for _, key := range keys {
		if err := c.allow(vmPath(vmid), configPriv(key, u.set[key])); err != nil {
			return err
		}
	}
	for _, key := range u.delete {
		if err := c.allow(vmPath(vmid), configPriv(key, g.cfg[key])); err != nil {
			return err
		}
	}
	// update_vm checks the bridges of the NICs written before it locks the config ...
	if err := c.allowBridges(u.set); err != nil {
		return err
	}
	// The early check reads the lock property; the flock is taken after it.
	if lock := g.cfg["lock"]; lock != "" {
		return serverErr(lockedText(lock))
	}
	if flockHeld(g) {
		return serverErr(flockText(vmid))
	}
	if u.digest != "" && u.digest != digest(g.cfg) {
		return serverErr("detected modified configuration - file changed by other user? Try again.")
	}
	// ... and, under the lock, those of the NICs it replaces or deletes.
	replaced := map[string]string{}
	for _, key := range append(slices.Collect(maps.Keys(u.set)), u.delete...) {
		if old, ok := g.cfg[key]; ok && netKeyRE.MatchString(key) {
			replaced[key] = old
		}
	}
	if err := c.allowBridges(replaced); err != nil {
		return err
	}
	for _, key := range keys {
		value := u.set[key]
		switch {
		case isDiskKey(key):
			if text := c.attachProblem(node, value); text != "" {
				return serverErr(text)
			}
		case netKeyRE.MatchString(key):
			if _, mac := parseNet(value); mac == "" {
				u.set[key] = withNetMAC(value, macFor(vmid, key))
			}
		}
	}
	for _, key := range u.delete {
		c.deleteOption(g, key)
	}
	for key, value := range u.set {
		if value == "" {
			delete(g.cfg, key)
			continue
		}
		g.cfg[key] = value
	}
	return nil
}

// attachProblem is why a drive cannot be attached on the node: its storage or volume does not
// exist. Empty when it can.
func (c *Cluster) attachProblem(node, drive string) string {
	volid := driveVolID(drive)
	if volid == "none" || volid == "cdrom" {
		return ""
	}
	sid, name, ok := strings.Cut(volid, ":")
	if !ok {
		return noVolumeText(volid)
	}
	st := c.nodes[node].storages[sid]
	if st == nil {
		return noStorageText(sid)
	}
	if st.volumes[name] == nil {
		return noVolumeText(volid)
	}
	return ""
}

// deleteOption removes a config key. A disk is kept as the first free unusedN, as PVE does.
func (c *Cluster) deleteOption(g *vm, key string) {
	value, ok := g.cfg[key]
	if !ok {
		return
	}
	delete(g.cfg, key)
	if !isDiskKey(key) || isCDROM(value) {
		return
	}
	for i := 0; ; i++ {
		unused := "unused" + strconv.Itoa(i)
		if _, taken := g.cfg[unused]; !taken {
			g.cfg[unused] = driveVolID(value)
			return
		}
	}
}

// flockHeld reports whether a clone holds the VM's config flock: exclusively on the clone's
// target, shared on its source. A worker needs it exclusively and gives up after its timeout.
func flockHeld(g *vm) bool { return g.clone != nil || g.cloneSources > 0 }

// workerLockText is what a worker that locks the VM's config meets first: the flock, then the
// lock property. Empty if neither stops it.
func workerLockText(g *vm) string {
	switch {
	case flockHeld(g):
		return flockText(g.id)
	case g.cfg["lock"] != "":
		return lockedText(g.cfg["lock"])
	}
	return ""
}

// VMStatus reads a VM's current status.
func (c *Cluster) VMStatus(ctx context.Context, node string, vmid int) (pve.VMStatus, error) {
	return call(c, ctx, Call{Method: "VMStatus", Node: node, VMID: vmid}, func(now time.Time) (pve.VMStatus, error) {
		if err := c.allow(vmPath(vmid), "VM.Audit"); err != nil {
			return pve.VMStatus{}, err
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return pve.VMStatus{}, err
		}
		st := pve.VMStatus{
			VMID:      vmid,
			Status:    "stopped",
			QMPStatus: "stopped",
			Lock:      g.cfg["lock"],
			Name:      displayName(g),
			Tags:      g.cfg["tags"],
			Template:  g.cfg["template"] == "1",
			Agent:     agentEnabled(g.cfg),
			CPUs:      g.cpus(),
			MaxMem:    g.memoryMiB() * mib,
			MaxDisk:   bootDiskSize(g.cfg),
		}
		if g.running {
			st.Status, st.QMPStatus = "running", "running"
			if g.paused {
				st.QMPStatus = "paused"
			}
			st.Uptime = int64(now.Sub(g.startedAt).Seconds())
			st.PID = g.pid
		}
		return st, nil
	})
}

// boot is the VM starting now, as QEMU process pid: it runs with the config's cores and memory,
// and its guest reads the NoCloud seed it finds. In a boot that begins a new instance, the
// guest agent is the one pveflow's vendor-data installs and starts: cloud-init's final stage
// runs those modules, after network-online.target (cloud-final.service), which waits for
// systemd-networkd-wait-online; so the agent is as late as wait-online held the boot. In a later
// boot the installed agent starts without waiting for the network.
func (c *Cluster) boot(g *vm, at time.Time) {
	c.pid++
	g.running, g.paused, g.pid, g.startedAt = true, false, c.pid, at
	g.bootCPUs, g.bootMemMiB = cpus(g.cfg), memoryMiB(g.cfg)
	g.agentLate = 0
	if g.guest.boot(c.seedAtBoot(g)) {
		g.agentLate = c.waitOnline(g)
	}
}

// cpus and memoryMiB are the VM's cores and memory in effect: those it started with while it
// runs, its config's otherwise.
func (g *vm) cpus() int {
	if g.running {
		return g.bootCPUs
	}
	return cpus(g.cfg)
}

func (g *vm) memoryMiB() int64 {
	if g.running {
		return g.bootMemMiB
	}
	return memoryMiB(g.cfg)
}

func displayName(g *vm) string {
	if name := g.cfg["name"]; name != "" {
		return name
	}
	return fmt.Sprintf("VM %d", g.id)
}

// Start starts a VM. Its task fails on a VM that a clone holds, a template, a locked VM, a
// running VM, or one whose CD-ROM ISO is gone. An HA-managed VM's start is a hastart task
// instead (haRequest).
func (c *Cluster) Start(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	return call(c, ctx, Call{Method: "Start", Node: node, VMID: vmid}, func(now time.Time) (pve.UPID, error) {
		if err := c.allow(vmPath(vmid), "VM.PowerMgmt"); err != nil {
			return "", err
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return "", err
		}
		if c.haManaged(vmid) {
			return c.haRequest(now, node, vmid, "hastart", "Requesting HA start for VM %d", "started"), nil
		}
		t := c.startTask(now, node, "qmstart", strconv.Itoa(vmid), c.startExit(g))
		if succeeded(t.exit) {
			c.onEnd(t, func() {
				if c.vms[vmid] == g && !g.running {
					c.boot(g, t.end)
				}
			})
		}
		return t.upid, nil
	})
}

// startExit is vm_start's checks in its order: flock, template, lock, running, volumes.
func (c *Cluster) startExit(g *vm) string {
	switch {
	case flockHeld(g):
		return flockText(g.id)
	case g.cfg["template"] == "1":
		return "you can't start a vm if it's a template"
	case g.cfg["lock"] != "":
		return lockedText(g.cfg["lock"])
	case g.running:
		return fmt.Sprintf("VM %d already running", g.id)
	}
	for _, key := range slices.Sorted(maps.Keys(g.cfg)) {
		if !isDiskKey(key) {
			continue
		}
		if text := c.attachProblem(g.node, g.cfg[key]); text != "" {
			return text
		}
	}
	return "OK"
}

// Stop stops a VM. Stopping a stopped VM is a task that ends OK, locked or not: PVE returns
// before it looks at the lock. An HA-managed VM's stop is a hastop task instead (haRequest).
func (c *Cluster) Stop(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	return call(c, ctx, Call{Method: "Stop", Node: node, VMID: vmid}, func(now time.Time) (pve.UPID, error) {
		if err := c.allow(vmPath(vmid), "VM.PowerMgmt"); err != nil {
			return "", err
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return "", err
		}
		if c.haManaged(vmid) {
			return c.haRequest(now, node, vmid, "hastop", "Requesting HA stop for VM %d", "stopped"), nil
		}
		exit := "OK"
		switch {
		case flockHeld(g):
			exit = flockText(vmid)
		case g.running && g.cfg["lock"] != "":
			exit = lockedText(g.cfg["lock"])
		}
		t := c.startTask(now, node, "qmstop", strconv.Itoa(vmid), exit)
		if succeeded(t.exit) {
			c.onEnd(t, func() {
				if c.vms[vmid] == g {
					g.halt()
				}
			})
		}
		return t.upid, nil
	})
}

// halt is the VM's QEMU gone.
func (g *vm) halt() { g.running, g.pid, g.paused = false, 0, false }

// haRequest is qemu-server's start or stop of an HA-managed VM (API2/Qemu.pm vm_start,
// vm_stop): a task of type typ that logs line and runs ha-manager, which only writes the
// request down: `ha-manager set vm:<vmid> --state started` for a start, `ha-manager
// crm-command stop vm:<vmid> 0` for a stop, which the CRM turns into the requested state
// stopped (Manager.pm next_state_started). The task ends OK without looking at the VM (running
// already, locked, a template), before the manager acts on the request a round later.
func (c *Cluster) haRequest(now time.Time, node string, vmid int, typ, line, state string) pve.UPID {
	t := c.startTask(now, node, typ, strconv.Itoa(vmid), "OK")
	if succeeded(t.exit) {
		t.log = []string{fmt.Sprintf(line, vmid)}
		c.onEnd(t, func() { c.requestHAState(vmid, state, t.end) })
	}
	return t.upid
}

// Reboot reboots a running VM as PVE's qmreboot task does: the guest shuts down and starts
// again when the task ends, with the cores and memory its config has then (the pending
// changes), and its agent is silent for AgentBootDelay after it. A paused or stopped VM is
// refused before the task starts; the task fails on the config's flock or lock, as a stop does.
func (c *Cluster) Reboot(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	return call(c, ctx, Call{Method: "Reboot", Node: node, VMID: vmid}, func(now time.Time) (pve.UPID, error) {
		if err := c.allow(vmPath(vmid), "VM.PowerMgmt"); err != nil {
			return "", err
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return "", err
		}
		switch {
		case g.paused:
			return "", serverErr("VM is paused - cannot shutdown")
		case !g.running:
			return "", serverErr(fmt.Sprintf("VM %d not running", vmid))
		}
		exit := workerLockText(g)
		if exit == "" {
			exit = "OK"
		}
		t := c.startTask(now, node, "qmreboot", strconv.Itoa(vmid), exit)
		if succeeded(t.exit) {
			c.onEnd(t, func() {
				if c.vms[vmid] == g && g.running {
					c.boot(g, t.end)
				}
			})
		}
		return t.upid, nil
	})
}

// Destroy removes a stopped VM and every disk it owns on its node's storages, as the seam's
// DELETE with purge and destroy-unreferenced-disks does (DestroyWith).
func (c *Cluster) Destroy(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	return c.DestroyWith(ctx, node, vmid, DestroyParams{Purge: true})
}

// DestroyParams are destroy_vm's flags beyond the seam's, which always purges.
type DestroyParams struct {
	// Purge removes the VMID from the HA resources (and from backup and replication jobs,
	// which the model has none of). Without it, PVE refuses to destroy an HA resource's VM.
	Purge bool
}

// DestroyWith removes a stopped VM and every disk it owns on its node's storages
// (destroy-unreferenced-disks); CD-ROM ISOs stay. Its checks are qemu-server's destroy_vm
// $early_checks, synchronous and in their order: protection, an HA resource without purge
// (service_is_configured: any state, ignored too), running. The locks are the task's.
func (c *Cluster) DestroyWith(ctx context.Context, node string, vmid int, p DestroyParams) (pve.UPID, error) {
	return call(c, ctx, Call{Method: "Destroy", Node: node, VMID: vmid}, func(now time.Time) (pve.UPID, error) {
		if err := c.allow(vmPath(vmid), "VM.Allocate"); err != nil {
			return "", err
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return "", err
		}
		if g.cfg["protection"] == "1" {
			return "", serverErr(fmt.Sprintf("can't remove VM %d - protection mode enabled", vmid))
		}
		if _, ha := c.ha.resources[haSID(vmid)]; ha && !p.Purge {
			return "", serverErr(fmt.Sprintf("unable to remove VM %d - used in HA resources and purge parameter not set.", vmid))
		}
		if g.running {
			return "", serverErr(fmt.Sprintf("VM %d is running - destroy failed", vmid))
		}
		exit := workerLockText(g)
		warnings, kept := c.busyDisks(g)
		switch {
		case exit != "":
		case len(warnings) > 0:
			exit = fmt.Sprintf("WARNINGS: %d", len(warnings))
		default:
			exit = "OK"
		}
		t := c.startTask(now, node, "qmdestroy", strconv.Itoa(vmid), exit)
		if !succeeded(t.exit) {
			return t.upid, nil
		}
		if t.exit == exit {
			t.log = warnings
		} else {
			kept = nil // a FailTask fault's warnings: every disk stays, as before it
		}
		g.cfg["lock"] = "destroyed"
		c.onEnd(t, func() {
			if c.vms[vmid] != g {
				return
			}
			delete(c.vms, vmid)
			if p.Purge {
				c.forgetHA(vmid)
			}
			if t.exit != "OK" && kept == nil {
				return // the warnings are the disks it could not remove
			}
			for _, st := range c.nodes[g.node].storages {
				for name := range st.volumes {
					if volumeOwner(name) == vmid && !kept[st.ID+":"+name] {
						delete(st.volumes, name)
					}
				}
			}
		})
		return t.upid, nil
	})
}

// Resize grows a disk to size ("20G", or "+2G" relative). Shrinking fails the task; the same
// size is a task that changes nothing.
func (c *Cluster) Resize(ctx context.Context, node string, vmid int, disk, size string) (pve.UPID, error) {
	return call(c, ctx, Call{Method: "Resize", Node: node, VMID: vmid}, func(now time.Time) (pve.UPID, error) {
		if err := c.allow(vmPath(vmid), "VM.Config.Disk"); err != nil {
			return "", err
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return "", err
		}
		m := sizeRE.FindStringSubmatch(size)
		if m == nil {
			return "", paramErr(map[string]string{"size": "value does not match the regex pattern"})
		}
		exit, grown := c.resizeExit(g, disk, m)
		t := c.startTask(now, node, "resize", strconv.Itoa(vmid), exit)
		if succeeded(t.exit) && grown > 0 {
			c.onEnd(t, func() {
				value, ok := g.cfg[disk]
				if c.vms[vmid] != g || !ok {
					return
				}
				volid := driveVolID(value)
				g.cfg[disk] = withDrive(value, volid, grown)
				sid, name, _ := strings.Cut(volid, ":")
				if v := c.nodes[g.node].storages[sid].volumes[name]; v != nil {
					v.size = grown
				}
			})
		}
		return t.upid, nil
	})
}

// resizeExit is resize_vm's checks; grown is the new size when the disk grows.
func (c *Cluster) resizeExit(g *vm, disk string, m []string) (exit string, grown int64) {
	if text := workerLockText(g); text != "" {
		return text, 0
	}
	value, ok := g.cfg[disk]
	switch {
	case !ok || !isDiskKey(disk):
		return fmt.Sprintf("disk '%s' does not exist", disk), 0
	case isCDROM(value):
		return "you can't resize a cdrom", 0
	}
	current := driveSize(value)
	target := scaleSize(m[2], m[3])
	if m[1] == "+" {
		target += current
	}
	switch {
	case target < current:
		return "shrinking disks is not supported", 0
	case target == current:
		return "OK", 0
	}
	return "OK", target
}
