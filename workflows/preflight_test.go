package workflows_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/reads"
)

func TestPreflight_aMissingPrivilegeIsReportedByCheckAndRefusesTheCreateBeforeAnyClone(t *testing.T) {
	tests := map[string]struct {
		denied  string
		missing pve.MissingPrivilege
	}{
		"the template's VM.Clone":           {"VM.Clone", pve.MissingPrivilege{Path: "/vms/9000", Privilege: "VM.Clone"}},
		"the clone storage's AllocateSpace": {"Datastore.AllocateSpace", pve.MissingPrivilege{Path: "/storage/local-lvm", Privilege: "Datastore.AllocateSpace"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, func(o *pvesim.Options) { o.DenyPrivileges = []string{tt.denied} })

			check := w.check()
			_, err := w.create(createInput())

			require.Len(t, check.Nodes, 1)
			n := check.Nodes[0]
			assert.False(t, n.Healthy)
			assert.Equal(t, reads.ReasonMissingPrivilege, n.Reason)
			assert.Equal(t, []pve.MissingPrivilege{tt.missing}, n.MissingPrivileges)
			assert.Contains(t, n.Message, tt.missing.Privilege+" on "+tt.missing.Path)
			require.Error(t, err)
			assert.Equal(t, core.FailPermanent, failureType(t, err))
			assert.Contains(t, err.Error(), n.Message, "the create fails with the message the check gives")
			assert.Empty(t, w.cluster.CloneRuns(), "no clone was made")
			assert.Zero(t, w.cluster.CallCount("Clone"), "no clone was asked for")
		})
	}
}

func TestCheck_aNodeWithEveryPrivilegeHasNoneMissing(t *testing.T) {
	w := newWorld(t)

	res := w.check()

	require.Len(t, res.Nodes, 1)
	assert.True(t, res.Nodes[0].Healthy)
	assert.Empty(t, res.Nodes[0].MissingPrivileges)
	assert.Equal(t, 7, w.cluster.CallCount("Permissions"), "one read per path: /, /nodes/pve1, /vms, /vms/9000, /storage/local, /storage/local-lvm, /sdn/zones/localnetwork/vmbr0 (the template's NIC)")
}

func TestCheck_missingPrivilegesAreListedWhateverElseFailed(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.DenyPrivileges = []string{"Sys.Audit"} })

	res := w.check()

	n := res.Nodes[0]
	assert.Equal(t, reads.ReasonForbidden, n.Reason, "the node status read fails first")
	assert.Equal(t, []pve.MissingPrivilege{{Path: "/", Privilege: "Sys.Audit"}, {Path: "/nodes/pve1", Privilege: "Sys.Audit"}}, n.MissingPrivileges)
}

func TestCheck_withoutAConfiguredStorageTheTemplatesStorageIsChecked(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.DenyPrivileges = []string{"Datastore.AllocateSpace"} })
	w.cfg.Proxmox.Storage = ""

	res := w.check()

	require.Len(t, res.Nodes, 1)
	assert.Equal(t, reads.ReasonMissingPrivilege, res.Nodes[0].Reason)
	assert.Equal(t, []pve.MissingPrivilege{{Path: "/storage/local-lvm", Privilege: "Datastore.AllocateSpace"}}, res.Nodes[0].MissingPrivileges,
		"template 9000's boot disk is on local-lvm")
}

// proxyUser is the user of the simulator's token, which has its user's privileges.
const proxyUser = "pveflow@pve"

// withACL gives the simulator's token the roles "Proxies", every privilege pveflow needs but
// SDN.Use, and PVE's "PVESDNUser", on the ACL entries acl.
func withACL(acl ...pvesim.ACE) func(*pvesim.Options) {
	return func(o *pvesim.Options) {
		proxies := slices.DeleteFunc(pve.KnownPrivileges(), func(p string) bool { return p == "SDN.Use" })
		o.Access = &pvesim.Access{
			Roles: map[string][]string{"Proxies": append(proxies, "SDN.Audit"), "PVESDNUser": {"SDN.Audit", "SDN.Use"}},
			ACL:   acl,
		}
	}
}

// everywhereBut are the ACL entries that grant "Proxies" on / with propagate, and PVESDNUser on
// the template's bridge without, plus acl.
func everywhereBut(acl ...pvesim.ACE) []pvesim.ACE {
	return append([]pvesim.ACE{
		{Path: "/", User: proxyUser, Role: "Proxies", Propagate: true},
		{Path: "/sdn/zones/localnetwork/vmbr0", User: proxyUser, Role: "PVESDNUser"}, // the template's NIC
	}, acl...)
}

func TestPreflight_aCreateThroughAnSDNVnetNeedsSDNUseInTheVnetsZone(t *testing.T) {
	tests := map[string]struct {
		grant   string
		missing []pve.MissingPrivilege
	}{
		"granted on the vnet in its zone": {"/sdn/zones/zone1/vnet1", nil},
		"granted in localnetwork only":    {"/sdn/zones/localnetwork/vnet1", []pve.MissingPrivilege{{Path: "/sdn/zones/zone1/vnet1", Privilege: "SDN.Use"}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, withACL(everywhereBut(pvesim.ACE{Path: tt.grant, User: proxyUser, Role: "PVESDNUser"})...),
				func(o *pvesim.Options) { o.Vnets = []pve.SDNVnet{{Vnet: "vnet1", Zone: "zone1"}} })
			w.cfg.Proxmox.Bridge = "vnet1"

			check := w.check()
			_, err := w.create(createInput())

			assert.Equal(t, tt.missing, check.Nodes[0].MissingPrivileges)
			if tt.missing == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, core.FailPermanent, failureType(t, err))
			assert.Contains(t, err.Error(), "SDN.Use on /sdn/zones/zone1/vnet1")
			assert.Zero(t, w.cluster.CallCount("Clone"), "no clone was asked for")
		})
	}
}

func TestPreflight_aTaggedNICNeedsSDNUseOnItsVLANsPath(t *testing.T) {
	tests := map[string]struct {
		grant   pvesim.ACE
		missing []pve.MissingPrivilege
	}{
		"granted on the VLAN's path":            {pvesim.ACE{Path: "/sdn/zones/localnetwork/vmbr1/20", User: proxyUser, Role: "PVESDNUser"}, nil},
		"granted on the bridge with propagate":  {pvesim.ACE{Path: "/sdn/zones/localnetwork/vmbr1", User: proxyUser, Role: "PVESDNUser", Propagate: true}, nil},
		"granted on the bridge, not propagated": {pvesim.ACE{Path: "/sdn/zones/localnetwork/vmbr1", User: proxyUser, Role: "PVESDNUser"}, []pve.MissingPrivilege{{Path: "/sdn/zones/localnetwork/vmbr1/20", Privilege: "SDN.Use"}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, withACL(everywhereBut(tt.grant)...))
			mt := w.cfg.Proxmox.MachineTypes["small"]
			mt.NICs = []config.NIC{{Bridge: "vmbr1", VLAN: 20}}
			w.cfg.Proxmox.MachineTypes["small"] = mt
			w.cfg.Proxmox.MachineTypes["large"] = mt

			check := w.check()
			_, err := w.create(createInput())

			assert.Equal(t, tt.missing, check.Nodes[0].MissingPrivileges)
			if tt.missing == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "SDN.Use on /sdn/zones/localnetwork/vmbr1/20")
			assert.Zero(t, w.cluster.CallCount("Clone"), "no clone was asked for")
		})
	}
}

func TestPreflight_aGrantOnVMsWithoutPropagateIsMissingForTheNewVMs(t *testing.T) {
	w := newWorld(t, withACL(
		pvesim.ACE{Path: "/", User: proxyUser, Role: "Proxies"},
		pvesim.ACE{Path: "/nodes", User: proxyUser, Role: "Proxies", Propagate: true},
		pvesim.ACE{Path: "/storage", User: proxyUser, Role: "Proxies", Propagate: true},
		pvesim.ACE{Path: "/vms", User: proxyUser, Role: "Proxies"},
		pvesim.ACE{Path: "/vms/9000", User: proxyUser, Role: "Proxies"},
		pvesim.ACE{Path: "/sdn/zones/localnetwork/vmbr0", User: proxyUser, Role: "PVESDNUser"},
	))

	check := w.check()
	_, err := w.create(createInput())

	missing := check.Nodes[0].MissingPrivileges
	require.NotEmpty(t, missing)
	assert.Equal(t, pve.MissingPrivilege{Path: "/vms", Privilege: "VM.Allocate", Unpropagated: true}, missing[0])
	require.Error(t, err)
	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "VM.Allocate on /vms (granted without propagate: the paths below do not inherit it)")
	assert.Zero(t, w.cluster.CallCount("Clone"), "no clone was asked for: PVE would refuse VM.Allocate on the new VMID")
}
