package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestAddressesValidate_table(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    Addresses
		err  string // a substring of the error; empty for valid
	}{
		{"dhcp", Addresses{}, ""},
		{"static ipv4 with gateway", Addresses{IPv4: "192.0.2.10/24", Gateway4: "192.0.2.1"}, ""},
		{"static ipv4 without gateway", Addresses{IPv4: "192.0.2.10/24"}, ""},
		{"ipv4 /31 takes its lower address", Addresses{IPv4: "192.0.2.0/31", Gateway4: "192.0.2.1"}, ""},
		{"ipv4 /32", Addresses{IPv4: "192.0.2.7/32"}, ""},
		{"static ipv6 with gateway", Addresses{IPv6: "2001:db8::10/64", Gateway6: "2001:db8::1"}, ""},
		{"ipv6 gateway link-local", Addresses{IPv6: "2001:db8::10/64", Gateway6: "fe80::1"}, ""},
		{"dual stack", Addresses{IPv4: "192.0.2.10/24", Gateway4: "192.0.2.1", IPv6: "2001:db8::10/64", Gateway6: "2001:db8::1"}, ""},
		{"ipv6 only", Addresses{IPv6: "2001:db8::10/64", NoIPv4: true}, ""},
		{"ipv4 without prefix", Addresses{IPv4: "192.0.2.10"}, `"192.0.2.10" is not an address/prefix-length`},
		{"ipv4 garbage", Addresses{IPv4: "proxy/24"}, "is not an address/prefix-length"},
		{"ipv6 in ipv4", Addresses{IPv4: "2001:db8::10/64"}, "is not an IPv4 address"},
		{"ipv4 in ipv6", Addresses{IPv6: "192.0.2.10/24"}, "is not an IPv6 address"},
		{"ipv4-mapped ipv6", Addresses{IPv6: "::ffff:192.0.2.10/120"}, "is not an IPv6 address"},
		{"network address", Addresses{IPv4: "192.0.2.0/24"}, "192.0.2.0 is the network address of 192.0.2.0/24"},
		{"broadcast address", Addresses{IPv4: "192.0.2.255/24"}, "192.0.2.255 is the broadcast address of 192.0.2.0/24"},
		{"prefix length 0", Addresses{IPv4: "192.0.2.10/0"}, "a prefix length of 0"},
		{"loopback", Addresses{IPv4: "127.0.0.5/8"}, "is not a unicast host address"},
		{"link-local ipv6", Addresses{IPv6: "fe80::5/64"}, "is not a unicast host address"},
		{"multicast", Addresses{IPv4: "224.0.0.5/24"}, "is not a unicast host address"},
		{"gateway outside", Addresses{IPv4: "192.0.2.10/24", Gateway4: "198.51.100.1"}, "gateway 198.51.100.1 is outside 192.0.2.0/24"},
		{"gateway of the other family", Addresses{IPv4: "192.0.2.10/24", Gateway4: "2001:db8::1"}, "gateway 2001:db8::1 is not an IPv4 address"},
		{"gateway is the address", Addresses{IPv4: "192.0.2.10/24", Gateway4: "192.0.2.10"}, "is the address itself"},
		{"gateway not an address", Addresses{IPv6: "2001:db8::10/64", Gateway6: "router"}, `gateway "router" is not an address`},
		{"ipv6 gateway outside", Addresses{IPv6: "2001:db8::10/64", Gateway6: "2001:db8:1::1"}, "is outside 2001:db8::/64"},
		{"gateway4 alone", Addresses{Gateway4: "192.0.2.1"}, "gateway4 192.0.2.1 is given without an ipv4 address"},
		{"gateway6 alone", Addresses{Gateway6: "2001:db8::1"}, "gateway6 2001:db8::1 is given without an ipv6 address"},
		{"no ipv4 with ipv4", Addresses{IPv4: "192.0.2.10/24", IPv6: "2001:db8::10/64", NoIPv4: true}, "no-ipv4 excludes a static ipv4"},
		{"no ipv4 without ipv6", Addresses{NoIPv4: true}, "no-ipv4 needs an ipv6 address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.a.Validate()
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

func TestAddressesValidate_reportsEveryFamily(t *testing.T) {
	err := Addresses{IPv4: "192.0.2.0/24", IPv6: "192.0.2.10/24"}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ipv4: 192.0.2.0 is the network address")
	assert.Contains(t, err.Error(), "ipv6: 192.0.2.10/24 is not an IPv6 address")
}

func agentNet0(addrs ...pve.AgentIPAddress) []pve.AgentInterface {
	return []pve.AgentInterface{
		{Name: "lo", HardwareAddress: "00:00:00:00:00:00", IPAddresses: []pve.AgentIPAddress{{Address: "127.0.0.1", Type: "ipv4", Prefix: 8}}},
		{Name: "docker0", HardwareAddress: "02:42:ac:11:00:01", IPAddresses: []pve.AgentIPAddress{{Address: "172.17.0.1", Type: "ipv4", Prefix: 16}}},
		{Name: "net0", HardwareAddress: "bc:24:11:2e:c5:4a", IPAddresses: append([]pve.AgentIPAddress{
			{Address: "fe80::be24:11ff:fe2e:c54a", Type: "ipv6", Prefix: 64}}, addrs...)},
	}
}

func TestAddressesMissing_staticAddressesAreMatchedExactlyOnNet0(t *testing.T) {
	a := Addresses{IPv4: "192.0.2.10/24", Gateway4: "192.0.2.1", IPv6: "2001:db8::10/64"}
	ifaces := agentNet0(pve.AgentIPAddress{Address: "192.0.2.10", Type: "ipv4", Prefix: 25})

	assert.Equal(t, []string{"static address 192.0.2.10/24", "static address 2001:db8::10/64"}, a.Missing(ifaces, "BC:24:11:2E:C5:4A"))
}

func TestAddressesMissing_dhcpWantsARoutableIPv4(t *testing.T) {
	assert.Equal(t, []string{"a routable IPv4 from DHCP"}, Addresses{}.Missing(agentNet0(), "BC:24:11:2E:C5:4A"),
		"docker0's address is not net0's")
	assert.Empty(t, Addresses{}.Missing(agentNet0(pve.AgentIPAddress{Address: "10.0.0.5", Type: "ipv4", Prefix: 24}), "BC:24:11:2E:C5:4A"))
}

func TestAddressesReport_givesTheStaticAddressesAndNet0sList(t *testing.T) {
	a := Addresses{IPv4: "192.0.2.10/24", IPv6: "2001:db8::10/64"}
	ifaces := agentNet0(
		pve.AgentIPAddress{Address: "2001:db8::99", Type: "ipv6", Prefix: 64},
		pve.AgentIPAddress{Address: "2001:db8::10", Type: "ipv6", Prefix: 64},
		pve.AgentIPAddress{Address: "192.0.2.10", Type: "ipv4", Prefix: 24},
	)

	assert.Equal(t, Reported{
		IPv4:      "192.0.2.10",
		IPv6:      "2001:db8::10",
		Addresses: []string{"2001:db8::99/64", "2001:db8::10/64", "192.0.2.10/24"},
	}, a.Report(ifaces, "bc:24:11:2e:c5:4a"))
}
