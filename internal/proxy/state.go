package proxy

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/pveflow/pveflow/internal/pve"
)

// State is what a proxy VM is doing, as an operator sees it.
type State string

const (
	// Running means the VM runs and its guest agent reports a routable address: an IPv4, or an
	// IPv6 for an IPv6-only proxy.
	Running State = "Running"
	// Provisioning means the VM runs but has no routable address yet.
	Provisioning State = "Provisioning"
	// Stopped means the VM does not run guest code: stopped, paused or otherwise halted.
	Stopped State = "Stopped"
	// Unknown means PVE does not know: the VM's node is down, or the status cache has not
	// seen a fresh clone yet.
	Unknown State = "Unknown"
)

// MapState maps PVE's status ("running", "stopped", or "unknown" in cluster resources) and
// QEMU's qmpstatus (empty when only cluster resources were read) to a State. A VM that is
// running but paused or otherwise halted by QEMU forwards no traffic, so it counts as Stopped.
func MapState(status, qmpstatus string, hasIPv4 bool) State {
	switch {
	case status == "unknown":
		return Unknown
	case status == "running" && (qmpstatus == "" || qmpstatus == "running"):
		if hasIPv4 {
			return Running
		}
		return Provisioning
	default:
		return Stopped
	}
}

// FirstRoutableIPv4 picks the proxy's address from the guest agent's interfaces: the first IPv4
// address that is not loopback, link-local or unspecified, on an interface other than "lo". When
// mac (net0's MAC address) is given and an interface has it, only such interfaces count, so an
// address of a container bridge inside the guest is never taken for the VM's; the MAC is
// compared case-insensitively, as PVE writes it in upper case and guests in lower. It returns ""
// when there is no such address yet.
func FirstRoutableIPv4(ifaces []pve.AgentInterface, mac string) string {
	isNet0 := func(i pve.AgentInterface) bool { return mac != "" && strings.EqualFold(i.HardwareAddress, mac) }
	onlyNet0 := slices.ContainsFunc(ifaces, isNet0)
	for _, iface := range ifaces {
		if iface.Name == "lo" || (onlyNet0 && !isNet0(iface)) {
			continue
		}
		for _, a := range iface.IPAddresses {
			ip, err := netip.ParseAddr(a.Address)
			if err == nil && ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
				return ip.String()
			}
		}
	}
	return ""
}
