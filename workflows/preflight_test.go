package workflows_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows"
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
			assert.Equal(t, workflows.ReasonMissingPrivilege, n.Reason)
			assert.Equal(t, []pve.MissingPrivilege{tt.missing}, n.MissingPrivileges)
			assert.Contains(t, n.Message, tt.missing.Privilege+" on "+tt.missing.Path)
			require.Error(t, err)
			assert.Equal(t, workflows.FailPermanent, failureType(t, err))
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
	assert.Equal(t, workflows.ReasonForbidden, n.Reason, "the node status read fails first")
	assert.Equal(t, []pve.MissingPrivilege{{Path: "/", Privilege: "Sys.Audit"}, {Path: "/nodes/pve1", Privilege: "Sys.Audit"}}, n.MissingPrivileges)
}

func TestCheck_withoutAConfiguredStorageTheTemplatesStorageIsChecked(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.DenyPrivileges = []string{"Datastore.AllocateSpace"} })
	w.cfg.Proxmox.Storage = ""

	res := w.check()

	require.Len(t, res.Nodes, 1)
	assert.Equal(t, workflows.ReasonMissingPrivilege, res.Nodes[0].Reason)
	assert.Equal(t, []pve.MissingPrivilege{{Path: "/storage/local-lvm", Privilege: "Datastore.AllocateSpace"}}, res.Nodes[0].MissingPrivileges,
		"template 9000's boot disk is on local-lvm")
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
			const user = "pveflow@pve"
			all := slices.DeleteFunc(pve.KnownPrivileges(), func(p string) bool { return p == "SDN.Use" })
			w := newWorld(t, func(o *pvesim.Options) {
				o.Vnets = []pve.SDNVnet{{Vnet: "vnet1", Zone: "zone1"}}
				o.Access = &pvesim.Access{
					Roles: map[string][]string{"Proxies": append(all, "SDN.Audit"), "PVESDNUser": {"SDN.Audit", "SDN.Use"}},
					ACL: []pvesim.ACE{
						{Path: "/", User: user, Role: "Proxies", Propagate: true},
						{Path: "/sdn/zones/localnetwork/vmbr0", User: user, Role: "PVESDNUser"}, // the template's NIC
						{Path: tt.grant, User: user, Role: "PVESDNUser"},
					},
				}
			})
			w.cfg.Proxmox.Bridge = "vnet1"

			check := w.check()
			_, err := w.create(createInput())

			assert.Equal(t, tt.missing, check.Nodes[0].MissingPrivileges)
			if tt.missing == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, workflows.FailPermanent, failureType(t, err))
			assert.Contains(t, err.Error(), "SDN.Use on /sdn/zones/zone1/vnet1")
			assert.Zero(t, w.cluster.CallCount("Clone"), "no clone was asked for")
		})
	}
}
