package proxy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/pve"
)

// NICValues are the net[n] values a create writes for the machine type's nics into a VM whose
// config is cfg, keyed "net0", "net1", ...: only those that differ from cfg's. net0 is the
// template's, its model, MAC and other options kept, on nics[0]'s bridge (else bridge, else its
// own) and VLAN tag (0 keeps its own); each further NIC is cfg's own when it has one (its MAC
// kept), else a new virtio NIC for PVE to give a MAC, on its bridge with its VLAN tag (0: none).
// No nics is net0 on bridge, as before machine types had NICs.
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
		v := RewriteNet0(cur, b)
		// net0's VLAN 0 is the template's tag, a further NIC's none.
		if n.VLAN != 0 || i > 0 {
			v = withVLAN(v, n.VLAN)
		}
		if v != cfg[key] {
			out[key] = v
		}
	}
	return out
}

// withVLAN is a NIC's value with its VLAN tag set to vlan; 0 removes it.
func withVLAN(net string, vlan int) string {
	parts := strings.Split(net, ",")
	for i, part := range parts {
		if key, _, _ := strings.Cut(part, "="); key == "tag" {
			if vlan == 0 {
				return strings.Join(slices.Delete(parts, i, i+1), ",")
			}
			parts[i] = fmt.Sprint("tag=", vlan)
			return strings.Join(parts, ",")
		}
	}
	if vlan == 0 {
		return net
	}
	return strings.Join(append(parts, fmt.Sprint("tag=", vlan)), ",")
}

// A NICChange is one NIC a VM is to gain, lose or have otherwise to have its spec's NICs.
type NICChange struct {
	// Key is the NIC's config key, "net0".."net31".
	Key string
	// Have is the VM's value, empty for a NIC it lacks; Want the value to write, empty for a NIC
	// it is to lose.
	Have, Want string
}

// Added reports whether the NIC is new to the VM: PVE gives it a MAC only when it is written.
func (c NICChange) Added() bool { return c.Have == "" }

// Removed reports whether the VM is to lose the NIC.
func (c NICChange) Removed() bool { return c.Want == "" }

// String says how the VM drifted from its spec: "net1 missing, spec (vmbr1, tag 20)", "net1
// (vmbr1, tag 20), spec (vmbr2)", "net2 (vmbr1), spec none".
func (c NICChange) String() string {
	switch {
	case c.Added():
		return fmt.Sprintf("%s missing, spec (%s)", c.Key, nicSummary(c.Want))
	case c.Removed():
		return fmt.Sprintf("%s (%s), spec none", c.Key, nicSummary(c.Have))
	}
	return fmt.Sprintf("%s (%s), spec (%s)", c.Key, nicSummary(c.Have), nicSummary(c.Want))
}

// Change says what making the change changes: "net1 added (vmbr1, tag 20)", "net1 (vmbr1, tag
// 20) -> (vmbr2)", "net2 removed (vmbr1)".
func (c NICChange) Change() string {
	switch {
	case c.Added():
		return fmt.Sprintf("%s added (%s)", c.Key, nicSummary(c.Want))
	case c.Removed():
		return fmt.Sprintf("%s removed (%s)", c.Key, nicSummary(c.Have))
	}
	return fmt.Sprintf("%s (%s) -> (%s)", c.Key, nicSummary(c.Have), nicSummary(c.Want))
}

// nicSummary is what a NIC's value says of the network it is on: "vmbr1, tag 20", "vmbr0".
func nicSummary(net string) string {
	s, ok := option(net, "bridge")
	if !ok {
		s = "no bridge"
	}
	if tag, ok := option(net, "tag"); ok {
		s += ", tag " + tag
	}
	return s
}

// NICChanges are the changes that give a VM whose config is cfg the NICs nics, net0 on bridge
// (NICValues), in key order: NICValues's values, and the VM's NICs beyond nics (beyond net0 for
// none) to remove. The spec's NICs are all the VM's: a NIC left over from an earlier machine
// type, or one added by hand, would put the proxy on a network its spec does not name.
func NICChanges(cfg pve.VMConfig, bridge string, nics []config.NIC) []NICChange {
	want := NICValues(cfg, bridge, nics)
	var out []NICChange
	for i := range config.MaxNICs {
		key := fmt.Sprint("net", i)
		have, has := cfg[key]
		switch v, set := want[key]; {
		case set:
			out = append(out, NICChange{Key: key, Have: have, Want: v})
		case has && i >= max(len(nics), 1):
			out = append(out, NICChange{Key: key, Have: have})
		}
	}
	return out
}

// NICParams are the config parameters that make changes: each NIC's value, and the NICs to
// remove in PVE's delete, which a running VM unplugs at once (network is in PVE's default
// hotplug).
func NICParams(changes []NICChange) pve.VMConfig {
	params := pve.VMConfig{}
	var remove []string
	for _, c := range changes {
		if c.Removed() {
			remove = append(remove, c.Key)
		} else {
			params[c.Key] = c.Want
		}
	}
	if len(remove) > 0 {
		params["delete"] = strings.Join(remove, ",")
	}
	return params
}

// NICsOf are the VM's NICs of its config cfg, its net[n] values by key; nil for none.
func NICsOf(cfg pve.VMConfig) pve.VMConfig {
	var out pve.VMConfig
	for i := range config.MaxNICs {
		key := fmt.Sprint("net", i)
		if v, ok := cfg[key]; ok {
			if out == nil {
				out = pve.VMConfig{}
			}
			out[key] = v
		}
	}
	return out
}

// SeedNetwork is the guest's network for the seed's network-config, its NICs found by the MACs
// of cfg (the VM's config once its NICs are written): net0 with a's addresses, and DHCP's IPv4
// unless a has a static one or none, and the nameservers; each further NIC of nics with DHCP's
// IPv4, and optional: the readiness wait reads net0 alone (Addresses.Missing), and a further
// NIC on a network without a DHCP server would otherwise hold the guest's boot, and with it the
// agent that cloud-init installs, for systemd-networkd-wait-online's timeout. It is nil, and the
// seed has no network-config, for DHCP on net0 alone: cloud-init's fallback does that, and DHCP
// gives the nameservers.
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
		out = append(out, nocloud.Ethernet{Name: key, MAC: MACFromNet(cfg[key]), DHCP4: true, Optional: true})
	}
	return out
}
