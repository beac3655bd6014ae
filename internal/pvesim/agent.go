package pvesim

import (
	"context"
	"encoding/json"
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

// CloudInitResultPath is where cloud-init writes its result once it has run all its stages in
// this boot (cloudinit/cmd/main.py status_wrapper). /run is a tmpfs: the file is absent from
// each boot's start until cloud-init is done.
const CloudInitResultPath = "/run/cloud-init/result.json"

// AgentFileRead answers GET .../agent/file-read in PVE's order (qemu-server
// src/PVE/API2/Qemu/Agent.pm file-read): VM.GuestAgent.FileRead or VM.GuestAgent.Unrestricted
// on /vms/{vmid}, checked before the handler runs; the VM's config; the agent's availability as
// for AgentNetworkInterfaces (assert_agent_available); then the agent's file-open, whose
// failure is "Agent error: <qemu-ga's text>" (QemuServer/Agent.pm check_agent_error). The
// guest's only file is cloud-init's result, written CloudInitDuration after its agent first
// answered in this boot, unless StallCloudInit; FailCloudInit puts errors into it.
func (c *Cluster) AgentFileRead(ctx context.Context, node string, vmid int, file string) (string, error) {
	return call(c, ctx, Call{Method: "AgentFileRead", Node: node, VMID: vmid}, func(now time.Time) (string, error) {
		if err := c.allow(vmPath(vmid), "VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted"); err != nil {
			return "", err
		}
		g, err := c.vmOn(node, vmid)
		if err != nil {
			return "", err
		}
		agentUp := g.startedAt.Add(c.bootDelay + g.agentLate)
		switch {
		case !agentEnabled(g.cfg):
			return "", serverErr("No QEMU guest agent configured")
		case !g.running:
			return "", serverErr(fmt.Sprintf("VM %d is not running", vmid))
		case c.faults.stallAgent[vmid] || g.paused || now.Before(agentUp):
			return "", serverErr("QEMU guest agent is not running")
		}
		if file != CloudInitResultPath || c.faults.stallCloudInit[vmid] || now.Before(agentUp.Add(c.cloudInitDuration)) {
			// qemu-ga's guest-file-open (qga/commands-posix.c safe_open_or_create):
			// error_setg_errno(errp, errno, "failed to open file '%s' (mode: '%s')", ...).
			return "", serverErr(fmt.Sprintf("Agent error: failed to open file '%s' (mode: 'r'): No such file or directory", file))
		}
		return cloudInitResult(g, c.faults.cloudInitErrors[vmid]), nil
	})
}

// cloudInitResult is result.json as cloud-init writes it (util.json_dumps: one space of
// indent, sorted keys): the datasource it found, and the errors of its stages, never null.
func cloudInitResult(g *vm, errs []string) string {
	ds := "DataSourceNone"
	if g.guest.seed != nil {
		ds = "DataSourceNoCloud [seed=/dev/sr0]"
	}
	if errs == nil {
		errs = []string{}
	}
	type v1 struct {
		Datasource string   `json:"datasource"`
		Errors     []string `json:"errors"`
	}
	out, _ := json.MarshalIndent(map[string]v1{"v1": {Datasource: ds, Errors: errs}}, "", " ")
	return string(out) + "\n"
}
