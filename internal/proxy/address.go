package proxy

// Addresses are a proxy's static addresses on its first NIC (net0), each written as
// "address/prefix-length" with its family's gateway. A family left empty is configured the
// default way: IPv4 by DHCP, IPv6 not at all. They are written into the seed's NoCloud
// network-config, and a create waits until the guest reports each one given.
type Addresses struct {
	IPv4     string `json:"ipv4,omitempty"`
	Gateway4 string `json:"gateway4,omitempty"`
	IPv6     string `json:"ipv6,omitempty"`
	Gateway6 string `json:"gateway6,omitempty"`
}

// IsZero reports whether no static address is given: net0 takes DHCP's IPv4.
func (a Addresses) IsZero() bool { return a == Addresses{} }
