package pve_test

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/internal/docsection"
	"github.com/pveflow/pveflow/internal/pve"
)

var update = flag.Bool("update", false, "write docs/proxmox.md's privileges table instead of checking it")

func TestDocs_privilegesTableIsTheRules(t *testing.T) {
	var b strings.Builder
	b.WriteString("| path | when | privileges | for |\n|---|---|---|---|\n")
	for _, r := range pve.PrivilegeRules {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", r.Path, r.When, strings.Join(r.Privileges, "` `"), r.Why)
	}
	docsection.Check(t, filepath.Join("..", "..", "docs", "proxmox.md"), "privileges",
		"go test ./internal/pve -run TestDocs -update", b.String(), *update)
}

func TestPrivilegeTarget_requiredFillsThePathsIn(t *testing.T) {
	got := pve.PrivilegeTarget{Node: "pve1", ISOStorage: "local", CloneStorages: []string{"local-lvm"}, Templates: []int{9000}}.Required()

	assert.Equal(t, []pve.PathPrivileges{
		{Path: "/", Privileges: []string{"Sys.Audit"}},
		{Path: "/nodes/pve1", Privileges: []string{"Sys.Audit"}},
		{Path: "/vms", Privileges: []string{"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory", "VM.Config.Options", "VM.GuestAgent.Audit", "VM.PowerMgmt"}, Propagate: true},
		{Path: "/vms/9000", Privileges: []string{"VM.Audit", "VM.Clone"}},
		{Path: "/storage/local", Privileges: []string{"Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.Audit"}},
		{Path: "/storage/local-lvm", Privileges: []string{"Datastore.AllocateSpace"}},
	}, got)
}

func TestPrivilegeTarget_aPoolABridgeAndHAMoveTheVMPrivilegesAndAddTheirs(t *testing.T) {
	got := pve.PrivilegeTarget{Node: "pve1", ISOStorage: "local", Pool: "proxies", Network: true, NICs: []pve.NICNetwork{{Bridge: "vmbr1"}}, HA: true, Templates: []int{9000}}.Required()

	assert.Equal(t, []pve.PathPrivileges{
		{Path: "/", Privileges: []string{"Sys.Audit", "Sys.Console"}},
		{Path: "/nodes/pve1", Privileges: []string{"Sys.Audit"}},
		{Path: "/vms", Privileges: []string{"VM.Audit"}, Propagate: true},
		{Path: "/pool/proxies", Privileges: []string{"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.GuestAgent.Audit", "VM.PowerMgmt"}},
		{Path: "/vms/9000", Privileges: []string{"VM.Audit", "VM.Clone"}},
		{Path: "/storage/local", Privileges: []string{"Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.Audit"}},
		{Path: "/sdn/zones/localnetwork/vmbr1", Privileges: []string{"SDN.Use"}},
	}, got)
}

func TestPrivilegeTarget_cloudInitReadinessAddsFileReadOnTheProxiesVMsAlone(t *testing.T) {
	base := pve.PrivilegeTarget{Node: "pve1", ISOStorage: "local", Pool: "proxies", Templates: []int{9000}}
	with := base
	with.CloudInit = true

	proxies := func(req []pve.PathPrivileges) []string {
		for _, p := range req {
			if p.Path == "/pool/proxies" {
				return p.Privileges
			}
		}
		return nil
	}

	assert.NotContains(t, proxies(base.Required()), "VM.GuestAgent.FileRead")
	assert.Contains(t, proxies(with.Required()), "VM.GuestAgent.FileRead")
	assert.NotContains(t, proxies(with.Required()), "VM.GuestAgent.Unrestricted", "FileRead is the least that reads a file")
	assert.Len(t, with.Required(), len(base.Required()), "no other path")
}

func TestMissing_isEachRequiredPrivilegeNotHeldOnItsPath(t *testing.T) {
	required := []pve.PathPrivileges{
		{Path: "/vms/9000", Privileges: []string{"VM.Audit", "VM.Clone"}},
		{Path: "/storage/local-lvm", Privileges: []string{"Datastore.AllocateSpace"}},
		{Path: "/nodes/pve1", Privileges: []string{"Sys.Audit"}},
	}
	held := map[string]pve.Privileges{
		"/vms/9000":          {"VM.Audit": true},
		"/storage/local-lvm": {"Datastore.AllocateSpace": false}, // held, not propagated
	}

	missing := pve.Missing(required, held)

	assert.Equal(t, []pve.MissingPrivilege{{Path: "/vms/9000", Privilege: "VM.Clone"}, {Path: "/nodes/pve1", Privilege: "Sys.Audit"}}, missing)
	assert.Equal(t, "the API token lacks privileges a proxy on node pve1 needs: VM.Clone on /vms/9000, Sys.Audit on /nodes/pve1 (docs/proxmox.md, section 1)",
		pve.MissingMessage("pve1", missing))
}

func TestPrivilegeTarget_eachNICNeedsSDNUseOnThePathPVEChecks(t *testing.T) {
	zones := map[string]string{"vnet1": "zone1"}
	for name, tt := range map[string]struct {
		nic  pve.NICNetwork
		want []string
	}{
		"a Linux bridge, in localnetwork":        {pve.NICNetwork{Bridge: "vmbr1"}, []string{"/sdn/zones/localnetwork/vmbr1"}},
		"a vnet, in its own zone":                {pve.NICNetwork{Bridge: "vnet1"}, []string{"/sdn/zones/zone1/vnet1"}},
		"a tagged NIC, its VLAN's path only":     {pve.NICNetwork{Bridge: "vmbr1", Tag: 20}, []string{"/sdn/zones/localnetwork/vmbr1/20"}},
		"a tagged NIC on a vnet":                 {pve.NICNetwork{Bridge: "vnet1", Tag: 20}, []string{"/sdn/zones/zone1/vnet1/20"}},
		"trunks, each VLAN in string order":      {pve.NICNetwork{Bridge: "vmbr1", Trunks: "9-11;100"}, []string{"/sdn/zones/localnetwork/vmbr1/10", "/sdn/zones/localnetwork/vmbr1/100", "/sdn/zones/localnetwork/vmbr1/11", "/sdn/zones/localnetwork/vmbr1/9"}},
		"a tag and trunks, the tag's path first": {pve.NICNetwork{Bridge: "vmbr1", Tag: 5, Trunks: "7"}, []string{"/sdn/zones/localnetwork/vmbr1/5", "/sdn/zones/localnetwork/vmbr1/7"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := pve.PrivilegeTarget{Node: "pve1", ISOStorage: "local", Network: true, NICs: []pve.NICNetwork{tt.nic}, Zones: zones}.Required()

			var sdn []string
			for _, p := range got {
				if strings.HasPrefix(p.Path, "/sdn/") {
					assert.Equal(t, []string{"SDN.Use"}, p.Privileges, p.Path)
					sdn = append(sdn, p.Path)
				}
			}
			assert.Equal(t, tt.want, sdn)
		})
	}
}

func TestNetworkOf_readsTheBridgeTagAndTrunksOfANetValue(t *testing.T) {
	n, ok := pve.NetworkOf("virtio=BC:24:11:2E:C5:4A,bridge=vnet1,tag=20,trunks=30;40-42,firewall=1")
	assert.True(t, ok)
	assert.Equal(t, pve.NICNetwork{Bridge: "vnet1", Tag: 20, Trunks: "30;40-42"}, n)

	_, ok = pve.NetworkOf("virtio=BC:24:11:2E:C5:4A,link_down=1")
	assert.False(t, ok, "no bridge: PVE checks nothing")
}

func TestMissing_aGrantWithoutPropagateHoldsOnItsOwnPathOnly(t *testing.T) {
	required := []pve.PathPrivileges{
		{Path: "/vms", Privileges: []string{"VM.Allocate", "VM.Audit"}, Propagate: true},
		{Path: "/sdn/zones/zone1/vnet1", Privileges: []string{"SDN.Use"}},
	}
	held := map[string]pve.Privileges{
		"/vms":                   {"VM.Allocate": false, "VM.Audit": true},
		"/sdn/zones/zone1/vnet1": {"SDN.Use": false},
	}

	missing := pve.Missing(required, held)

	assert.Equal(t, []pve.MissingPrivilege{{Path: "/vms", Privilege: "VM.Allocate", Unpropagated: true}}, missing)
	assert.Equal(t, "VM.Allocate on /vms (granted without propagate: the paths below do not inherit it)", missing[0].String())
}

func TestPrivilegeTarget_theTemplatesNICsNeedSDNUseWithoutNetworkSettings(t *testing.T) {
	got := pve.PrivilegeTarget{Node: "pve1", ISOStorage: "local", TemplateNICs: []pve.NICNetwork{{Bridge: "vnet1", Tag: 7}}, Zones: map[string]string{"vnet1": "zone1"}}.Required()

	assert.Contains(t, got, pve.PathPrivileges{Path: "/sdn/zones/zone1/vnet1/7", Privileges: []string{"SDN.Use"}})
}
