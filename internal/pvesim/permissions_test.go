package pvesim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

const (
	simUser  = "pveflow@pve"
	simToken = "pveflow@pve!sim"
)

// everything is a role with every privilege pveflow needs and the vnets' audit.
var everything = append(pve.KnownPrivileges(), "SDN.Audit")

// withAccess sets the cluster's access to the roles and ACL entries, everything granted to the
// token's user on /vms and /storage with propagate and Sys.Audit on /, so that a clone runs.
func withAccess(acl ...ACE) func(*Options) {
	return func(o *Options) {
		o.Access = &Access{
			Roles: map[string][]string{"Everything": everything, "SDNUser": {"SDN.Use"}, "VMUser": {"VM.Audit", "VM.Allocate"}},
			ACL: append([]ACE{
				{Path: "/vms", User: simUser, Role: "Everything", Propagate: true},
				{Path: "/storage", User: simUser, Role: "Everything", Propagate: true},
				{Path: "/", User: simUser, Role: "Everything"},
			}, acl...),
		}
	}
}

func TestPermissions_aGrantWithoutPropagateHoldsOnItsOwnPathOnly(t *testing.T) {
	c, _ := newCluster(t, withAccess(ACE{Path: "/sdn/zones/localnetwork/vmbr1", User: simUser, Role: "SDNUser"}))

	own, err := c.Permissions(t.Context(), "/sdn/zones/localnetwork/vmbr1")
	require.NoError(t, err)
	below, err := c.Permissions(t.Context(), "/sdn/zones/localnetwork/vmbr1/20")
	require.NoError(t, err)

	assert.Equal(t, pve.Privileges{"SDN.Use": false}, own)
	assert.Empty(t, below)
}

func TestPermissions_aDeeperEntryReplacesTheRolesAbove(t *testing.T) {
	c, _ := newCluster(t, withAccess(ACE{Path: "/vms/9000", User: simUser, Role: "VMUser", Propagate: true}))

	privs, err := c.Permissions(t.Context(), "/vms/9000")

	require.NoError(t, err)
	assert.Equal(t, pve.Privileges{"VM.Audit": true, "VM.Allocate": true}, privs)
}

func TestPermissions_aUsersOwnEntryOverridesItsGroups(t *testing.T) {
	c, _ := newCluster(t, withAccess(
		ACE{Path: "/sdn", Group: "netops", Role: "Everything", Propagate: true},
		ACE{Path: "/sdn", User: simUser, Role: "SDNUser", Propagate: true},
	), func(o *Options) { o.Access.Groups = map[string][]string{"netops": {simUser}} })

	privs, err := c.Permissions(t.Context(), "/sdn/zones/zone1/vnet1")

	require.NoError(t, err)
	assert.Equal(t, pve.Privileges{"SDN.Use": true}, privs)
}

func TestPermissions_aPoolsRolesHoldOnItsVMsWithoutPropagate(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) {
		o.Pools = []string{"proxies"}
		o.VMs = append(o.VMs, VM{Node: "pve1", VMID: newID, Pool: "proxies", Config: pve.VMConfig{"name": "p"}})
		o.Access = &Access{
			Roles: map[string][]string{"VMUser": {"VM.Audit", "VM.Allocate"}},
			ACL:   []ACE{{Path: "/pool/proxies", User: simUser, Role: "VMUser", Propagate: true}},
		}
	})

	member, err := c.Permissions(t.Context(), vmPath(newID))
	require.NoError(t, err)
	other, err := c.Permissions(t.Context(), vmPath(tmplID))
	require.NoError(t, err)

	assert.Equal(t, pve.Privileges{"VM.Audit": false, "VM.Allocate": false}, member)
	assert.Empty(t, other)
}

func TestPermissions_aPrivsepTokenHoldsWhatItAndItsUserBothHold(t *testing.T) {
	c, _ := newCluster(t, withAccess(
		ACE{Path: "/sdn", User: simUser, Role: "Everything", Propagate: true},
		ACE{Path: "/sdn/zones/zone1", Token: simToken, Role: "SDNUser"},
	), func(o *Options) { o.Access.Privsep = true })

	zone, err := c.Permissions(t.Context(), "/sdn/zones/zone1")
	require.NoError(t, err)
	vms, err := c.Permissions(t.Context(), "/vms")
	require.NoError(t, err)

	assert.Equal(t, pve.Privileges{"SDN.Use": false}, zone, "the token's own grant, without propagate, and its user's")
	assert.Empty(t, vms, "the user's only")
}

func TestSDNVnets_listsTheVnetsTheTokenAudits(t *testing.T) {
	c, _ := newCluster(t, withAccess(ACE{Path: "/sdn/zones/zone1", User: simUser, Role: "Everything", Propagate: true}),
		func(o *Options) {
			o.Vnets = []pve.SDNVnet{{Vnet: "vnet1", Zone: "zone1"}, {Vnet: "vnet2", Zone: "zone2"}}
		})

	vnets, err := c.SDNVnets(t.Context())

	require.NoError(t, err)
	assert.Equal(t, []pve.SDNVnet{{Vnet: "vnet1", Zone: "zone1"}}, vnets)
}

func TestClone_needsSDNUseOnTheTemplatesNICsInTheirVnetsZone(t *testing.T) {
	vnetTemplate := func(o *Options) {
		o.Vnets = []pve.SDNVnet{{Vnet: "vnet1", Zone: "zone1"}}
		for i := range o.VMs {
			if o.VMs[i].VMID == tmplID {
				o.VMs[i].Config["net0"] = "virtio=BC:24:11:00:00:01,bridge=vnet1"
			}
		}
	}
	refused, _ := newCluster(t, withAccess(ACE{Path: "/sdn/zones/localnetwork", User: simUser, Role: "SDNUser", Propagate: true}), vnetTemplate)
	allowed, _ := newCluster(t, withAccess(ACE{Path: "/sdn/zones/zone1/vnet1", User: simUser, Role: "SDNUser"}), vnetTemplate)

	_, err := refused.Clone(t.Context(), "pve1", tmplID, cloneParams(newID))
	assert.Equal(t, apiErr(403, "Permission check failed (/sdn/zones/zone1/vnet1, SDN.Use)"), err)
	_, err = allowed.Clone(t.Context(), "pve1", tmplID, cloneParams(newID))
	assert.NoError(t, err)
}

func TestSetVMConfig_aTaggedNICNeedsSDNUseOnItsVLANsPath(t *testing.T) {
	c, clk := newCluster(t, withAccess(ACE{Path: "/sdn/zones/localnetwork/vmbr0", User: simUser, Role: "SDNUser"}))
	createVM(t, c, clk, newID)

	err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"net1": "virtio,bridge=vmbr0,tag=20"})

	assert.Equal(t, apiErr(403, "Permission check failed (/sdn/zones/localnetwork/vmbr0/20, SDN.Use)"), err)
}

func TestSetVMConfig_replacingANICNeedsSDNUseOnTheNICItReplaces(t *testing.T) {
	c, _ := newCluster(t, withAccess(ACE{Path: "/sdn/zones/localnetwork/vmbr1", User: simUser, Role: "SDNUser"}), func(o *Options) {
		o.VMs = append(o.VMs, VM{Node: "pve1", VMID: newID, Config: pve.VMConfig{"name": "p", "net0": "virtio=BC:24:11:00:00:02,bridge=vmbr2"}})
	})

	err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"net0": "virtio,bridge=vmbr1"})

	assert.Equal(t, apiErr(403, "Permission check failed (/sdn/zones/localnetwork/vmbr2, SDN.Use)"), err)
}

func TestPermissions_aPoolsRolesHoldOnItsStorages(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) {
		o.Pools = []string{"proxies"}
		o.Access = &Access{
			Roles:        map[string][]string{"DatastoreUser": {"Datastore.AllocateSpace"}},
			ACL:          []ACE{{Path: "/pool/proxies", User: simUser, Role: "DatastoreUser", Propagate: true}},
			PoolStorages: map[string][]string{"proxies": {"local-lvm"}},
		}
	})

	member, err := c.Permissions(t.Context(), "/storage/local-lvm")
	require.NoError(t, err)
	other, err := c.Permissions(t.Context(), "/storage/local")
	require.NoError(t, err)

	assert.Equal(t, pve.Privileges{"Datastore.AllocateSpace": false}, member)
	assert.Empty(t, other)
}

func TestPermissions_noAccessTakesEveryPrivilege(t *testing.T) {
	c, _ := newCluster(t, withAccess(ACE{Path: "/vms/9000", User: simUser, Role: "NoAccess"}))

	privs, err := c.Permissions(t.Context(), "/vms/9000")

	require.NoError(t, err)
	assert.Empty(t, privs)
}
