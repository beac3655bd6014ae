package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func v4Range() *AddressRange {
	return &AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.10", Last: "192.0.2.209", Gateway: "192.0.2.1"}
}

func v6Range() *AddressRange {
	return &AddressRange{Subnet: "2001:db8:0:1::/64", First: "2001:db8:0:1::10", Last: "2001:db8:0:1::d7", Gateway: "2001:db8:0:1::1"}
}

func withPools(pools map[string]AddressPool) error {
	c := full()
	c.Proxmox.AddressPools = pools
	return c.Validate()
}

func TestValidate_addressPoolsAccepted(t *testing.T) {
	tests := []struct {
		name string
		pool AddressPool
	}{
		{"ipv4 only", AddressPool{IPv4: v4Range()}},
		{"ipv6 only", AddressPool{IPv6: v6Range()}},
		{"both families of one size", AddressPool{IPv4: v4Range(), IPv6: v6Range()}},
		{"no gateway", AddressPool{IPv4: &AddressRange{Subnet: "10.0.0.0/24", First: "10.0.0.1", Last: "10.0.0.1"}}},
		{"a /31 uses both addresses", AddressPool{IPv4: &AddressRange{Subnet: "10.0.0.0/31", First: "10.0.0.0", Last: "10.0.0.1"}}},
		{"the largest pool", AddressPool{IPv4: &AddressRange{Subnet: "10.0.0.0/16", First: "10.0.0.1", Last: "10.0.8.0"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.NoError(t, withPools(map[string]AddressPool{"egress": tt.pool}))
		})
	}
}

func TestValidate_addressPoolsRefused(t *testing.T) {
	tests := []struct {
		name  string
		pools map[string]AddressPool
		want  string
	}{
		{"no family", map[string]AddressPool{"egress": {}}, "proxmox.addressPools.egress: gives no address: set ipv4, ipv6 or both"},
		{"bad name", map[string]AddressPool{"-egress": {IPv4: v4Range()}}, `proxmox.addressPools.-egress: "-egress" is not a valid pool name`},
		{"subnet not a prefix", map[string]AddressPool{"p": {IPv4: &AddressRange{Subnet: "192.0.2.0", First: "192.0.2.1", Last: "192.0.2.2"}}},
			`proxmox.addressPools.p.ipv4: subnet "192.0.2.0" is not address/prefix-length`},
		{"subnet with host bits", map[string]AddressPool{"p": {IPv4: &AddressRange{Subnet: "192.0.2.7/24", First: "192.0.2.10", Last: "192.0.2.20"}}},
			`proxmox.addressPools.p.ipv4: subnet "192.0.2.7/24" has host bits set: want 192.0.2.0/24`},
		{"ipv6 in the ipv4 range", map[string]AddressPool{"p": {IPv4: v6Range()}}, "proxmox.addressPools.p.ipv4: subnet 2001:db8:0:1:: is not an IPv4 address"},
		{"first outside the subnet", map[string]AddressPool{"p": {IPv4: &AddressRange{Subnet: "192.0.2.0/24", First: "192.0.3.10", Last: "192.0.2.20"}}},
			"proxmox.addressPools.p.ipv4: first 192.0.3.10 is outside subnet 192.0.2.0/24"},
		{"last before first", map[string]AddressPool{"p": {IPv4: &AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.20", Last: "192.0.2.10"}}},
			"proxmox.addressPools.p.ipv4: last 192.0.2.10 comes before first 192.0.2.20"},
		{"gateway in the range", map[string]AddressPool{"p": {IPv4: &AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.1", Last: "192.0.2.20", Gateway: "192.0.2.5"}}},
			"proxmox.addressPools.p.ipv4: gateway 192.0.2.5 is inside the range 192.0.2.1..192.0.2.20, which gives it to a proxy"},
		{"gateway outside the subnet", map[string]AddressPool{"p": {IPv6: &AddressRange{Subnet: "2001:db8::/64", First: "2001:db8::10", Last: "2001:db8::20", Gateway: "2001:db9::1"}}},
			"proxmox.addressPools.p.ipv6: gateway 2001:db9::1 is outside subnet 2001:db8::/64"},
		{"network address", map[string]AddressPool{"p": {IPv4: &AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.0", Last: "192.0.2.20"}}},
			"proxmox.addressPools.p.ipv4: 192.0.2.0..192.0.2.20 holds 192.0.2.0, the network address of subnet 192.0.2.0/24"},
		{"broadcast address", map[string]AddressPool{"p": {IPv4: &AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.200", Last: "192.0.2.255"}}},
			"proxmox.addressPools.p.ipv4: 192.0.2.200..192.0.2.255 holds 192.0.2.255, the broadcast address of subnet 192.0.2.0/24"},
		{"too large", map[string]AddressPool{"p": {IPv6: &AddressRange{Subnet: "2001:db8::/64", First: "2001:db8::1", Last: "2001:db8::ffff"}}},
			"proxmox.addressPools.p.ipv6: 2001:db8::1..2001:db8::ffff holds more than 2048 addresses"},
		{"families of other sizes", map[string]AddressPool{"p": {IPv4: v4Range(), IPv6: &AddressRange{Subnet: "2001:db8::/64", First: "2001:db8::1", Last: "2001:db8::2"}}},
			"proxmox.addressPools.p: ipv4 holds 200 addresses and ipv6 2"},
		{"pools that overlap", map[string]AddressPool{"a": {IPv4: v4Range()}, "b": {IPv4: &AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.209", Last: "192.0.2.220"}}},
			"proxmox.addressPools.b.ipv4: 192.0.2.209..192.0.2.220 overlaps pool a's 192.0.2.10..192.0.2.209: two proxies would get one address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := withPools(tt.pools)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestAddressPool_atGivesTheSamePlaceInEachFamily(t *testing.T) {
	p := AddressPool{IPv4: v4Range(), IPv6: v6Range()}
	require.Equal(t, 200, p.Size())
	v4, v6 := p.At(0)
	assert.Equal(t, "192.0.2.10/24", v4)
	assert.Equal(t, "2001:db8:0:1::10/64", v6)
	v4, v6 = p.At(199)
	assert.Equal(t, "192.0.2.209/24", v4)
	assert.Equal(t, "2001:db8:0:1::d7/64", v6)
}

func TestAddressPool_atCarriesAcrossOctets(t *testing.T) {
	p := AddressPool{IPv4: &AddressRange{Subnet: "10.0.0.0/16", First: "10.0.0.250", Last: "10.0.1.20"}}
	v4, v6 := p.At(10)
	assert.Equal(t, "10.0.1.4/16", v4)
	assert.Empty(t, v6)
}

func TestAddressPool_indexOfIsAtsIndex(t *testing.T) {
	p := AddressPool{IPv4: v4Range(), IPv6: v6Range()}
	for _, i := range []int{0, 1, 199} {
		v4, v6 := p.At(i)
		assert.Equal(t, i, p.IndexOf(v4), v4)
		assert.Equal(t, i, p.IndexOf(v6), v6)
	}
	for addr, want := range map[string]int{"192.0.2.11": 1, "192.0.2.11/23": 1, "192.0.2.9/24": -1, "192.0.2.210": -1, "2001:db8:0:2::10": -1, "": -1, "nope": -1} {
		assert.Equal(t, want, p.IndexOf(addr), addr)
	}
}

func TestParse_addressPools(t *testing.T) {
	c, err := Parse([]byte(fullWith(t, func(c *Config) {
		c.Proxmox.AddressPools = map[string]AddressPool{"egress": {IPv4: v4Range(), IPv6: v6Range()}}
	})))
	require.NoError(t, err)
	assert.Equal(t, AddressPool{IPv4: v4Range(), IPv6: v6Range()}, c.Proxmox.AddressPools["egress"])
	assert.Equal(t, []string{"egress"}, c.Proxmox.AddressPoolNames())
}

func TestProxmox_addressPoolHoldingNamesThePoolOfAnAddress(t *testing.T) {
	c := full().Proxmox
	c.AddressPools = map[string]AddressPool{"egress": {IPv4: v4Range(), IPv6: v6Range()}}
	for addr, want := range map[string]string{
		"192.0.2.10": "egress", "192.0.2.209/24": "egress", "2001:db8:0:1::d7/64": "egress",
		"192.0.2.1": "", "192.0.2.210/24": "", "2001:db8:0:1::1": "", "not an address": "",
	} {
		assert.Equal(t, want, c.AddressPoolHolding(addr), addr)
	}
}
