package config

import (
	"fmt"
	"maps"
	"math/big"
	"net/netip"
	"regexp"
	"slices"
)

// AddressPool is a range of static addresses that proxies are given from, one per proxy,
// allocated per UID and freed when the proxy is deleted: an IPv4 range, an IPv6 range, or both.
// A pool with both gives a proxy one address of each, the ones at the same place in their
// ranges, so the two ranges are of the same size.
type AddressPool struct {
	IPv4 *AddressRange `yaml:"ipv4,omitempty" json:"ipv4,omitempty"`
	IPv6 *AddressRange `yaml:"ipv6,omitempty" json:"ipv6,omitempty"`
}

// AddressRange is a run of addresses, first to last inclusive, in one subnet.
type AddressRange struct {
	// Subnet is the network the addresses are on, as address/prefix-length, such as
	// 192.0.2.0/24: the prefix length is the one the guest configures.
	Subnet string `yaml:"subnet" json:"subnet"`
	First  string `yaml:"first" json:"first"`
	Last   string `yaml:"last" json:"last"`
	// Gateway is the family's default route, in Subnet and outside First..Last; empty sets none.
	Gateway string `yaml:"gateway,omitempty" json:"gateway,omitempty"`
}

// MaxAddressPoolSize is the most addresses a pool gives. A pool's allocations are the state
// of its AddressPool workflow, carried whole from one run to the next, so they must fit well
// within Temporal's payload limits (512 KB warned, 2 MB refused): 2048 allocations of about
// 130 bytes each are some 270 KB. Configure more pools for more proxies.
const MaxAddressPoolSize = 2048

// addressPoolNameRE is a pool's name: it is part of its workflow's ID and of a request.
var addressPoolNameRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,62}[a-zA-Z0-9])?$`)

// Size is how many proxies the pool gives addresses to; 0 for a pool that is not valid.
func (p AddressPool) Size() int {
	var sizes []int
	for _, r := range p.ranges() {
		pr, err := r.parse()
		if err != nil {
			return 0
		}
		sizes = append(sizes, pr.size())
	}
	if len(sizes) == 0 {
		return 0
	}
	return slices.Min(sizes)
}

// At is the address, as address/prefix-length, each family of the pool gives at index i, in
// 0..Size()-1; a family the pool does not have is empty.
func (p AddressPool) At(i int) (ipv4, ipv6 string) {
	at := func(r *AddressRange) string {
		if r == nil {
			return ""
		}
		pr, err := r.parse()
		if err != nil || i < 0 || i >= pr.size() {
			return ""
		}
		return netip.PrefixFrom(addrAdd(pr.first, i), pr.subnet.Bits()).String()
	}
	return at(p.IPv4), at(p.IPv6)
}

// IndexOf is the index at which the pool gives addr, an address or address/prefix-length, as
// At counts: its place in the range of its family; -1 when that range does not hold it.
func (p AddressPool) IndexOf(addr string) int {
	a, ok := hostOf(addr)
	if !ok {
		return -1
	}
	for _, r := range p.ranges() {
		if pr, err := r.parse(); err == nil && pr.holds(a) {
			n := new(big.Int).Sub(new(big.Int).SetBytes(a.AsSlice()), new(big.Int).SetBytes(pr.first.AsSlice()))
			return int(n.Int64()) // within a range, which validation caps at MaxAddressPoolSize
		}
	}
	return -1
}

// Gateways are the pool's gateways, empty for a family it does not have or sets none for.
func (p AddressPool) Gateways() (gateway4, gateway6 string) {
	if p.IPv4 != nil {
		gateway4 = p.IPv4.Gateway
	}
	if p.IPv6 != nil {
		gateway6 = p.IPv6.Gateway
	}
	return gateway4, gateway6
}

func (p AddressPool) ranges() []*AddressRange {
	var rs []*AddressRange
	for _, r := range []*AddressRange{p.IPv4, p.IPv6} {
		if r != nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// parsedRange is an AddressRange read.
type parsedRange struct {
	subnet      netip.Prefix
	first, last netip.Addr
	gateway     netip.Addr // invalid when none is set
}

func (r AddressRange) parse() (parsedRange, error) {
	var pr parsedRange
	var err error
	if pr.subnet, err = netip.ParsePrefix(r.Subnet); err != nil {
		return pr, fmt.Errorf("subnet %q is not address/prefix-length", r.Subnet)
	}
	if pr.subnet != pr.subnet.Masked() {
		return pr, fmt.Errorf("subnet %q has host bits set: want %s", r.Subnet, pr.subnet.Masked())
	}
	if pr.first, err = netip.ParseAddr(r.First); err != nil {
		return pr, fmt.Errorf("first %q is not an address", r.First)
	}
	if pr.last, err = netip.ParseAddr(r.Last); err != nil {
		return pr, fmt.Errorf("last %q is not an address", r.Last)
	}
	if r.Gateway != "" {
		if pr.gateway, err = netip.ParseAddr(r.Gateway); err != nil {
			return pr, fmt.Errorf("gateway %q is not an address", r.Gateway)
		}
	}
	return pr, nil
}

// size is how many addresses first..last holds, capped just above MaxAddressPoolSize.
func (pr parsedRange) size() int {
	n := new(big.Int).Sub(new(big.Int).SetBytes(pr.last.AsSlice()), new(big.Int).SetBytes(pr.first.AsSlice()))
	n.Add(n, big.NewInt(1))
	if n.Sign() <= 0 {
		return 0
	}
	if !n.IsInt64() || n.Int64() > MaxAddressPoolSize {
		return MaxAddressPoolSize + 1
	}
	return int(n.Int64())
}

func (pr parsedRange) holds(a netip.Addr) bool {
	return a.IsValid() && pr.first.Compare(a) <= 0 && a.Compare(pr.last) <= 0
}

// addrAdd is a plus n: n steps of Next, without wrapping past the last address of the family
// (callers stay within a subnet).
func addrAdd(a netip.Addr, n int) netip.Addr {
	b := a.As16()
	carry := uint(n)
	for i := 15; i >= 0 && carry > 0; i-- {
		sum := uint(b[i]) + carry
		b[i], carry = byte(sum), sum>>8
	}
	out := netip.AddrFrom16(b)
	if a.Is4() {
		return out.Unmap()
	}
	return out
}

func validateAddressPools(p *problems, pools map[string]AddressPool) {
	names := slices.Sorted(maps.Keys(pools))
	type taken struct {
		pool string
		pr   parsedRange
	}
	var seen []taken
	for _, name := range names {
		path := "proxmox.addressPools." + name
		if !addressPoolNameRE.MatchString(name) {
			p.add(path, "%q is not a valid pool name: want 1 to 64 letters, digits, '_', '.' and '-', starting and ending with a letter or digit", name)
		}
		pool := pools[name]
		if pool.IPv4 == nil && pool.IPv6 == nil {
			p.add(path, "gives no address: set ipv4, ipv6 or both")
			continue
		}
		var sizes []int
		for _, f := range []struct {
			family string
			r      *AddressRange
			is4    bool
		}{{"ipv4", pool.IPv4, true}, {"ipv6", pool.IPv6, false}} {
			if f.r == nil {
				continue
			}
			pr, ok := validateAddressRange(p, path+"."+f.family, *f.r, f.is4)
			if !ok {
				continue
			}
			for _, t := range seen {
				if t.pr.first.Is4() == pr.first.Is4() && pr.first.Compare(t.pr.last) <= 0 && t.pr.first.Compare(pr.last) <= 0 {
					p.add(path+"."+f.family, "%s..%s overlaps pool %s's %s..%s: two proxies would get one address", pr.first, pr.last, t.pool, t.pr.first, t.pr.last)
				}
			}
			seen = append(seen, taken{name, pr})
			sizes = append(sizes, pr.size())
		}
		if len(sizes) == 2 && sizes[0] != sizes[1] {
			p.add(path, "ipv4 holds %d addresses and ipv6 %d: a pool gives a proxy one of each, so they must hold as many", sizes[0], sizes[1])
		}
	}
}

// validateAddressRange checks one family's range and reports whether it could be read.
func validateAddressRange(p *problems, path string, r AddressRange, is4 bool) (parsedRange, bool) {
	pr, err := r.parse()
	if err != nil {
		p.add(path, "%v", err)
		return pr, false
	}
	family := map[bool]string{true: "IPv4", false: "IPv6"}[is4]
	for _, a := range []struct {
		field string
		addr  netip.Addr
	}{{"subnet", pr.subnet.Addr()}, {"first", pr.first}, {"last", pr.last}, {"gateway", pr.gateway}} {
		if a.addr.IsValid() && (a.addr.Is4() != is4 || a.addr.Is4In6()) {
			p.add(path, "%s %s is not an %s address", a.field, a.addr, family)
			return pr, false
		}
	}
	ok := true
	for _, a := range []struct {
		field string
		addr  netip.Addr
	}{{"first", pr.first}, {"last", pr.last}, {"gateway", pr.gateway}} {
		if a.addr.IsValid() && !pr.subnet.Contains(a.addr) {
			p.add(path, "%s %s is outside subnet %s", a.field, a.addr, pr.subnet)
			ok = false
		}
	}
	if !ok {
		return pr, false
	}
	switch size := pr.size(); {
	case pr.last.Less(pr.first):
		p.add(path, "last %s comes before first %s", pr.last, pr.first)
		return pr, false
	case size > MaxAddressPoolSize:
		p.add(path, "%s..%s holds more than %d addresses, the most a pool gives (config.MaxAddressPoolSize); configure more pools", pr.first, pr.last, MaxAddressPoolSize)
		return pr, false
	}
	if pr.holds(pr.gateway) {
		p.add(path, "gateway %s is inside the range %s..%s, which gives it to a proxy", pr.gateway, pr.first, pr.last)
		ok = false
	}
	if is4 && pr.subnet.Bits() < 31 {
		// The network and broadcast addresses of a subnet are no host's.
		network := pr.subnet.Addr()
		broadcast := addrAdd(network, 1<<(32-pr.subnet.Bits())-1)
		for _, a := range []netip.Addr{network, broadcast} {
			if pr.holds(a) {
				p.add(path, "%s..%s holds %s, the %s address of subnet %s", pr.first, pr.last, a, map[bool]string{true: "network", false: "broadcast"}[a == network], pr.subnet)
				ok = false
			}
		}
	}
	return pr, ok
}

// AddressPoolHolding is the name of the configured pool whose range holds addr, an address or
// address/prefix-length, or empty when none does or addr is neither.
func (c Proxmox) AddressPoolHolding(addr string) string {
	a, ok := hostOf(addr)
	if !ok {
		return ""
	}
	for _, name := range c.AddressPoolNames() {
		for _, r := range c.AddressPools[name].ranges() {
			if pr, err := r.parse(); err == nil && pr.holds(a) {
				return name
			}
		}
	}
	return ""
}

// AddressPoolNames are the configured pools' names, sorted.
func (c Proxmox) AddressPoolNames() []string {
	return slices.Sorted(maps.Keys(c.AddressPools)) //workflowcheck:ignore
}

// hostOf is the address of addr, an address or address/prefix-length.
func hostOf(addr string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(addr); err == nil {
		return a, true
	}
	p, err := netip.ParsePrefix(addr)
	return p.Addr(), err == nil
}
