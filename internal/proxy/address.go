package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Addresses are a proxy's static addresses on its first NIC (net0), each written as
// "address/prefix-length" with its family's gateway. A family left empty is configured the
// default way: IPv4 by DHCP (unless NoIPv4), IPv6 not at all. They are written into the seed's
// NoCloud network-config, and a create waits until the guest reports each one given.
type Addresses struct {
	IPv4     string `json:"ipv4,omitempty"`
	Gateway4 string `json:"gateway4,omitempty"`
	IPv6     string `json:"ipv6,omitempty"`
	Gateway6 string `json:"gateway6,omitempty"`
	// NoIPv4 turns DHCP off on net0 without a static IPv4: an IPv6-only proxy. It needs IPv6.
	NoIPv4 bool `json:"noIPv4,omitempty"`
}

// IsZero reports whether no static address is given: net0 takes DHCP's IPv4.
func (a Addresses) IsZero() bool { return a == Addresses{} }

// DHCP4 reports whether net0 takes its IPv4 from DHCP: no static IPv4 and not IPv6-only.
func (a Addresses) DHCP4() bool { return a.IPv4 == "" && !a.NoIPv4 }

// Validate reports why a cannot be written into a guest's network-config, or nil. Each address
// is a unicast host address of its family with its prefix length, not the network address (nor
// the broadcast address) of an IPv4 prefix shorter than /31; a gateway is of its address's family
// and inside its prefix (an IPv6 gateway may also be link-local, as routers advertise theirs),
// and is given only with its address.
func (a Addresses) Validate() error {
	var errs []error
	if a.IPv4 != "" {
		if err := validateAddress(a.IPv4, a.Gateway4, 4); err != nil {
			errs = append(errs, fmt.Errorf("ipv4: %w", err))
		}
	} else if a.Gateway4 != "" {
		errs = append(errs, fmt.Errorf("gateway4 %s is given without an ipv4 address", a.Gateway4))
	}
	if a.IPv6 != "" {
		if err := validateAddress(a.IPv6, a.Gateway6, 6); err != nil {
			errs = append(errs, fmt.Errorf("ipv6: %w", err))
		}
	} else if a.Gateway6 != "" {
		errs = append(errs, fmt.Errorf("gateway6 %s is given without an ipv6 address", a.Gateway6))
	}
	switch {
	case a.NoIPv4 && a.IPv4 != "":
		errs = append(errs, errors.New("no-ipv4 excludes a static ipv4 address"))
	case a.NoIPv4 && a.IPv6 == "":
		errs = append(errs, errors.New("no-ipv4 needs an ipv6 address: the proxy would have none"))
	}
	if len(errs) == 0 {
		return nil
	}
	// One line, as a CLI prints it.
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// validateAddress checks one family's "address/prefix-length" and its gateway, if any.
func validateAddress(addr, gateway string, family int) error {
	p, err := netip.ParsePrefix(addr)
	if err != nil {
		return fmt.Errorf("%q is not an address/prefix-length: %w", addr, err)
	}
	ip := p.Addr()
	if !isFamily(ip, family) {
		return fmt.Errorf("%s is not an IPv%d address", addr, family)
	}
	if p.Bits() == 0 {
		return fmt.Errorf("%s: a prefix length of 0 leaves no network", addr)
	}
	if !ip.IsGlobalUnicast() {
		return fmt.Errorf("%s is not a unicast host address (loopback, link-local, multicast or unspecified)", addr)
	}
	if family == 4 && p.Bits() < 31 {
		switch ip {
		case p.Masked().Addr():
			return fmt.Errorf("%s is the network address of %s, not a host address", ip, p.Masked())
		case lastAddr(p):
			return fmt.Errorf("%s is the broadcast address of %s, not a host address", ip, p.Masked())
		}
	}
	if gateway == "" {
		return nil
	}
	gw, err := netip.ParseAddr(gateway)
	switch {
	case err != nil:
		return fmt.Errorf("gateway %q is not an address: %w", gateway, err)
	case !isFamily(gw, family):
		return fmt.Errorf("gateway %s is not an IPv%d address", gateway, family)
	case gw == ip:
		return fmt.Errorf("gateway %s is the address itself", gateway)
	case family == 6 && gw.IsLinkLocalUnicast() && gw.Zone() == "":
		return nil
	case !p.Masked().Contains(gw):
		return fmt.Errorf("gateway %s is outside %s", gateway, p.Masked())
	}
	return nil
}

// isFamily reports whether ip is of IP version family (4 or 6); an IPv4-mapped IPv6 address is
// neither, and a zone (fe80::1%eth0) is not an address a seed can carry.
func isFamily(ip netip.Addr, family int) bool {
	if ip.Zone() != "" || ip.Is4In6() {
		return false
	}
	return family == 4 && ip.Is4() || family == 6 && ip.Is6()
}

// lastAddr is the highest address of prefix p: an IPv4 prefix's broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(b)
	return last
}
