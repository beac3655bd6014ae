package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// NIC is one of a proxy VM's network devices, as a machine type lists them: the first is the
// template's net0, whose model and MAC address are kept; each further one is a virtio NIC added
// as net1, net2, ... with a MAC address PVE draws.
type NIC struct {
	// Bridge is the bridge (or SDN vnet) the NIC is on. For net0, empty is proxmox.bridge, or
	// the template's when that is empty too; a further NIC needs one.
	Bridge string `yaml:"bridge,omitempty" json:"bridge,omitempty"`
	// VLAN is the NIC's VLAN tag, 1..4094 as PVE's net[n] tag takes it; 0 adds none (net0
	// keeps the template's).
	VLAN int `yaml:"vlan,omitempty" json:"vlan,omitempty"`
}

// String is the NIC as `pveflow create --nic` takes it: "BRIDGE[:VLAN]", an empty bridge
// keeping net0's.
func (n NIC) String() string {
	if n.VLAN == 0 {
		return n.Bridge
	}
	return fmt.Sprintf("%s:%d", n.Bridge, n.VLAN)
}

// PVE's bounds: net0..net31 (qm.conf's net[n]), and a tag of 1..4094 (net[n]'s tag).
const (
	MaxNICs = 32
	minVLAN = 1
	maxVLAN = 4094
)

func validateNameservers(p *problems, servers []string) {
	for i, s := range servers {
		if a, err := netip.ParseAddr(s); err != nil || a.Zone() != "" {
			p.add(fmt.Sprintf("proxmox.nameservers[%d]", i), "%q is not an IP address", s)
		}
	}
}

func validateNICs(p *problems, path string, nics []NIC) {
	if len(nics) > MaxNICs {
		p.add(path, "%d NICs are more than PVE's %d (net0..net%d)", len(nics), MaxNICs, MaxNICs-1)
	}
	for i, n := range nics {
		at := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case n.Bridge != "" && !bridgeRE.MatchString(n.Bridge):
			p.add(at+".bridge", "%q is not a valid bridge name", n.Bridge)
		case n.Bridge == "" && i > 0:
			p.add(at+".bridge", "is required: net%d is a new NIC and has no bridge of its own", i)
		}
		if n.VLAN != 0 && (n.VLAN < minVLAN || n.VLAN > maxVLAN) {
			p.add(at+".vlan", "%d is outside PVE's VLAN tags %d..%d", n.VLAN, minVLAN, maxVLAN)
		}
	}
}

// ValidateNICs reports, in one line, what is wrong with a request's NICs (as a machine type's
// nics are checked), or nil.
func ValidateNICs(nics []NIC) error {
	var p problems
	validateNICs(&p, "nics", nics)
	if len(p) == 0 {
		return nil
	}
	msgs := make([]string, len(p))
	for i, err := range p {
		msgs[i] = err.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}
