package config

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse_machineTypeNICs(t *testing.T) {
	got, err := Parse([]byte(fullWith(t, func(c *Config) {
		c.Proxmox.MachineTypes["dual"] = MachineType{Cores: 1, MemoryMiB: 512, NICs: []NIC{{VLAN: 20}, {Bridge: "vmbr1", VLAN: 4094}}}
	})))
	require.NoError(t, err)

	assert.Equal(t, []NIC{{VLAN: 20}, {Bridge: "vmbr1", VLAN: 4094}}, got.Proxmox.MachineTypes["dual"].NICs)
}

func TestValidate_machineTypeNICsTable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nics    []NIC
		wantErr string
	}{
		{"vlan 0 is none", []NIC{{VLAN: 0}}, ""},
		{"vlan 1 and 4094, PVE's bounds", []NIC{{VLAN: 1}, {Bridge: "vmbr1", VLAN: 4094}}, ""},
		{"vlan 4095", []NIC{{VLAN: 4095}}, "proxmox.machineTypes.tiny.nics[0].vlan: 4095 is outside PVE's VLAN tags 1..4094"},
		{"vlan negative", []NIC{{}, {Bridge: "vmbr1", VLAN: -1}}, "proxmox.machineTypes.tiny.nics[1].vlan: -1 is outside"},
		{"further NIC without a bridge", []NIC{{}, {VLAN: 30}}, "proxmox.machineTypes.tiny.nics[1].bridge: is required: net1 is a new NIC"},
		{"bad bridge", []NIC{{Bridge: "vmbr 0"}}, `proxmox.machineTypes.tiny.nics[0].bridge: "vmbr 0" is not a valid bridge name`},
		{"33 NICs", make([]NIC, 33), "proxmox.machineTypes.tiny.nics: 33 NICs are more than PVE's 32 (net0..net31)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(fullWith(t, func(c *Config) {
				c.Proxmox.MachineTypes["tiny"] = MachineType{Cores: 1, MemoryMiB: 512, NICs: tc.nics}
			})))
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestValidate_nameserversAreIPAddresses(t *testing.T) {
	_, err := Parse([]byte(fullWith(t, func(c *Config) { c.Proxmox.Nameservers = []string{"192.0.2.53", "2001:db8::53", "dns.example"} })))

	require.Error(t, err)
	assert.Contains(t, err.Error(), `proxmox.nameservers[2]: "dns.example" is not an IP address`)
	assert.NotContains(t, err.Error(), "nameservers[0]")
}

func TestValidateNICs_isOneLineNamingEachNIC(t *testing.T) {
	err := ValidateNICs([]NIC{{VLAN: 5000}, {VLAN: 30}})

	require.Error(t, err)
	assert.Equal(t, "nics[0].vlan: 5000 is outside PVE's VLAN tags 1..4094; nics[1].bridge: is required: net1 is a new NIC and has no bridge of its own", err.Error())
	assert.NoError(t, ValidateNICs(nil))
}

func TestNIC_stringIsTheCLIsForm(t *testing.T) {
	assert.Equal(t, "[:20 vmbr1:30 vmbr2]", fmt.Sprint([]NIC{{VLAN: 20}, {Bridge: "vmbr1", VLAN: 30}, {Bridge: "vmbr2"}}))
}
