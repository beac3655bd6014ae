package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestMapState_table(t *testing.T) {
	tests := []struct {
		status, qmpstatus string
		hasIPv4           bool
		want              State
	}{
		{"running", "running", true, Running},
		{"running", "", true, Running},
		{"running", "running", false, Provisioning},
		{"running", "", false, Provisioning},
		{"running", "paused", true, Stopped},
		{"running", "prelaunch", false, Stopped},
		{"paused", "", false, Stopped},
		{"stopped", "stopped", false, Stopped},
		{"stopped", "", true, Stopped},
		{"unknown", "", false, Unknown},
		{"unknown", "", true, Unknown},
		{"", "", false, Stopped},
		{"suspended", "", false, Stopped},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, MapState(tt.status, tt.qmpstatus, tt.hasIPv4),
			"status %q qmpstatus %q hasIPv4 %v", tt.status, tt.qmpstatus, tt.hasIPv4)
	}
}

func iface(name, mac string, addrs ...string) pve.AgentInterface {
	i := pve.AgentInterface{Name: name, HardwareAddress: mac}
	for _, a := range addrs {
		typ := "ipv4"
		if strings.Contains(a, ":") {
			typ = "ipv6"
		}
		i.IPAddresses = append(i.IPAddresses, pve.AgentIPAddress{Address: a, Type: typ})
	}
	return i
}

func TestReport_ipv4Filters(t *testing.T) {
	tests := []struct {
		name   string
		ifaces []pve.AgentInterface
		want   string
	}{
		{
			name: "agent sample",
			ifaces: []pve.AgentInterface{
				iface("lo", "00:00:00:00:00:00", "127.0.0.1", "::1"),
				iface("eth0", "bc:24:11:2e:c5:4a", "10.0.0.10", "fe80::be24:11ff:fe2e:c54a"),
			},
			want: "10.0.0.10",
		},
		{name: "lo skipped whatever its address", ifaces: []pve.AgentInterface{iface("lo", "", "10.1.1.1"), iface("eth0", "", "10.0.0.10")}, want: "10.0.0.10"},
		{name: "loopback skipped", ifaces: []pve.AgentInterface{iface("eth0", "", "127.0.1.1", "10.0.0.10")}, want: "10.0.0.10"},
		{name: "link-local skipped", ifaces: []pve.AgentInterface{iface("eth0", "", "169.254.3.4", "192.168.1.20")}, want: "192.168.1.20"},
		{name: "unspecified skipped", ifaces: []pve.AgentInterface{iface("eth0", "", "0.0.0.0", "192.168.1.20")}, want: "192.168.1.20"},
		{name: "IPv6 skipped", ifaces: []pve.AgentInterface{iface("eth0", "", "2001:db8::1", "::ffff:10.0.0.1", "192.168.1.20")}, want: "192.168.1.20"},
		{name: "garbage skipped", ifaces: []pve.AgentInterface{iface("eth0", "", "not-an-ip", "192.168.1.20")}, want: "192.168.1.20"},
		{name: "first in order", ifaces: []pve.AgentInterface{iface("eth0", "", "192.168.1.20"), iface("eth1", "", "10.0.0.10")}, want: "192.168.1.20"},
		{name: "before DHCP", ifaces: []pve.AgentInterface{iface("lo", "", "127.0.0.1"), iface("eth0", "", "169.254.3.4", "fe80::1")}, want: ""},
		{name: "no interfaces", ifaces: nil, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Addresses{}.Report(tt.ifaces, "").IPv4)
		})
	}
}

func TestReport_ipv4PrefersNet0MAC(t *testing.T) {
	const net0MAC = "BC:24:11:2E:C5:4A" // as PVE writes it; guests report lower case
	tests := []struct {
		name   string
		ifaces []pve.AgentInterface
		want   string
	}{
		{
			name: "net0 after a container bridge",
			ifaces: []pve.AgentInterface{
				iface("docker0", "02:42:ac:11:00:01", "172.17.0.1"),
				iface("eth0", "bc:24:11:2e:c5:4a", "192.168.1.20"),
			},
			want: "192.168.1.20",
		},
		{
			name: "net0 without an address yet",
			ifaces: []pve.AgentInterface{
				iface("docker0", "02:42:ac:11:00:01", "172.17.0.1"),
				iface("eth0", "bc:24:11:2e:c5:4a", "fe80::1"),
			},
			want: "",
		},
		{
			name: "no interface has the MAC",
			ifaces: []pve.AgentInterface{
				iface("bond0", "02:00:00:00:00:01", "192.168.1.20"),
			},
			want: "192.168.1.20",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Addresses{}.Report(tt.ifaces, net0MAC).IPv4)
		})
	}
}
