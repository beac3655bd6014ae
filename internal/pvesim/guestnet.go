package pvesim

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pveflow/pveflow/internal/pve"
)

// guestNetwork is the network a guest's cloud-init configured from a NoCloud network-config
// (version 2): its ethernets, each matched by MAC. A nil *guestNetwork is cloud-init's fallback,
// DHCP on the first NIC.
type guestNetwork struct {
	ethernets []guestEthernet
}

// guestEthernet is one entry of network-config's ethernets.
type guestEthernet struct {
	mac     string // lower case
	setName string
	dhcp4   bool
	// optional is netplan's optional: systemd-networkd-wait-online does not wait for the NIC.
	optional  bool
	addresses []netip.Prefix
}

// parseNetworkConfig reads a version 2 network-config, with or without the "network:" key
// around it. Anything else (no file, version 1, YAML it cannot read) is the fallback, as
// cloud-init falls back when it cannot use what it was given.
func parseNetworkConfig(text string) *guestNetwork {
	type ethernet struct {
		Match struct {
			MACAddress string `yaml:"macaddress"`
		} `yaml:"match"`
		SetName   string   `yaml:"set-name"`
		DHCP4     bool     `yaml:"dhcp4"`
		Optional  bool     `yaml:"optional"`
		Addresses []string `yaml:"addresses"`
	}
	type v2 struct {
		Version   int                 `yaml:"version"`
		Ethernets map[string]ethernet `yaml:"ethernets"`
	}
	var doc struct {
		v2      `yaml:",inline"`
		Network *v2 `yaml:"network"`
	}
	if text == "" || yaml.Unmarshal([]byte(text), &doc) != nil {
		return nil
	}
	cfg := doc.v2
	if doc.Network != nil {
		cfg = *doc.Network
	}
	if cfg.Version != 2 {
		return nil
	}
	n := &guestNetwork{}
	for _, e := range cfg.Ethernets {
		ge := guestEthernet{mac: strings.ToLower(e.Match.MACAddress), setName: e.SetName, dhcp4: e.DHCP4, optional: e.Optional}
		for _, a := range e.Addresses {
			if p, err := netip.ParsePrefix(a); err == nil {
				ge.addresses = append(ge.addresses, p)
			}
		}
		n.ethernets = append(n.ethernets, ge)
	}
	return n
}

// ethernet is the network-config entry of the NIC with mac, if any.
func (n *guestNetwork) ethernet(mac string) (guestEthernet, bool) {
	if n == nil {
		return guestEthernet{}, false
	}
	for _, e := range n.ethernets {
		if e.mac != "" && e.mac == strings.ToLower(mac) {
			return e, true
		}
	}
	return guestEthernet{}, false
}

// configured is what cloud-init configured for nic, and whether it configured it at all: its
// entry of network-config, or, under the fallback, DHCP on net0 (generate_fallback_config in
// cloudinit/net/__init__.py, which marks nothing optional).
func (n *guestNetwork) configured(nic guestNIC) (guestEthernet, bool) {
	if n == nil {
		return guestEthernet{mac: nic.mac.String(), dhcp4: true}, nic.index == 0
	}
	return n.ethernet(nic.mac.String())
}

// waitOnline is how long systemd-networkd-wait-online holds the boot of g: its timeout when a
// NIC it waits for, one cloud-init configured and did not mark optional, asks DHCP on a network
// without a DHCP server (netplan's gen-networkd.c waits for such a NIC to be routable, and a
// static address alone makes it so); no time otherwise. After the timeout wait-online fails
// and the boot goes on.
func (c *Cluster) waitOnline(g *vm) time.Duration {
	for _, nic := range guestNICs(g.cfg) {
		if e, ok := g.guest.network.configured(nic); ok && !e.optional && e.dhcp4 && c.noDHCP[nic.network] {
			return c.waitOnlineTimeout
		}
	}
	return 0
}

// nicInterface is the interface the guest has for nic: named ens<18+index> (its PCI slot)
// unless network-config renames it; with an IPv4 link-local and a 10.x or 172.x address from
// DHCP (derived from the VMID and the index) when DHCP is on, which the fallback turns on for
// net0 alone, and a DHCP server answers on the NIC's network; its network-config's static
// addresses; and an IPv6 link-local.
func (g *vm) nicInterface(nic guestNIC, dhcpServer bool) pve.AgentInterface {
	index, hw := nic.index, nic.mac
	iface := pve.AgentInterface{Name: fmt.Sprint("ens", 18+index), HardwareAddress: hw.String()}
	e, configured := g.guest.network.configured(nic)
	if configured && e.setName != "" {
		iface.Name = e.setName
	}
	host := g.id%250 + 2
	net24 := g.id / 250
	if configured && e.dhcp4 && dhcpServer {
		routable := fmt.Sprintf("10.%d.%d.%d", net24/256%256, net24%256, host)
		if index > 0 {
			routable = fmt.Sprintf("172.%d.%d.%d", 16+index%16, net24%256, host)
		}
		iface.IPAddresses = append(iface.IPAddresses,
			pve.AgentIPAddress{Address: fmt.Sprintf("169.254.%d.%d", net24%254+1, host), Type: "ipv4", Prefix: 16},
			pve.AgentIPAddress{Address: routable, Type: "ipv4", Prefix: 24})
	}
	for _, p := range e.addresses {
		typ := "ipv4"
		if p.Addr().Is6() {
			typ = "ipv6"
		}
		iface.IPAddresses = append(iface.IPAddresses, pve.AgentIPAddress{Address: p.Addr().String(), Type: typ, Prefix: p.Bits()})
	}
	iface.IPAddresses = append(iface.IPAddresses, pve.AgentIPAddress{Address: linkLocal6(hw), Type: "ipv6", Prefix: 64})
	return iface
}

// guestNIC is one of a VM's NICs: net<index>, with its MAC, on its network.
type guestNIC struct {
	index   int
	mac     net.HardwareAddr
	network Network
}

// guestNICs are the VM's NICs that have a MAC, in index order.
func guestNICs(cfg pve.VMConfig) []guestNIC {
	var out []guestNIC
	for i := range 32 {
		value := cfg[fmt.Sprint("net", i)]
		_, mac := parseNet(value)
		if hw, err := net.ParseMAC(mac); err == nil {
			out = append(out, guestNIC{i, hw, netNetwork(value)})
		}
	}
	return out
}
