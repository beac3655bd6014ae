package pvesim

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// AgentNetworkInterfaces answers for the guest agent in PVE's order of checks: an agent in the
// config, a running VM, an agent that answers (AgentBootDelay after the start, later when
// systemd-networkd-wait-online held the boot that installed it (Cluster.boot), never after
// StallAgent, not while the VM is paused). The guest has lo and an interface for each NIC, with
// the NIC's MAC in lower case and the addresses its network-config gives (nicInterface).
func (c *Cluster) AgentNetworkInterfaces(ctx context.Context, node string, vmid int) ([]pve.AgentInterface, error) {
	return call(c, ctx, Call{Method: "AgentNetworkInterfaces", Node: node, VMID: vmid}, func(now time.Time) ([]pve.AgentInterface, error) {
		if err := c.allow(vmPath(vmid), "VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"); err != nil {
			return nil, err
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return nil, err
		}
		switch {
		case !agentEnabled(g.cfg):
			return nil, serverErr("No QEMU guest agent configured")
		case !g.running:
			return nil, serverErr(fmt.Sprintf("VM %d is not running", vmid))
		case c.faults.stallAgent[vmid] || g.paused || now.Sub(g.startedAt) < c.bootDelay+g.agentLate:
			return nil, serverErr("QEMU guest agent is not running")
		}
		return c.guestInterfaces(g), nil
	})
}

func (c *Cluster) guestInterfaces(g *vm) []pve.AgentInterface {
	ifaces := []pve.AgentInterface{{
		Name:            "lo",
		HardwareAddress: "00:00:00:00:00:00",
		IPAddresses: []pve.AgentIPAddress{
			{Address: "127.0.0.1", Type: "ipv4", Prefix: 8},
			{Address: "::1", Type: "ipv6", Prefix: 128},
		},
	}}
	for _, nic := range guestNICs(g.cfg) {
		ifaces = append(ifaces, g.nicInterface(nic, !c.noDHCP[nic.network]))
	}
	return ifaces
}

// linkLocal6 is the IPv6 link-local address a guest derives from its MAC (EUI-64).
func linkLocal6(mac net.HardwareAddr) string {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	a[8], a[9], a[10] = mac[0]^0x02, mac[1], mac[2]
	a[11], a[12] = 0xff, 0xfe
	a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(a).String()
}
