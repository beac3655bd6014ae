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
		{Name: "net1", MAC: "BC:24:11:00:00:01", DHCP4: true},
	}, SeedNetwork(cfg, a, []config.NIC{{}, {Bridge: "vmbr1"}}, []string{"192.0.2.53"}))
}
