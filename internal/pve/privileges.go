package pve

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// When a PrivilegeRule applies, by what the configuration sets.
const (
	Always      = "always"
	WithNetwork = "with proxmox.bridge or NICs"
	WithHA      = "with proxmox.ha.enabled"
	// WithCloudInit: a machine type waits for cloud-init (readiness: cloud-init).
	WithCloudInit = "with machineTypes.*.readiness: cloud-init"
)

// ProxiesPath is the path pattern of the proxies' VMs: with proxmox.pool their privileges come
// from the pool, as PVE's clone accepts VM.Allocate on the pool named in the call instead of on
// the new VMID, and a VM in a pool gets the pool's roles; without one, from /vms, which every new
// VMID inherits from.
const ProxiesPath = "/pool/<pool>, else /vms"

// PrivilegeRule is one row of the privileges pveflow needs: the privileges it needs on an ACL
// path, written with placeholders (<node>, <pool>, ...), and when.
type PrivilegeRule struct {
	Path       string
	When       string
	Privileges []string
	// Why says which calls need them.
	Why string
}

// PrivilegeRules are the privileges pveflow needs on PVE 9, per ACL path: what `pveflow check`
// reads with GET /access/permissions and a create checks before it clones. docs/proxmox.md
// shows this table (TestDocs_privilegesTableIsTheRules).
var PrivilegeRules = []PrivilegeRule{
	{Path: "/", When: Always, Privileges: []string{"Sys.Audit"},
		Why: "the HA manager's status: a node in maintenance mode is never chosen"},
	{Path: "/", When: WithHA, Privileges: []string{"Sys.Console"},
		Why: "add and remove each proxy's HA resource"},
	{Path: "/nodes/<node>", When: Always, Privileges: []string{"Sys.Audit"},
		Why: "node status: whether the node is online, and its free memory"},
	{Path: "/vms", When: Always, Privileges: []string{"VM.Audit"},
		Why: "config and status reads; a VM the token cannot audit is missing from cluster resources"},
	{Path: ProxiesPath, When: Always, Privileges: []string{
		"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Disk",
		"VM.Config.Memory", "VM.Config.Options", "VM.GuestAgent.Audit", "VM.PowerMgmt",
	}, Why: "the clone's new VM; configure, resize, start, stop, reboot and destroy it; read its guest agent"},
	{Path: ProxiesPath, When: WithCloudInit, Privileges: []string{"VM.GuestAgent.FileRead"},
		Why: "read cloud-init's result (/run/cloud-init/result.json) through the guest agent; the least that reads a file, where VM.GuestAgent.Unrestricted would let the agent run commands"},
	{Path: ProxiesPath, When: WithNetwork, Privileges: []string{"VM.Config.Network"},
		Why: "net0 moved to a bridge or tagged, further NICs added"},
	{Path: "/vms/<template>", When: Always, Privileges: []string{"VM.Audit", "VM.Clone"},
		Why: "each template the node clones from"},
	{Path: "/storage/<isoStorage>", When: Always, Privileges: []string{"Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.Audit"},
		Why: "upload, delete and list seed ISOs"},
	{Path: "/storage/<clone storage>", When: Always, Privileges: []string{"Datastore.AllocateSpace"},
		Why: "the clone's disks: proxmox.storage, else the template's boot disk's storage"},
	{Path: TemplateSDNPath, When: Always, Privileges: []string{"SDN.Use"},
		Why: "each NIC of the template, which the clone copies"},
	{Path: SDNPath, When: WithNetwork, Privileges: []string{"SDN.Use"},
		Why: "each NIC written (proxmox.bridge, the NICs'), and the template's it replaces; a vnet's zone is the one GET /cluster/sdn/vnets lists it in, a Linux bridge's localnetwork; a tagged NIC's path is its VLAN's"},
}

// The path patterns of the SDN.Use PVE checks for a NIC (NICNetwork.SDNUsePaths): of the
// template's NICs, which a clone copies, and of the NICs pveflow writes.
const (
	TemplateSDNPath = "/sdn/zones/<zone>/<template's bridge>[/<tag>]"
	SDNPath         = "/sdn/zones/<zone>/<bridge>[/<tag>]"
)

// LocalNetwork is the SDN zone of a bridge that is no SDN vnet: pve-guest-common's
// check_vnet_access starts from it and takes the vnet's zone only for a bridge that is one.
const LocalNetwork = "localnetwork"

// NICNetwork is what PVE's bridge check reads of a NIC (qemu-server's check_bridge_access):
// the bridge, a Linux bridge or an SDN vnet, the VLAN tag (0: none) and the trunks ("10;20-30").
type NICNetwork struct {
	Bridge string `json:"bridge"`
	Tag    int    `json:"tag,omitempty"`
	Trunks string `json:"trunks,omitempty"`
}

// NetworkOf reads a net[n] value's network; ok is false for one without a bridge, which PVE's
// check passes over.
func NetworkOf(net string) (n NICNetwork, ok bool) {
	for part := range strings.SplitSeq(net, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "bridge":
			n.Bridge = v
		case "tag":
			n.Tag, _ = strconv.Atoi(v)
		case "trunks":
			n.Trunks = v
		}
	}
	return n, n.Bridge != ""
}

// SDNUsePaths are the paths PVE checks SDN.Use on for a NIC on n, its bridge in zone, in PVE's
// order (pve-guest-common GuestHelpers.pm check_vnet_access): a tagged NIC's VLAN path
// /sdn/zones/<zone>/<bridge>/<tag>, then each trunk VLAN's path (a range "20-30" each of its
// VLANs, in Perl's string order of the keys), and the bridge's own path only for a NIC with
// neither. A grant on the bridge reaches a VLAN's path only when it propagates.
func (n NICNetwork) SDNUsePaths(zone string) []string {
	base := "/sdn/zones/" + zone + "/" + n.Bridge
	var out []string
	if n.Tag != 0 {
		out = append(out, base+"/"+strconv.Itoa(n.Tag))
	}
	for _, tag := range trunkTags(n.Trunks) {
		out = append(out, base+"/"+tag)
	}
	if n.Tag == 0 && n.Trunks == "" {
		out = append(out, base)
	}
	return out
}

// trunkTags are the VLANs of a trunks value, each once, sorted as strings: get_tags_from_trunk
// makes a hash of them, sorted by its keys.
func trunkTags(trunks string) []string {
	var tags []string
	for trunk := range strings.SplitSeq(trunks, ";") {
		if trunk == "" {
			continue
		}
		first, last, _ := strings.Cut(trunk, "-")
		from, _ := strconv.Atoi(first)
		to, _ := strconv.Atoi(last)
		if to <= from {
			tags = append(tags, first)
			continue
		}
		for t := from; t <= to; t++ {
			tags = append(tags, strconv.Itoa(t))
		}
	}
	slices.Sort(tags)
	return slices.Compact(tags)
}

// KnownPrivileges are every privilege of PrivilegeRules, sorted.
func KnownPrivileges() []string {
	var all []string
	for _, r := range PrivilegeRules {
		all = append(all, r.Privileges...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// PrivilegeTarget is what fills a node's rules in.
type PrivilegeTarget struct {
	Node       string
	ISOStorage string
	// CloneStorages are the storages the node's clones allocate on; empty when not known.
	CloneStorages []string
	Pool          string
	// Network says that the VM's NICs are written: proxmox.bridge or NICs are set. NICs are the
	// networks of the NICs written.
	Network bool
	NICs    []NICNetwork
	// TemplateNICs are the networks of the templates' NICs, which the clone copies; none when
	// not known.
	TemplateNICs []NICNetwork
	// Zones are the SDN zones of the vnets among the NICs' bridges, by vnet, as GET
	// /cluster/sdn/vnets lists them; a bridge not among them is in LocalNetwork.
	Zones map[string]string
	// HA says that proxies are registered as HA resources.
	HA bool
	// CloudInit says that a machine type waits for cloud-init, which is read through the guest
	// agent.
	CloudInit bool
	// Templates are the VMIDs of the templates the node clones from.
	Templates []int
}

// PathPrivileges are privileges needed on one ACL path.
type PathPrivileges struct {
	Path       string   `json:"path"`
	Privileges []string `json:"privileges"`
	// Propagate says that Path stands for the paths below it, as /vms for the VMs pveflow makes:
	// a privilege counts only if it propagates, as PVE's ACL without propagate grants its roles
	// on its own path only (pve-access-control AccessControl.pm roles).
	Propagate bool `json:"propagate,omitempty"`
}

// Required are the privileges t needs, one entry per path, in the order of PrivilegeRules.
func (t PrivilegeTarget) Required() []PathPrivileges {
	var out []PathPrivileges
	need := func(path string, privs []string) {
		i := slices.IndexFunc(out, func(p PathPrivileges) bool { return p.Path == path })
		if i < 0 {
			out = append(out, PathPrivileges{Path: path, Propagate: path == "/vms"})
			i = len(out) - 1
		}
		out[i].Privileges = append(out[i].Privileges, privs...)
		slices.Sort(out[i].Privileges)
		out[i].Privileges = slices.Compact(out[i].Privileges)
	}
	for _, r := range PrivilegeRules {
		if !t.applies(r.When) {
			continue
		}
		for _, path := range t.paths(r.Path) {
			need(path, r.Privileges)
		}
	}
	return out
}

func (t PrivilegeTarget) applies(when string) bool {
	switch when {
	case Always:
		return true
	case WithNetwork:
		return t.Network
	case WithHA:
		return t.HA
	case WithCloudInit:
		return t.CloudInit
	}
	panic(fmt.Sprintf("pve: unknown condition %q", when))
}

// paths are the ACL paths a rule's path pattern stands for.
func (t PrivilegeTarget) paths(pattern string) []string {
	switch pattern {
	case "/":
		return []string{"/"}
	case "/nodes/<node>":
		return []string{"/nodes/" + t.Node}
	case "/vms":
		return []string{"/vms"}
	case ProxiesPath:
		if t.Pool != "" {
			return []string{"/pool/" + t.Pool}
		}
		return []string{"/vms"}
	case "/vms/<template>":
		var out []string
		for _, vmid := range t.Templates {
			out = append(out, fmt.Sprintf("/vms/%d", vmid))
		}
		return out
	case "/storage/<isoStorage>":
		return []string{"/storage/" + t.ISOStorage}
	case "/storage/<clone storage>":
		var out []string
		for _, s := range t.CloneStorages {
			out = append(out, "/storage/"+s)
		}
		return out
	case TemplateSDNPath:
		return t.sdnUsePaths(t.TemplateNICs)
	case SDNPath:
		return t.sdnUsePaths(t.NICs)
	}
	panic(fmt.Sprintf("pve: unknown path pattern %q", pattern))
}

func (t PrivilegeTarget) sdnUsePaths(nics []NICNetwork) []string {
	var out []string
	for _, n := range nics {
		zone, ok := t.Zones[n.Bridge]
		if !ok {
			zone = LocalNetwork
		}
		out = append(out, n.SDNUsePaths(zone)...)
	}
	return out
}

// MissingPrivilege is a privilege needed on a path that the token does not hold there, or
// holds without the propagate the path needs.
type MissingPrivilege struct {
	Path      string `json:"path"`
	Privilege string `json:"privilege"`
	// Unpropagated says that the token holds it on Path, but not on the paths below.
	Unpropagated bool `json:"unpropagated,omitempty"`
}

func (m MissingPrivilege) String() string {
	if m.Unpropagated {
		return m.Privilege + " on " + m.Path + " (granted without propagate: the paths below do not inherit it)"
	}
	return m.Privilege + " on " + m.Path
}

// Missing are the privileges of required that held, the token's privileges per path, lacks,
// in required's order: a privilege held without propagate where the path needs it is missing.
func Missing(required []PathPrivileges, held map[string]Privileges) []MissingPrivilege {
	var out []MissingPrivilege
	for _, r := range required {
		for _, p := range r.Privileges {
			propagates, ok := held[r.Path][p]
			if !ok || r.Propagate && !propagates {
				out = append(out, MissingPrivilege{Path: r.Path, Privilege: p, Unpropagated: ok})
			}
		}
	}
	return out
}

// MissingMessage says what the token lacks for node: the message `pveflow check` reports and a
// create on the node fails with.
func MissingMessage(node string, missing []MissingPrivilege) string {
	parts := make([]string, len(missing))
	for i, m := range missing {
		parts[i] = m.String()
	}
	return fmt.Sprintf("the API token lacks privileges a proxy on node %s needs: %s (docs/proxmox.md, section 1)", node, strings.Join(parts, ", "))
}
