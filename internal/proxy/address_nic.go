package proxy

import (
	"fmt"
	"strings"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/pve"
)

// NICValues are the net[n] values a create writes for the machine type's nics into a VM whose
// config is cfg, keyed "net0", "net1", ...: only those that differ from cfg's. net0 is the
// template's, its model, MAC and other options kept, on nics[0]'s bridge (else bridge, else its
// own) and VLAN tag; each further NIC is cfg's own when it has one (its MAC kept), else a new
// virtio NIC for PVE to give a MAC. No nics is net0 on bridge, as before machine types had NICs.
func NICValues(cfg pve.VMConfig, bridge string, nics []config.NIC) pve.VMConfig {
	if len(nics) == 0 {
		nics = []config.NIC{{}}
	}
	out := pve.VMConfig{}
	for i, n := range nics {
		key := fmt.Sprint("net", i)
		cur, ok := cfg[key]
		if !ok {
			cur = "virtio"
		}
		b := n.Bridge
		if i == 0 && b == "" {
			b = bridge
		}
		if v := withVLAN(RewriteNet0(cur, b), n.VLAN); v != cfg[key] {
			out[key] = v
		}
	}
	return out
}

// withVLAN is a NIC's value with its VLAN tag set to vlan; 0 keeps its own.
func withVLAN(net string, vlan int) string {
	if vlan == 0 {
		return net
	}
	parts := strings.Split(net, ",")
	for i, part := range parts {
		if key, _, _ := strings.Cut(part, "="); key == "tag" {
			parts[i] = fmt.Sprint("tag=", vlan)
			return strings.Join(parts, ",")
		}
	}
	return strings.Join(append(parts, fmt.Sprint("tag=", vlan)), ",")
}

// SeedNetwork is the guest's network for the seed's network-config, its NICs found by the MACs
// of cfg (the VM's config once its NICs are written): net0 with a's addresses, and DHCP's IPv4
// unless a has a static one or none, and the nameservers; each further NIC of nics with DHCP's
// IPv4. It is nil, and the seed has no network-config, for DHCP on net0 alone: cloud-init's
// fallback does that, and DHCP gives the nameservers.
func SeedNetwork(cfg pve.VMConfig, a Addresses, nics []config.NIC, nameservers []string) []nocloud.Ethernet {
	if a.IsZero() && len(nics) <= 1 {
		return nil
	}
	net0 := nocloud.Ethernet{Name: "net0", MAC: MACFromNet(cfg["net0"]), DHCP4: a.DHCP4(), Gateway4: a.Gateway4, Gateway6: a.Gateway6,
		Nameservers: nameservers}
	for _, addr := range []string{a.IPv4, a.IPv6} {
		if addr != "" {
			net0.Addresses = append(net0.Addresses, addr)
		}
	}
	out := []nocloud.Ethernet{net0}
	for i := 1; i < len(nics); i++ {
		key := fmt.Sprint("net", i)
		out = append(out, nocloud.Ethernet{Name: key, MAC: MACFromNet(cfg[key]), DHCP4: true})
	}
	return out
}
