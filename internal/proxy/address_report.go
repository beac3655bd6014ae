package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/pveflow/pveflow/internal/pve"
)

// Reported is what the guest agent reports on net0: the IPv4 and IPv6 to reach the proxy at,
// and every routable address of net0 as "address/prefix-length".
type Reported struct {
	IPv4      string   `json:"ipv4,omitempty"`
	IPv6      string   `json:"ipv6,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
}

// Report reads net0's addresses from the guest agent's interfaces (net0Addresses). A static
// address of a is the one reported for its family; otherwise the first routable one is: DHCP's
// IPv4, an IPv6 the guest took from router advertisements.
func (a Addresses) Report(ifaces []pve.AgentInterface, mac string) Reported {
	var r Reported
	for _, ip := range net0Addresses(ifaces, mac) {
		r.Addresses = append(r.Addresses, ip.String())
		switch {
		case ip.Addr().Is4() && r.IPv4 == "":
			r.IPv4 = ip.Addr().String()
		case ip.Addr().Is6() && r.IPv6 == "":
			r.IPv6 = ip.Addr().String()
		}
	}
	if p, err := netip.ParsePrefix(a.IPv4); err == nil && slices.Contains(r.Addresses, p.String()) {
		r.IPv4 = p.Addr().String()
	}
	if p, err := netip.ParsePrefix(a.IPv6); err == nil && slices.Contains(r.Addresses, p.String()) {
		r.IPv6 = p.Addr().String()
	}
	return r
}

// Missing says what of a the guest agent does not report on net0 yet, one entry a family:
// a static address exactly (address and prefix length), and for DHCP a routable IPv4. Empty when
// the guest has every address its network-config gives.
func (a Addresses) Missing(ifaces []pve.AgentInterface, mac string) []string {
	have := net0Addresses(ifaces, mac)
	var missing []string
	for _, static := range []string{a.IPv4, a.IPv6} {
		if p, err := netip.ParsePrefix(static); err == nil && !slices.Contains(have, p) {
			missing = append(missing, "static address "+p.String())
		}
	}
	if a.DHCP4() && !slices.ContainsFunc(have, func(p netip.Prefix) bool { return p.Addr().Is4() }) {
		missing = append(missing, "a routable IPv4 from DHCP")
	}
	return missing
}

// net0Addresses are the routable addresses (not loopback, link-local, multicast or
// unspecified) of net0, in the agent's order. net0 is the interfaces with mac, net0's MAC
// address, so that an address of a container bridge inside the guest is never taken for the
// VM's; the MAC is compared case-insensitively, as PVE writes it in upper case and guests in
// lower. Without mac, or while no interface has it, it is every interface but lo.
func net0Addresses(ifaces []pve.AgentInterface, mac string) []netip.Prefix {
	isNet0 := func(i pve.AgentInterface) bool { return mac != "" && strings.EqualFold(i.HardwareAddress, mac) }
	onlyNet0 := slices.ContainsFunc(ifaces, isNet0)
	var out []netip.Prefix
	for _, iface := range ifaces {
		if iface.Name == "lo" || (onlyNet0 && !isNet0(iface)) {
			continue
		}
		for _, a := range iface.IPAddresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || !ip.IsGlobalUnicast() {
				continue
			}
			if p := netip.PrefixFrom(ip, a.Prefix); p.IsValid() {
				out = append(out, p)
			}
		}
	}
	return out
}

// String is a in the form the CLI takes it: "ipv4 ADDR/LEN via GW, ipv6 ...", or "dhcp".
func (a Addresses) String() string {
	var parts []string
	add := func(family, addr, gw string) {
		if addr != "" {
			parts = append(parts, strings.TrimSuffix(fmt.Sprintf("%s %s via %s", family, addr, gw), " via "))
		}
	}
	add("ipv4", a.IPv4, a.Gateway4)
	add("ipv6", a.IPv6, a.Gateway6)
	switch {
	case a.NoIPv4:
		parts = append(parts, "no ipv4")
	case a.IPv4 == "":
		parts = append(parts, "ipv4 by dhcp")
	}
	return strings.Join(parts, ", ")
}
