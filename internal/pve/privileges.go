package pve

import (
	"fmt"
	"slices"
	"strings"
)

// When a PrivilegeRule applies, by what the configuration sets.
const (
	Always      = "always"
	WithNetwork = "with proxmox.bridge or NICs"
	WithHA      = "with proxmox.ha.enabled"
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
	{Path: ProxiesPath, When: WithNetwork, Privileges: []string{"VM.Config.Network"},
		Why: "net0 moved to a bridge or tagged, further NICs added"},
	{Path: "/vms/<template>", When: Always, Privileges: []string{"VM.Audit", "VM.Clone"},
		Why: "each template the node clones from"},
	{Path: "/storage/<isoStorage>", When: Always, Privileges: []string{"Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.Audit"},
		Why: "upload, delete and list seed ISOs"},
	{Path: "/storage/<clone storage>", When: Always, Privileges: []string{"Datastore.AllocateSpace"},
		Why: "the clone's disks: proxmox.storage, else the template's boot disk's storage"},
	{Path: "/sdn/zones/localnetwork/<bridge>", When: WithNetwork, Privileges: []string{"SDN.Use"},
		Why: "each bridge a NIC is put on: proxmox.bridge, the NICs' (a plain Linux bridge is in the zone localnetwork)"},
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
	// Network says that the VM's NICs are written: proxmox.bridge or NICs are set. Bridges are
	// the bridges they are put on, each once; a NIC that keeps its template's is not among them.
	Network bool
	Bridges []string
	// HA says that proxies are registered as HA resources.
	HA bool
	// Templates are the VMIDs of the templates the node clones from.
	Templates []int
}

// PathPrivileges are privileges needed on one ACL path.
type PathPrivileges struct {
	Path       string   `json:"path"`
	Privileges []string `json:"privileges"`
}

// Required are the privileges t needs, one entry per path, in the order of PrivilegeRules.
func (t PrivilegeTarget) Required() []PathPrivileges {
	var out []PathPrivileges
	need := func(path string, privs []string) {
		i := slices.IndexFunc(out, func(p PathPrivileges) bool { return p.Path == path })
		if i < 0 {
			out = append(out, PathPrivileges{Path: path})
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
	case "/sdn/zones/localnetwork/<bridge>":
		var out []string
		for _, b := range t.Bridges {
			out = append(out, "/sdn/zones/localnetwork/"+b)
		}
		return out
	}
	panic(fmt.Sprintf("pve: unknown path pattern %q", pattern))
}

// MissingPrivilege is a privilege needed on a path that the token does not hold there.
type MissingPrivilege struct {
	Path      string `json:"path"`
	Privilege string `json:"privilege"`
}

func (m MissingPrivilege) String() string { return m.Privilege + " on " + m.Path }

// Missing are the privileges of required that held, the token's privileges per path, lacks,
// in required's order.
func Missing(required []PathPrivileges, held map[string]Privileges) []MissingPrivilege {
	var out []MissingPrivilege
	for _, r := range required {
		for _, p := range r.Privileges {
			if _, ok := held[r.Path][p]; !ok {
				out = append(out, MissingPrivilege{Path: r.Path, Privilege: p})
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
