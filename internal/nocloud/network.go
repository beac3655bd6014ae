package nocloud

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// ErrInvalidNetwork is a network-config that Write refuses before writing anything.
var ErrInvalidNetwork = errors.New("nocloud: invalid network-config")

// Ethernet is one NIC of the guest in the seed's network-config (version 2): the guest finds it
// by its MAC and names it Name.
type Ethernet struct {
	// Name is the NIC's key in network-config and the name the guest gives it (set-name), such
	// as "net0": outside the kernel's ethN names, which a rename could collide with.
	Name string `json:"name"`
	// MAC is the NIC's MAC address, as PVE's config gives it.
	MAC string `json:"mac"`
	// DHCP4 takes an IPv4 address from DHCP.
	DHCP4 bool `json:"dhcp4,omitempty"`
	// Optional is netplan's optional: the boot does not wait for the NIC. systemd-networkd-wait-
	// online, which the guest's network-online.target and so cloud-init's final stage wait
	// for, waits for every other NIC to be configured, DHCP's lease included, for up to its
	// timeout (120 s).
	Optional bool `json:"optional,omitempty"`
	// Addresses are static addresses, "address/prefix-length", IPv4 or IPv6.
	Addresses []string `json:"addresses,omitempty"`
	// Gateway4 and Gateway6 are the default routes of each family; empty adds none.
	Gateway4 string `json:"gateway4,omitempty"`
	Gateway6 string `json:"gateway6,omitempty"`
	// Nameservers are DNS resolvers' addresses.
	Nameservers []string `json:"nameservers,omitempty"`
}

var (
	ifNameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,14}$`)
	macRE    = regexp.MustCompile(`^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$`)
)

// NetworkConfig is the NoCloud network-config file (version 2) for ethernets, in their order.
// Each is matched by MAC and renamed; the default routes are written as routes to "default",
// since netplan deprecates gateway4 and gateway6. A NIC with a static IPv6 address takes no
// other: DHCPv6 and router advertisements are off, so the guest has exactly the addresses given.
// An optional NIC is written "optional: true", any other without the key (netplan's default,
// false). Every value is checked before it is written, so the file is YAML whatever the input.
func NetworkConfig(ethernets []Ethernet) (string, error) {
	var b strings.Builder
	b.WriteString("version: 2\nethernets:\n")
	for _, e := range ethernets {
		if err := e.check(); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "  %s:\n    match:\n      macaddress: %q\n    set-name: %s\n    dhcp4: %t\n",
			e.Name, strings.ToLower(e.MAC), e.Name, e.DHCP4)
		if e.Optional {
			b.WriteString("    optional: true\n")
		}
		static6 := false
		if len(e.Addresses) > 0 {
			b.WriteString("    addresses:\n")
			for _, a := range e.Addresses {
				p := netip.MustParsePrefix(a)
				static6 = static6 || p.Addr().Is6()
				fmt.Fprintf(&b, "      - %q\n", p.String())
			}
		}
		if e.Gateway4 != "" || e.Gateway6 != "" {
			b.WriteString("    routes:\n")
			for _, gw := range []string{e.Gateway4, e.Gateway6} {
				if gw != "" {
					fmt.Fprintf(&b, "      - to: default\n        via: %q\n", netip.MustParseAddr(gw).String())
				}
			}
		}
		if len(e.Nameservers) > 0 {
			b.WriteString("    nameservers:\n      addresses:\n")
			for _, ns := range e.Nameservers {
				fmt.Fprintf(&b, "        - %q\n", netip.MustParseAddr(ns).String())
			}
		}
		if static6 {
			b.WriteString("    dhcp6: false\n    accept-ra: false\n")
		}
	}
	return b.String(), nil
}

// check refuses an Ethernet whose values could not be written as they are.
func (e Ethernet) check() error {
	switch {
	case !ifNameRE.MatchString(e.Name):
		return fmt.Errorf("%w: NIC name %q is not a short lower-case interface name", ErrInvalidNetwork, e.Name)
	case !macRE.MatchString(e.MAC):
		return fmt.Errorf("%w: %s: MAC %q is not a MAC address", ErrInvalidNetwork, e.Name, e.MAC)
	}
	for _, a := range e.Addresses {
		if _, err := netip.ParsePrefix(a); err != nil {
			return fmt.Errorf("%w: %s: address %q: %v", ErrInvalidNetwork, e.Name, a, err)
		}
	}
	for _, gw := range []string{e.Gateway4, e.Gateway6} {
		if _, err := netip.ParseAddr(gw); gw != "" && err != nil {
			return fmt.Errorf("%w: %s: gateway %q: %v", ErrInvalidNetwork, e.Name, gw, err)
		}
	}
	for _, ns := range e.Nameservers {
		if _, err := netip.ParseAddr(ns); err != nil {
			return fmt.Errorf("%w: %s: nameserver %q: %v", ErrInvalidNetwork, e.Name, ns, err)
		}
	}
	return nil
}
