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
		{Path: "/vms", Privileges: []string{"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory", "VM.Config.Options", "VM.GuestAgent.Audit", "VM.PowerMgmt"}},
		{Path: "/vms/9000", Privileges: []string{"VM.Audit", "VM.Clone"}},
		{Path: "/storage/local", Privileges: []string{"Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.Audit"}},
		{Path: "/storage/local-lvm", Privileges: []string{"Datastore.AllocateSpace"}},
	}, got)
}

func TestPrivilegeTarget_aPoolABridgeAndHAMoveTheVMPrivilegesAndAddTheirs(t *testing.T) {
	got := pve.PrivilegeTarget{Node: "pve1", ISOStorage: "local", Pool: "proxies", Network: true, Bridges: []string{"vmbr1"}, HA: true, Templates: []int{9000}}.Required()

	assert.Equal(t, []pve.PathPrivileges{
		{Path: "/", Privileges: []string{"Sys.Audit", "Sys.Console"}},
		{Path: "/nodes/pve1", Privileges: []string{"Sys.Audit"}},
		{Path: "/vms", Privileges: []string{"VM.Audit"}},
		{Path: "/pool/proxies", Privileges: []string{"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.GuestAgent.Audit", "VM.PowerMgmt"}},
		{Path: "/vms/9000", Privileges: []string{"VM.Audit", "VM.Clone"}},
		{Path: "/storage/local", Privileges: []string{"Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.Audit"}},
		{Path: "/sdn/zones/localnetwork/vmbr1", Privileges: []string{"SDN.Use"}},
	}, got)
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
