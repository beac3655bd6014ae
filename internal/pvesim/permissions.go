package pvesim

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// Access is what the cluster's user.cfg says of the API token: roles, groups and ACL entries,
// from which privileges are computed per path as pve-access-control does (AccessControl.pm
// roles, RPCEnvironment.pm permissions).
type Access struct {
	// Roles are the roles by name, each with its privileges. "NoAccess" is PVE's role that
	// takes every privilege away where it applies.
	Roles map[string][]string
	// Groups are the groups by name, each with its members' user IDs.
	Groups map[string][]string
	ACL    []ACE
	// Privsep is the token's privilege separation: its privileges are those its own ACL
	// entries give that its user holds too. Without it, the token has its user's.
	Privsep bool
	// PoolStorages are the storages each pool holds, by pool; a pool's VMs are the VMs in it.
	PoolStorages map[string][]string
}

// ACE is one ACL entry: a role on Path for a user, a group or a token (exactly one), which the
// paths below inherit only if it propagates.
type ACE struct {
	Path      string
	User      string
	Group     string
	Token     string
	Role      string
	Propagate bool
}

// allAccessRole is the role of the default Access: what the model checks, but what the options
// deny.
const allAccessRole = "PVEFlowSim"

// defaultAccess grants the token's user every privilege the model checks but denied, on /
// with propagate, as a role granted on / does; the token has its user's privileges.
func defaultAccess(user string, denied []string) *Access {
	privs := append(pve.KnownPrivileges(), "SDN.Audit", "SDN.Allocate", "VM.Migrate")
	privs = slices.DeleteFunc(privs, func(p string) bool { return slices.Contains(denied, p) })
	owner, _, _ := strings.Cut(user, "!")
	return &Access{
		Roles: map[string][]string{allAccessRole: privs},
		ACL:   []ACE{{Path: "/", User: owner, Role: allAccessRole, Propagate: true}},
	}
}

// Permissions answers the token's effective privileges on path, each with whether it
// propagates, as GET /access/permissions?path= does.
func (c *Cluster) Permissions(ctx context.Context, path string) (pve.Privileges, error) {
	return call(c, ctx, Call{Method: "Permissions"}, func(time.Time) (pve.Privileges, error) {
		return c.privileges(path), nil
	})
}

// privileges are the token's privileges on path (RPCEnvironment.pm permissions): its user's
// without privilege separation, else those its own ACL entries give that the user holds too,
// propagating only if both do.
func (c *Cluster) privileges(path string) pve.Privileges {
	owner, _, _ := strings.Cut(c.user, "!")
	user := c.principalPrivileges(owner, path)
	if !c.access.Privsep {
		return user
	}
	out := pve.Privileges{}
	for p, propagate := range c.principalPrivileges(c.user, path) {
		if userPropagate, ok := user[p]; ok {
			out[p] = propagate && userPropagate
		}
	}
	return out
}

// principalPrivileges are the privileges of a user or token on path from its roles there and
// its pools' roles: a role propagates if the ACL entry that gave it does, and a privilege if
// any of its roles that hold it does.
func (c *Cluster) principalPrivileges(id, path string) pve.Privileges {
	out := pve.Privileges{}
	for role, propagate := range c.principalRoles(id, path) {
		for _, p := range c.access.Roles[role] {
			out[p] = out[p] || propagate
		}
	}
	return out
}

// principalHolds reports whether a user or token holds priv on path: principalPrivileges's
// answer for one privilege, without building the whole set, as a listing asks it of every VM.
func (c *Cluster) principalHolds(id, path, priv string) bool {
	for role := range c.principalRoles(id, path) {
		if slices.Contains(c.access.Roles[role], priv) {
			return true
		}
	}
	return false
}

// principalRoles are the roles of a user or token on path with their propagate flags, its
// pools' among them (which never propagate); none where NoAccess applies.
func (c *Cluster) principalRoles(id, path string) map[string]bool {
	roles := c.roles(id, path)
	if _, none := roles["NoAccess"]; none {
		return nil
	}
	for role := range c.poolRoles(id, path) {
		if _, ok := roles[role]; !ok {
			if roles == nil {
				roles = map[string]bool{}
			}
			roles[role] = false // pool-derived roles never propagate
		}
	}
	if _, none := roles["NoAccess"]; none {
		return nil
	}
	return roles
}

// roles are the roles of a user or token on path, with their propagate flags, as
// AccessControl.pm roles computes them: walking from / down to path, the entries on each path
// that apply (on path itself, or propagating) replace those found above, the token's or user's
// own before its groups'.
func (c *Cluster) roles(id, path string) map[string]bool {
	var roles map[string]bool
	steps := aclAncestors(path)
	for i, p := range steps {
		final := i == len(steps)-1
		var own, groups map[string]bool
		for _, e := range c.access.ACL {
			if e.Path != p || !(final || e.Propagate) {
				continue
			}
			switch {
			case (e.Token != "" && e.Token == id) || (e.User != "" && e.User == id):
				own = withRole(own, e)
			case e.Group != "" && slices.Contains(c.access.Groups[e.Group], id):
				groups = withRole(groups, e)
			}
		}
		switch {
		case own != nil:
			roles = own
		case groups != nil:
			roles = groups
		}
	}
	if propagate, ok := roles["NoAccess"]; ok {
		return map[string]bool{"NoAccess": propagate}
	}
	return roles
}

// withRole is roles with e's role, and its propagate flag, added.
func withRole(roles map[string]bool, e ACE) map[string]bool {
	if roles == nil {
		roles = map[string]bool{}
	}
	roles[e.Role] = e.Propagate
	return roles
}

// poolRoles are the roles a user or token holds on the pool of the VM or storage at path, as
// RPCEnvironment.pm's compile_acl_path gives a pool's members its roles on /pool/<pool>.
func (c *Cluster) poolRoles(id, path string) map[string]bool {
	var pools []string
	if vmid, ok := strings.CutPrefix(path, "/vms/"); ok {
		if id, err := strconv.Atoi(vmid); err == nil && c.vms[id] != nil && c.vms[id].pool != "" {
			pools = append(pools, c.vms[id].pool)
		}
	}
	if sid, ok := strings.CutPrefix(path, "/storage/"); ok {
		for pool, storages := range c.access.PoolStorages {
			if slices.Contains(storages, sid) {
				pools = append(pools, pool)
			}
		}
	}
	var out map[string]bool
	for _, pool := range pools {
		for role := range c.roles(id, "/pool/"+pool) {
			if out == nil {
				out = map[string]bool{}
			}
			out[role] = false
		}
	}
	return out
}

// aclAncestors are the paths from / down to path: "/", "/vms", "/vms/100".
func aclAncestors(path string) []string {
	out := []string{"/"}
	cur := ""
	for part := range strings.SplitSeq(strings.Trim(path, "/"), "/") {
		if part == "" {
			continue
		}
		cur += "/" + part
		out = append(out, cur)
	}
	return out
}

// allow is the privilege check of a method: it fails when the token lacks every one of privs
// on path (PVE's check with "any"; a single privilege is the plain check).
func (c *Cluster) allow(path string, privs ...string) error {
	if slices.ContainsFunc(privs, func(p string) bool { return c.holds(path, p) }) {
		return nil
	}
	return permErr(path, privs...)
}

// holds reports whether the token holds priv on path, as privileges would list it.
func (c *Cluster) holds(path, priv string) bool {
	owner, _, _ := strings.Cut(c.user, "!")
	return c.principalHolds(owner, path, priv) && (!c.access.Privsep || c.principalHolds(c.user, path, priv))
}

// allowAllocate is the clone's check of VM.Allocate on the new VMID or on the pool the clone
// joins, an "or" check whose 403 names neither.
func (c *Cluster) allowAllocate(newid int, pool string) error {
	if c.holds(vmPath(newid), "VM.Allocate") {
		return nil
	}
	if pool != "" && c.holds("/pool/"+pool, "VM.Allocate") {
		return nil
	}
	return apiErr(http.StatusForbidden, "Permission check failed")
}

// allowBridges is qemu-server's check_bridge_access on the net[n] values of cfg, in key order:
// SDN.Use on each path pve-guest-common's check_vnet_access checks for the NIC, its bridge in
// its vnet's zone, else in localnetwork.
func (c *Cluster) allowBridges(cfg map[string]string) error {
	for _, key := range slices.Sorted(maps.Keys(cfg)) {
		if !netKeyRE.MatchString(key) {
			continue
		}
		n, ok := pve.NetworkOf(cfg[key])
		if !ok {
			continue
		}
		zone := pve.LocalNetwork
		if i := slices.IndexFunc(c.vnets, func(v pve.SDNVnet) bool { return v.Vnet == n.Bridge }); i >= 0 {
			zone = c.vnets[i].Zone
		}
		for _, path := range n.SDNUsePaths(zone) {
			if err := c.allow(path, "SDN.Use"); err != nil {
				return err
			}
		}
	}
	return nil
}

// SDNVnets answers GET /cluster/sdn/vnets: the vnets the token holds SDN.Audit or SDN.Allocate
// on (pve-network API2/Network/SDN/Vnets.pm index), in name order.
func (c *Cluster) SDNVnets(ctx context.Context) ([]pve.SDNVnet, error) {
	return call(c, ctx, Call{Method: "SDNVnets"}, func(time.Time) ([]pve.SDNVnet, error) {
		out := []pve.SDNVnet{}
		for _, v := range c.vnets {
			if c.allow("/sdn/zones/"+v.Zone+"/"+v.Vnet, "SDN.Audit", "SDN.Allocate") == nil {
				out = append(out, v)
			}
		}
		return out, nil
	})
}
