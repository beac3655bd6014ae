package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/pve"
)

func TestNICValues_table(t *testing.T) {
	tmpl := pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,firewall=1"}
	for _, tc := range []struct {
		name   string
		cfg    pve.VMConfig
		bridge string
		nics   []config.NIC
		want   pve.VMConfig
	}{
		{"no NICs, no bridge: nothing to write", tmpl, "", nil, pve.VMConfig{}},
		{"no NICs: net0 on the configured bridge", tmpl, "vmbr9", nil,
			pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr9,firewall=1"}},
		{"net0's VLAN, its MAC kept", tmpl, "", []config.NIC{{VLAN: 20}},
			pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,firewall=1,tag=20"}},
		{"net0's own bridge beats the configured one", tmpl, "vmbr9", []config.NIC{{Bridge: "vmbr2"}},
			pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr2,firewall=1"}},
		{"a tag replaced", pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,tag=5"}, "", []config.NIC{{VLAN: 6}},
			pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,tag=6"}},
		{"a further NIC added for PVE to give a MAC", tmpl, "", []config.NIC{{}, {Bridge: "vmbr1", VLAN: 30}},
			pve.VMConfig{"net1": "virtio,bridge=vmbr1,tag=30"}},
		{"a further NIC already there: its MAC kept, nothing to write",
			pve.VMConfig{"net0": tmpl["net0"], "net1": "virtio=BC:24:11:00:00:01,bridge=vmbr1,tag=30"}, "", []config.NIC{{}, {Bridge: "vmbr1", VLAN: 30}},
			pve.VMConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, NICValues(tc.cfg, tc.bridge, tc.nics))
		})
	}
}

func TestSeedNetwork_dhcpOnNet0AloneIsCloudInitsFallback(t *testing.T) {
	assert.Nil(t, SeedNetwork(pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0"}, Addresses{}, []config.NIC{{VLAN: 20}}, []string{"192.0.2.53"}))
}

func TestSeedNetwork_net0sAddressesAndFurtherNICsByMAC(t *testing.T) {
	cfg := pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0", "net1": "virtio=BC:24:11:00:00:01,bridge=vmbr1"}
	a := Addresses{IPv4: "192.0.2.10/24", Gateway4: "192.0.2.1", IPv6: "2001:db8::10/64", Gateway6: "fe80::1"}

	assert.Equal(t, []nocloud.Ethernet{
		{Name: "net0", MAC: "BC:24:11:2E:C5:4A", Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"}, Gateway4: "192.0.2.1", Gateway6: "fe80::1",
			Nameservers: []string{"192.0.2.53"}},
		{Name: "net1", MAC: "BC:24:11:00:00:01", DHCP4: true, Optional: true},
	}, SeedNetwork(cfg, a, []config.NIC{{}, {Bridge: "vmbr1"}}, []string{"192.0.2.53"}))
}

func TestNICChanges_table(t *testing.T) {
	const net0 = "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0"
	const net1 = "virtio=BC:24:11:00:00:01,bridge=vmbr1,tag=20"
	for _, tc := range []struct {
		name string
		cfg  pve.VMConfig
		nics []config.NIC
		want []NICChange
	}{
		{"matching NICs: none", pve.VMConfig{"net0": net0, "net1": net1}, []config.NIC{{}, {Bridge: "vmbr1", VLAN: 20}}, nil},
		{"a NIC the VM lacks is added", pve.VMConfig{"net0": net0}, []config.NIC{{}, {Bridge: "vmbr1", VLAN: 20}},
			[]NICChange{{Key: "net1", Want: "virtio,bridge=vmbr1,tag=20"}}},
		{"a NIC on another VLAN is changed, its MAC kept", pve.VMConfig{"net0": net0, "net1": net1}, []config.NIC{{}, {Bridge: "vmbr1", VLAN: 30}},
			[]NICChange{{Key: "net1", Have: net1, Want: "virtio=BC:24:11:00:00:01,bridge=vmbr1,tag=30"}}},
		{"a further NIC without a VLAN loses its tag", pve.VMConfig{"net0": net0, "net1": net1}, []config.NIC{{}, {Bridge: "vmbr1"}},
			[]NICChange{{Key: "net1", Have: net1, Want: "virtio=BC:24:11:00:00:01,bridge=vmbr1"}}},
		{"NICs beyond the spec's are removed, gaps and all", pve.VMConfig{"net0": net0, "net1": net1, "net5": "e1000=BC:24:11:00:00:05,bridge=vmbr5"}, nil,
			[]NICChange{{Key: "net1", Have: net1}, {Key: "net5", Have: "e1000=BC:24:11:00:00:05,bridge=vmbr5"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, NICChanges(tc.cfg, "", tc.nics))
		})
	}
}

func TestNICChange_strings(t *testing.T) {
	for _, tc := range []struct {
		c              NICChange
		drift, changes string
	}{
		{NICChange{Key: "net1", Want: "virtio,bridge=vmbr1,tag=20"}, "net1 missing, spec (vmbr1, tag 20)", "net1 added (vmbr1, tag 20)"},
		{NICChange{Key: "net1", Have: "virtio=BC:24:11:00:00:01,bridge=vmbr1,tag=20", Want: "virtio=BC:24:11:00:00:01,bridge=vmbr2"},
			"net1 (vmbr1, tag 20), spec (vmbr2)", "net1 (vmbr1, tag 20) -> (vmbr2)"},
		{NICChange{Key: "net2", Have: "virtio=BC:24:11:00:00:02"}, "net2 (no bridge), spec none", "net2 removed (no bridge)"},
	} {
		t.Run(tc.changes, func(t *testing.T) {
			assert.Equal(t, tc.drift, tc.c.String())
			assert.Equal(t, tc.changes, tc.c.Change())
		})
	}
}

func TestMachine_nicDrift(t *testing.T) {
	m, _ := MachineOf(pve.VMConfig{"net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0", "scsi0": "local-lvm:vm-1-disk-0,size=10G"})
	want := []config.NIC{{}, {Bridge: "vmbr1"}}

	assert.Equal(t, []NICChange{{Key: "net1", Want: "virtio,bridge=vmbr1"}}, m.NICDrift("", want))
	assert.Nil(t, Machine{Cores: 2}.NICDrift("", want), "NICs the machine does not know are passed over")
}
