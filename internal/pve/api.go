// Package pve is the seam between pveflow and a Proxmox VE 9.x cluster: the API interface with one
// method per REST endpoint pveflow uses, the shapes those endpoints return, the error every failed
// call becomes, and the one classifier that turns those errors into what a caller can act on.
//
// Two things implement API: Client, the thin net/http client for a real cluster, and the
// simulator's model (internal/pvesim), which the tests, the replay suite and the demo use.
package pve

import (
	"context"
	"io"
	"strings"
)

// API is the Proxmox VE seam: one method per endpoint, named after what it does.
//
// Methods that start a Proxmox task return its UPID at once; the task's outcome is read with
// TaskStatus. VMIDs are cluster-wide; node names the node that owns the VM or storage.
type API interface {
	// Version reads GET /version.
	Version(ctx context.Context) (Version, error)
	// NodeStatus reads GET /nodes/{node}/status.
	NodeStatus(ctx context.Context, node string) (NodeStatus, error)
	// StorageStatus reads GET /nodes/{node}/storage/{storage}/status.
	StorageStatus(ctx context.Context, node, storage string) (StorageStatus, error)
	// ClusterResources reads GET /cluster/resources?type=vm: every guest (qemu and lxc) the token
	// may audit, on every node.
	ClusterResources(ctx context.Context) ([]VMResource, error)
	// VMConfig reads GET /nodes/{node}/qemu/{vmid}/config.
	VMConfig(ctx context.Context, node string, vmid int) (VMConfig, error)
	// SetVMConfig writes PUT /nodes/{node}/qemu/{vmid}/config (synchronous).
	SetVMConfig(ctx context.Context, node string, vmid int, params VMConfig) error
	// Clone starts POST /nodes/{node}/qemu/{vmid}/clone of template vmid.
	Clone(ctx context.Context, node string, vmid int, params CloneParams) (UPID, error)
	// Resize starts PUT /nodes/{node}/qemu/{vmid}/resize; size is PVE's size string ("20G").
	Resize(ctx context.Context, node string, vmid int, disk, size string) (UPID, error)
	// Start starts POST /nodes/{node}/qemu/{vmid}/status/start.
	Start(ctx context.Context, node string, vmid int) (UPID, error)
	// Stop starts POST /nodes/{node}/qemu/{vmid}/status/stop.
	Stop(ctx context.Context, node string, vmid int) (UPID, error)
	// Reboot starts POST /nodes/{node}/qemu/{vmid}/status/reboot: a task (qmreboot) that shuts
	// the guest down and starts it again, which applies the config's pending changes. PVE
	// refuses a VM that is not running at once ("VM <vmid> not running"), not in the task.
	Reboot(ctx context.Context, node string, vmid int) (UPID, error)
	// VMStatus reads GET /nodes/{node}/qemu/{vmid}/status/current.
	VMStatus(ctx context.Context, node string, vmid int) (VMStatus, error)
	// Destroy starts DELETE /nodes/{node}/qemu/{vmid}?purge=1&destroy-unreferenced-disks=1.
	Destroy(ctx context.Context, node string, vmid int) (UPID, error)
	// TaskStatus reads GET /nodes/{node}/tasks/{upid}/status.
	TaskStatus(ctx context.Context, node string, upid UPID) (TaskStatus, error)
	// AgentNetworkInterfaces reads GET /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces.
	AgentNetworkInterfaces(ctx context.Context, node string, vmid int) ([]AgentInterface, error)
	// AgentFileRead reads GET /nodes/{node}/qemu/{vmid}/agent/file-read?file=<path>: the
	// file's content as the guest agent reads it (PVE decodes its base64), up to PVE's 16 MiB.
	// A file the agent cannot open is PVE's agent error ("Agent error: failed to open file
	// '<path>' ...: No such file or directory"), a 500 as the agent's other errors.
	AgentFileRead(ctx context.Context, node string, vmid int, file string) (string, error)
	// UploadISO starts POST /nodes/{node}/storage/{storage}/upload with content=iso. The body is
	// read from r, which must yield exactly size bytes: PVE refuses uploads without a
	// Content-Length.
	UploadISO(ctx context.Context, node, storage, filename string, r io.Reader, size int64) (UPID, error)
	// DeleteVolume starts DELETE /nodes/{node}/storage/{storage}/content/{volid}. PVE answers a
	// UPID, or nothing when the deletion finished within the request; the UPID is then empty.
	DeleteVolume(ctx context.Context, node, storage, volid string) (UPID, error)
	// StorageContent reads GET /nodes/{node}/storage/{storage}/content, filtered to one content
	// type ("iso", "images", ...) unless content is empty.
	StorageContent(ctx context.Context, node, storage, content string) ([]StorageVolume, error)
	// TaskLog reads GET /nodes/{node}/tasks/{upid}/log: the whole log, in order. Its last line,
	// once the task stopped, is "TASK OK", "TASK WARNINGS: N" or "TASK ERROR: ...".
	TaskLog(ctx context.Context, node string, upid UPID) ([]TaskLogLine, error)
	// NodeTasks reads GET /nodes/{node}/tasks: the node's tasks that the token may see (its own,
	// and every task with Sys.Audit on /nodes/{node}), newest first, as p filters them.
	NodeTasks(ctx context.Context, node string, p TaskListParams) ([]TaskListEntry, error)
	// Permissions reads GET /access/permissions?path=<path>: the token's effective privileges on
	// path, with PVE's propagation and pools already applied.
	Permissions(ctx context.Context, path string) (Privileges, error)
	// Migrate starts POST /nodes/{node}/qemu/{vmid}/migrate: a task (qmigrate) that moves the VM
	// to p.Target. pveflow's workflows never migrate; operators and tests do, through this seam,
	// which keeps the client and the simulator to PVE's rules for it.
	Migrate(ctx context.Context, node string, vmid int, p MigrateParams) (UPID, error)
	// HAManagerStatus reads GET /cluster/ha/status/manager_status: the HA manager's view of the
	// nodes, maintenance mode among them.
	HAManagerStatus(ctx context.Context) (HAManagerStatus, error)
	// SDNVnets reads GET /cluster/sdn/vnets: the SDN vnets of the configuration PVE's bridge
	// check reads (not the running one), those the token holds SDN.Audit or SDN.Allocate on.
	SDNVnets(ctx context.Context) ([]SDNVnet, error)
	// AddHAResource writes POST /cluster/ha/resources (synchronous): the HA manager looks after
	// the resource from then on.
	AddHAResource(ctx context.Context, p HAResourceParams) error
	// DeleteHAResource writes DELETE /cluster/ha/resources/{sid} (synchronous). PVE refuses an
	// sid it does not manage ("cannot delete service '<sid>', not HA managed!").
	DeleteHAResource(ctx context.Context, sid string) error
}

// Version is the answer of GET /version.
type Version struct {
	Version string `json:"version"`
	Release string `json:"release"`
	RepoID  string `json:"repoid"`
}

// NodeStatus is the part of GET /nodes/{node}/status that pveflow reads.
type NodeStatus struct {
	Uptime     int64         `json:"uptime"`
	CPU        float64       `json:"cpu"`
	KVersion   string        `json:"kversion"`
	PVEVersion string        `json:"pveversion"`
	Memory     MemoryStatus  `json:"memory"`
	CPUInfo    NodeCPUInfo   `json:"cpuinfo"`
	RootFS     StorageAmount `json:"rootfs"`
}

// MemoryStatus is a node's memory in bytes.
type MemoryStatus struct {
	Total int64 `json:"total"`
	Used  int64 `json:"used"`
	Free  int64 `json:"free"`
}

// NodeCPUInfo describes a node's processors.
type NodeCPUInfo struct {
	Model   string `json:"model"`
	CPUs    int    `json:"cpus"`
	Cores   int    `json:"cores"`
	Sockets int    `json:"sockets"`
}

// StorageAmount is a filesystem's size in bytes.
type StorageAmount struct {
	Total int64 `json:"total"`
	Used  int64 `json:"used"`
	Avail int64 `json:"avail"`
}

// StorageStatus is the answer of GET /nodes/{node}/storage/{storage}/status.
type StorageStatus struct {
	Type string `json:"type"`
	// Content is PVE's comma-separated list of content types, such as "iso,vztmpl,backup".
	Content string `json:"content"`
	Enabled bool   `json:"enabled"`
	Active  bool   `json:"active"`
	Shared  bool   `json:"shared"`
	Total   int64  `json:"total"`
	Used    int64  `json:"used"`
	Avail   int64  `json:"avail"`
}

// StorageVolume is one entry of GET /nodes/{node}/storage/{storage}/content.
type StorageVolume struct {
	// VolID is the full volume ID, such as "local:iso/proxy-abc-seed.iso".
	VolID string `json:"volid"`
	// Content is the volume's content type: "iso", "images", ...
	Content string `json:"content"`
	// Format is "iso", "raw", "qcow2", ...
	Format string `json:"format"`
	Size   int64  `json:"size"`
	// CTime is when the volume was created, in seconds since the Unix epoch; 0 when the storage
	// does not say.
	CTime int64 `json:"ctime"`
	// VMID is the VM owning a disk image; 0 for an ISO.
	VMID int `json:"vmid"`
}

// VMResource is one entry of GET /cluster/resources?type=vm. Name, Status and Template come from
// PVE's status cache and lag behind a fresh clone (Status "unknown", Name empty for ~10 s); Lock
// and Tags are read live from the config.
type VMResource struct {
	ID       string `json:"id"`
	VMID     int    `json:"vmid"`
	Name     string `json:"name"`
	Node     string `json:"node"`
	Type     string `json:"type"`
	Status   string `json:"status"`
	Template bool   `json:"template"`
	Lock     string `json:"lock"`
	Tags     string `json:"tags"`
	MaxDisk  int64  `json:"maxdisk"`
	MaxMem   int64  `json:"maxmem"`
	MaxCPU   int    `json:"maxcpu"`
	Uptime   int64  `json:"uptime"`
}

// VMConfig is a VM's configuration: PVE's keys with every value rendered as a string, numbers in
// decimal and booleans as "0" or "1", exactly as they would be sent back in a config write.
type VMConfig map[string]string

// VMStatus is the part of GET /nodes/{node}/qemu/{vmid}/status/current that pveflow reads.
type VMStatus struct {
	VMID int `json:"vmid"`
	// Status is "running" or "stopped".
	Status string `json:"status"`
	// QMPStatus is QEMU's view: "running", "paused", "prelaunch", ...; it equals Status when
	// the VM is stopped.
	QMPStatus string `json:"qmpstatus"`
	Lock      string `json:"lock"`
	Name      string `json:"name"`
	Tags      string `json:"tags"`
	Template  bool   `json:"template"`
	Agent     bool   `json:"agent"`
	CPUs      int    `json:"cpus"`
	MaxMem    int64  `json:"maxmem"`
	MaxDisk   int64  `json:"maxdisk"`
	Uptime    int64  `json:"uptime"`
	PID       int    `json:"pid"`
}

// TaskStatus is the answer of GET /nodes/{node}/tasks/{upid}/status.
type TaskStatus struct {
	UPID      UPID   `json:"upid"`
	Node      string `json:"node"`
	PID       int    `json:"pid"`
	PStart    int64  `json:"pstart"`
	StartTime int64  `json:"starttime"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	User      string `json:"user"`
	TokenID   string `json:"tokenid"`
	// Status is "running" or "stopped".
	Status string `json:"status"`
	// ExitStatus is set once the task stopped: "OK", "WARNINGS: N", or the error text.
	ExitStatus string `json:"exitstatus"`
}

// Task status values.
const (
	TaskRunning = "running"
	TaskStopped = "stopped"
)

// AgentInterface is one network interface reported by the QEMU guest agent.
type AgentInterface struct {
	Name            string           `json:"name"`
	HardwareAddress string           `json:"hardware-address"`
	IPAddresses     []AgentIPAddress `json:"ip-addresses"`
}

// AgentIPAddress is one address of an AgentInterface.
type AgentIPAddress struct {
	Address string `json:"ip-address"`
	// Type is "ipv4" or "ipv6".
	Type   string `json:"ip-address-type"`
	Prefix int    `json:"prefix"`
}

// CloneParams are the parameters of a clone that pveflow sets.
type CloneParams struct {
	NewID       int
	Name        string
	Description string
	// Full asks for a full clone; a linked clone otherwise.
	Full bool
	// Target is the node to clone to; empty clones onto the template's node.
	Target string
	// Storage is the target storage for a full clone; empty keeps the template's.
	Storage string
	Pool    string
}

// TaskListParams filters GET /nodes/{node}/tasks; zero values are PVE's defaults.
type TaskListParams struct {
	// Source is "archive" (PVE's default: finished tasks), "active" or "all".
	Source string
	// TypeFilter keeps the tasks of one type, such as "qmclone".
	TypeFilter string
	// VMID keeps the tasks whose ID is this VMID. A clone's task carries its source's VMID
	// (qemu-server src/PVE/API2/Qemu.pm clone_vm: fork_worker('qmclone', $vmid, ...)), not
	// the new VM's.
	VMID int
	// Limit is how many to list; 0 is PVE's default, 50.
	Limit int
}

// TaskListEntry is one entry of GET /nodes/{node}/tasks. A task that still runs has no
// EndTime and no Status.
type TaskListEntry struct {
	UPID      UPID   `json:"upid"`
	Node      string `json:"node"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	User      string `json:"user"`
	StartTime int64  `json:"starttime"`
	EndTime   int64  `json:"endtime,omitempty"`
	Status    string `json:"status,omitempty"`
}

// Running reports whether the task had not ended when the list was read.
func (e TaskListEntry) Running() bool { return e.EndTime == 0 && e.Status == "" }

// TaskLogLine is one line of GET /nodes/{node}/tasks/{upid}/log.
type TaskLogLine struct {
	// N is the line's number, from 1.
	N int    `json:"n"`
	T string `json:"t"`
}

// WarnPrefix starts each line a task's worker logs as a warning, one that counts towards its
// "WARNINGS: N" exit status (pve-common src/PVE/RESTEnvironment.pm, sub warn: print STDERR
// "WARN: $message\n"; $self->{warning_count}++). A plain Perl warn is logged without it and
// counts for nothing.
const WarnPrefix = "WARN: "

// TaskWarnings are the warnings of a task's log: the text of each line that starts with
// WarnPrefix, without it, in order.
func TaskWarnings(log []TaskLogLine) []string {
	var out []string
	for _, l := range log {
		if w, ok := strings.CutPrefix(l.T, WarnPrefix); ok {
			out = append(out, w)
		}
	}
	return out
}

// Privileges are a token's privileges on one ACL path, as GET /access/permissions?path= answers
// them: each privilege held, with whether it propagates to the paths below. A privilege not
// held is absent.
type Privileges map[string]bool

// MigrateParams are the parameters of a migration that pveflow's seam sends.
type MigrateParams struct {
	// Target is the node the VM moves to.
	Target string
	// Online live-migrates a running VM; PVE refuses a running VM without it, and ignores it
	// for a stopped one.
	Online bool
	// WithLocalDisks lets a running VM's disks on storage that is not shared be copied along
	// (live storage migration); an offline migration copies them anyway.
	WithLocalDisks bool
}

// SDNVnet is the part of an entry of GET /cluster/sdn/vnets that pveflow reads.
type SDNVnet struct {
	Vnet string `json:"vnet"`
	// Zone is the SDN zone the vnet is in, whose path PVE checks SDN.Use on for a NIC on it.
	Zone string `json:"zone"`
}

// HAManagerStatus is the part of GET /cluster/ha/status/manager_status that pveflow reads. A
// cluster where HA was never used answers an empty manager status.
type HAManagerStatus struct {
	ManagerStatus HACRMStatus `json:"manager_status"`
	// LRMStatus is each node's local resource manager, by node name.
	LRMStatus map[string]HALRMStatus `json:"lrm_status"`
}

// HACRMStatus is the cluster resource manager's state.
type HACRMStatus struct {
	MasterNode string `json:"master_node"`
	// NodeStatus is each node's state: "online", "maintenance", "unknown", "fence", "gone".
	NodeStatus map[string]string `json:"node_status"`
	// NodeRequest holds what was asked of a node and not done yet: {"maintenance": 1} after
	// ha-manager crm-command node-maintenance enable.
	NodeRequest map[string]map[string]any `json:"node_request"`
}

// HALRMStatus is one node's local resource manager.
type HALRMStatus struct {
	// Mode is "active", "maintenance", "restart", "shutdown", "reboot" or "disarm".
	Mode      string `json:"mode"`
	State     string `json:"state"`
	Timestamp int64  `json:"timestamp"`
}

// InMaintenance reports whether node is in HA maintenance mode or on its way there: the CRM
// shows it in state "maintenance", it was asked for maintenance (a CRM command the manager takes
// up in its next round), or its LRM runs in maintenance mode (a reboot under the "migrate"
// shutdown policy). The HA manager moves HA resources off such a node and places none there.
func (s HAManagerStatus) InMaintenance(node string) bool {
	if s.ManagerStatus.NodeStatus[node] == "maintenance" || s.LRMStatus[node].Mode == "maintenance" {
		return true
	}
	switch v := s.ManagerStatus.NodeRequest[node]["maintenance"].(type) {
	case float64:
		return v != 0
	case bool:
		return v
	case string:
		return v != "" && v != "0"
	}
	return false
}

// HAResourceParams are the parameters of an HA resource pveflow registers.
type HAResourceParams struct {
	// SID is "vm:<vmid>".
	SID string
	// State is the requested state: "started", "stopped", ...; empty is PVE's default, started.
	State   string
	Comment string
}
