package nocloud

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestWrite_staticAddressesGoIntoNetworkConfig(t *testing.T) {
	s := testSeed()
	s.Network = []Ethernet{
		{Name: "net0", MAC: "BC:24:11:2E:C5:4A", Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"}, Gateway4: "192.0.2.1", Gateway6: "fe80::1",
			Nameservers: []string{"192.0.2.53", "2001:db8::53"}},
		{Name: "net1", MAC: "BC:24:11:00:00:01", DHCP4: true, Optional: true},
	}

	files := rootFiles(t, writeImage(t, s))

	assert.Equal(t, `version: 2
ethernets:
  net0:
    match:
      macaddress: "bc:24:11:2e:c5:4a"
    set-name: net0
    dhcp4: false
    addresses:
      - "192.0.2.10/24"
      - "2001:db8::10/64"
    routes:
      - to: default
        via: "192.0.2.1"
      - to: default
        via: "fe80::1"
    nameservers:
      addresses:
        - "192.0.2.53"
        - "2001:db8::53"
    dhcp6: false
    accept-ra: false
  net1:
    match:
      macaddress: "bc:24:11:00:00:01"
    set-name: net1
    dhcp4: true
    optional: true
`, files["network-config"])
}

func TestWrite_noNetworkWritesNoNetworkConfig(t *testing.T) {
	files := rootFiles(t, writeImage(t, testSeed()))

	assert.NotContains(t, files, "network-config", "cloud-init's fallback, DHCP on the first NIC, is today's network")
}

func TestNetworkConfig_isTheYAMLOfNetplanVersion2(t *testing.T) {
	text, err := NetworkConfig([]Ethernet{{Name: "net0", MAC: "00:11:22:33:44:55", DHCP4: true, Addresses: []string{"2001:db8::10/64"}, Gateway6: "2001:db8::1"}})
	require.NoError(t, err)

	var doc struct {
		Version   int `yaml:"version"`
		Ethernets map[string]struct {
			Match struct {
				MACAddress string `yaml:"macaddress"`
			} `yaml:"match"`
			SetName   string   `yaml:"set-name"`
			DHCP4     bool     `yaml:"dhcp4"`
			DHCP6     *bool    `yaml:"dhcp6"`
			AcceptRA  *bool    `yaml:"accept-ra"`
			Addresses []string `yaml:"addresses"`
			Routes    []struct {
				To  string `yaml:"to"`
				Via string `yaml:"via"`
			} `yaml:"routes"`
		} `yaml:"ethernets"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(text), &doc))
	assert.Equal(t, 2, doc.Version)
	net0 := doc.Ethernets["net0"]
	assert.Equal(t, "00:11:22:33:44:55", net0.Match.MACAddress, "quoted, or YAML 1.1 reads an all-digit MAC as a number")
	assert.Equal(t, "net0", net0.SetName)
	assert.True(t, net0.DHCP4)
	assert.Equal(t, []string{"2001:db8::10/64"}, net0.Addresses)
	require.Len(t, net0.Routes, 1)
	assert.Equal(t, "default", net0.Routes[0].To)
	assert.Equal(t, "2001:db8::1", net0.Routes[0].Via)
	require.NotNil(t, net0.AcceptRA)
	assert.False(t, *net0.AcceptRA)
}

func TestNetworkConfig_refusesWhatItCannotWrite(t *testing.T) {
	for name, e := range map[string]Ethernet{
		"name":       {Name: "Net 0", MAC: "BC:24:11:2E:C5:4A"},
		"mac":        {Name: "net0", MAC: "BC:24:11:2E:C5"},
		"address":    {Name: "net0", MAC: "BC:24:11:2E:C5:4A", Addresses: []string{"192.0.2.10\n- evil"}},
		"gateway":    {Name: "net0", MAC: "BC:24:11:2E:C5:4A", Gateway4: "192.0.2.1\"x"},
		"nameserver": {Name: "net0", MAC: "BC:24:11:2E:C5:4A", Nameservers: []string{"dns.example"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NetworkConfig([]Ethernet{e})
			assert.ErrorIs(t, err, ErrInvalidNetwork)
		})
	}
}
