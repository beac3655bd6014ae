package pve

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
)

// Classify says what a caller can do about err. It reads API errors (status, then Proxmox's
// message), task errors (the exit status) and errors that already carry a class.
//
// What is not recognised is Transient: a transport error, a 5xx from a proxy in front of PVE,
// and a 500 or task error whose text no rule knows. That default is deliberate. PVE's daemons
// die with many texts for passing trouble (a busy pvedaemon, a pmxcfs hiccup, a worker that
// could not start), so for backend trouble a retry is the safe answer. It must not swallow bad
// input, which no retry fixes, so input errors are decided before the default is reached:
//
//   - by status, whatever the text: 400 (parameter verification), the other 4xx, and the HTTP
//     layer's 501 (unknown path or method, a body over 512 KiB) and 506 (a Content-Type it does
//     not take, a request it cannot parse) are Permanent;
//   - by text: each 500 or task error PVE raises for a request that cannot succeed as asked (a
//     missing or unsuitable storage, an unsupported image format, a malformed volume ID, ...)
//     has a rule below naming its class.
//
// AnyEvent::HTTP's own statuses 595-599, which pveproxy relays when it cannot reach pvedaemon or
// the node it forwards to, are Transient by status: the request may not have arrived, or may
// have run without its answer arriving, so a caller that retries a non-idempotent call must look
// before it repeats it.
//
// The texts it matches are PVE 9.x's, and each one is pinned by a fixture in testdata/pve.
func Classify(err error) Class {
	if err == nil {
		return ""
	}
	if ce, ok := errorsAs[*ClassError](err); ok {
		return ce.Class
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	if te, ok := errorsAs[*TaskError](err); ok {
		return classifyText(te.ExitStatus)
	}
	if ae, ok := errorsAs[*APIError](err); ok {
		return classifyAPIError(ae)
	}
	return Transient
}

func classifyAPIError(e *APIError) Class {
	switch {
	case e.Status == http.StatusBadRequest:
		// A parameter PVE refused. The one a caller acts on is a taken VMID, which
		// /cluster/nextid reports as a parameter error.
		for _, msg := range e.Errors {
			if classifyText(msg) == AlreadyExists {
				return AlreadyExists
			}
		}
		return Permanent
	case e.Status >= 400 && e.Status < 500, e.Status == http.StatusNotImplemented, e.Status == statusHTTPLayerRefused:
		// 401 and 403 are the token and its privileges; 404 means the path never exists on
		// PVE (a missing VM is a 500); 501 and 506 are pveproxy refusing the request itself (an
		// unknown method or path, a body too large, a Content-Type it does not take). PVE never
		// sends 413: an oversized body is its 501. Retrying fixes none of them.
		return Permanent
	case e.Status >= statusRelayFirst && e.Status <= statusRelayLast:
		// pveproxy relaying AnyEvent::HTTP's failure to reach pvedaemon or another node:
		// refused, timed out, a broken pipe, a garbled or vanished answer.
		return Transient
	}
	return classifyText(e.Text())
}

// Statuses of pveproxy's own making: 506 for requests its HTTP layer cannot take
// (pve-http-server AnyEvent.pm), and AnyEvent::HTTP's 595-599 for a forwarded request that
// failed, which pveproxy passes on with their reason (AnyEvent.pm proxy_request).
const (
	statusHTTPLayerRefused = 506
	statusRelayFirst       = 595
	statusRelayLast        = 599
)

// A textRule maps a PVE message to a class. Rules are tried in order; the first match wins.
type textRule struct {
	re    *regexp.Regexp
	class Class
}

// Each rule names where PVE sends its text (repository and file, as of PVE 9.x); a text PVE
// never sends has no rule. Some texts come from a tool PVE runs and passes on with its own
// prefix (run_command's errmsg), and are named so.
var textRules = []textRule{
	// Missing VM: any qemu endpoint on a deleted VM or the wrong node
	// (pve-guest-common AbstractConfig.pm load_config).
	{regexp.MustCompile(`Configuration file '[^']*' does not exist`), NotFound},
	// A storage that is missing, switched off, not on this node or not for ISOs is a
	// configuration mistake, not a missing VM (pve-storage Storage.pm storage_config and
	// storage_check_enabled/storage_check_node; API2/Storage/Status.pm upload).
	{regexp.MustCompile(`storage '[^']*' does not exist`), Permanent},
	{regexp.MustCompile(`storage '[^']*' is (disabled|not available on node)`), Permanent},
	{regexp.MustCompile(`does not support '[^']*' content`), Permanent},
	// A storage that cannot hold a VM's disks at all, as opposed to a full one: one without
	// the images content, an iSCSI LUN or a PBS datastore, or an image format it has no use
	// for (LVM takes raw only). Retrying the same call fails the same way (qemu-server
	// API2/Qemu.pm $check_storage_access_migrate; pve-storage ISCSIPlugin.pm,
	// ISCSIDirectPlugin.pm, PBSPlugin.pm alloc_image; LVMPlugin.pm, LvmThinPlugin.pm,
	// Storage.pm).
	{regexp.MustCompile(`storage '[^']*' does not support vm images`), Permanent},
	{regexp.MustCompile(`can't allocate space in \w+ storage`), Permanent},
	{regexp.MustCompile(`unsupported format '[^']*'`), Permanent},
	// A volume ID or volume name PVE cannot take apart: "unable to parse volume ID '...'"
	// (pve-storage Storage.pm), or the storage plugin's "unable to parse <directory|lvm|zfs|
	// rbd|...> volume name '...'" (Plugin.pm, LVMPlugin.pm, ... parse_volname).
	{regexp.MustCompile(`unable to parse (?:\w+ )?volume (?:ID|name) '`), Permanent},
	// Space: LVM says so itself (pve-storage LVMPlugin.pm alloc_lvm_image); ZFS's words are
	// libzfs's, passed on as "zfs error: ..." (ZFSPoolPlugin.pm zfs_request).
	{regexp.MustCompile(`not enough free space|out of space`), QuotaExceeded},
	// Locks: the config's lock property (pve-guest-common AbstractConfig.pm check_lock, which
	// names the guest type: VM for qemu, CT for lxc), or a flock (a VM's config, a local
	// storage: pve-common Tools.pm lock_file_full) or a cluster lock (a shared storage:
	// pve-cluster Cluster.pm cfs_lock) not taken in time.
	{regexp.MustCompile(`(?:VM|CT) is locked \(`), Locked},
	{regexp.MustCompile(`can't lock file '[^']*' - got timeout`), Locked},
	{regexp.MustCompile(`got lock request timeout`), Locked},
	// VMID collisions: on the same node (qemu-server API2/Qemu.pm clone_vm), on another node
	// (pmxcfs refuses the rename with EEXIST: pve-common INotify.pm/File.pm "close (rename)
	// atomic file '...' failed: $!"), or found by /cluster/nextid (pve-manager
	// API2/Cluster.pm).
	{regexp.MustCompile(`config file already exists`), AlreadyExists},
	{regexp.MustCompile(`failed: File exists`), AlreadyExists},
	{regexp.MustCompile(`^VM \d+ already exists`), AlreadyExists},
	// A volume of the new VMID already on the storage: the disks a clone names itself (the
	// cloud-init disk is always vm-<newid>-cloudinit) collide with a leftover one, which blocks
	// that VMID until someone removes it. A file-based storage says so itself (pve-storage
	// Plugin.pm, BTRFSPlugin.pm alloc_image); LVM's lvcreate says it through PVE's
	// "lvcreate '<vg>/<name>' error: " (LVMPlugin.pm lvcreate).
	{regexp.MustCompile(`disk image '[^']*' already exists`), AlreadyExists},
	{regexp.MustCompile(`Logical Volume "[^"]*" already exists in volume group`), AlreadyExists},
	// Guest agent: not answering yet, versus not configured (a template bug) or a stopped VM
	// (qemu-server QemuServer/Agent.pm assert_agent_available; QMPClient.pm "VM <id> qga command
	// '...' failed - got timeout").
	{regexp.MustCompile(`QEMU guest agent is not running`), AgentNotRunning},
	{regexp.MustCompile(`qga command '[^']*' failed - got timeout`), AgentNotRunning},
	{regexp.MustCompile(`No QEMU guest agent configured`), Permanent},
	// A stopped VM: the agent says "is not running" (QemuServer/Agent.pm), the power
	// operations (reboot, reset, suspend, resume) "not running" (API2/Qemu.pm); a start of a
	// running VM "already running" (QemuServer.pm vm_start).
	{regexp.MustCompile(`^VM \d+ (?:is )?not running`), NotRunning},
	{regexp.MustCompile(`^VM \d+ already running`), AlreadyRunning},
	// Things retrying cannot fix (qemu-server API2/Qemu.pm resize_vm, QemuServer.pm vm_start;
	// pve-guest-common AbstractConfig.pm check_protection).
	{regexp.MustCompile(`shrinking disks is not supported`), Permanent},
	{regexp.MustCompile(`you can't start a vm if it's a template`), Permanent},
	{regexp.MustCompile(`protection mode enabled`), Permanent},
}

// configFlockRE is a VM's config flock not taken in time, naming the VM.
var configFlockRE = regexp.MustCompile(`can't lock file '/var/lock/qemu-server/lock-(\d+)\.conf' - got timeout`)

// ConfigFlockTimeout reports whether msg says that the config flock of VM vmid could not be
// taken in time. A clone whose task fails so on its new VMID lost a race for that VMID to another
// clone, which holds the flock while it copies; a lock on the template or a storage is not that.
func ConfigFlockTimeout(msg string, vmid int) bool {
	m := configFlockRE.FindStringSubmatch(msg)
	return m != nil && m[1] == strconv.Itoa(vmid)
}

// classifyText is the class of the first rule msg matches, Transient when none does.
func classifyText(msg string) Class {
	for _, r := range textRules {
		if r.re.MatchString(msg) {
			return r.class
		}
	}
	return Transient
}
