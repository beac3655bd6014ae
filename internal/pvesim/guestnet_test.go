package pvesim

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/pve"
)

// seedWithNetwork is a seed image whose network-config gives network.
func seedWithNetwork(t *testing.T, network []nocloud.Ethernet) []byte {
	t.Helper()
	var img bytes.Buffer
	_, err := nocloud.Write(&img, nocloud.Seed{InstanceID: "iid-1", Hostname: "proxy-a", Network: network})
	require.NoError(t, err)
	return img.Bytes()
}

// bootClonedWithSeed attaches seed, uploaded, to the clone newID as ide2 and starts it.
func bootClonedWithSeed(t *testing.T, c *Cluster, clk *ManualClock, seed []byte) {
	t.Helper()
	upload(t, c, clk, "seed.iso", seed)
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"ide2": "local:iso/seed.iso,media=cdrom"}))
	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
}

// agentInterfaceOf is the guest agent's interface with the MAC of the VM's NIC key.
func agentInterfaceOf(t *testing.T, c *Cluster, clk *ManualClock, key string) pve.AgentInterface {
	t.Helper()
	clk.Advance(time.Minute)
	ifaces, err := c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	require.NoError(t, err)
	_, mac := parseNet(c.vms[newID].cfg[key])
	for _, i := range ifaces {
		if strings.EqualFold(i.HardwareAddress, mac) {
			return i
		}
	}
	require.Failf(t, "no interface", "the agent reports no interface with %s's MAC %s: %v", key, mac, ifaces)
	return pve.AgentInterface{}
}

func TestAgent_reportsTheStaticAddressesOfTheSeedsNetworkConfig(t *testing.T) {
	c, clk := newCluster(t)
	finish(t, c, clk, startClone(t, c, newID))
	_, mac := parseNet(c.vms[newID].cfg["net0"])
	img := seedWithNetwork(t, []nocloud.Ethernet{{Name: "net0", MAC: mac,
		Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"}, Gateway4: "192.0.2.1", Gateway6: "fe80::1"}})
	bootClonedWithSeed(t, c, clk, img)

	iface := agentInterfaceOf(t, c, clk, "net0")

	assert.Equal(t, "net0", iface.Name, "network-config's set-name")
	assert.Equal(t, []pve.AgentIPAddress{
		{Address: "192.0.2.10", Type: "ipv4", Prefix: 24},
		{Address: "2001:db8::10", Type: "ipv6", Prefix: 64},
		{Address: linkLocal6(mustMAC(t, mac)), Type: "ipv6", Prefix: 64},
	}, iface.IPAddresses, "no DHCP address beside the static ones")
}

func TestAgent_furtherNICsTakeDHCPWhenTheirNetworkConfigSaysSo(t *testing.T) {
	c, clk := newCluster(t)
	finish(t, c, clk, startClone(t, c, newID))
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"net1": "virtio,bridge=vmbr1,tag=30", "net2": "virtio,bridge=vmbr2"}))
	cfg := c.vms[newID].cfg
	_, mac0 := parseNet(cfg["net0"])
	_, mac1 := parseNet(cfg["net1"])
	img := seedWithNetwork(t, []nocloud.Ethernet{
		{Name: "net0", MAC: mac0, DHCP4: true},
		{Name: "net1", MAC: mac1, DHCP4: true},
	})
	bootClonedWithSeed(t, c, clk, img)

	net1 := agentInterfaceOf(t, c, clk, "net1")
	net2 := agentInterfaceOf(t, c, clk, "net2")

	assert.Equal(t, "net1", net1.Name)
	assert.Len(t, net1.IPAddresses, 3, "IPv4 link-local, DHCP's, IPv6 link-local: %v", net1.IPAddresses)
	assert.Equal(t, "ens20", net2.Name, "a NIC network-config leaves out keeps its PCI slot's name")
	assert.Len(t, net2.IPAddresses, 1, "an IPv6 link-local alone: %v", net2.IPAddresses)
}

func TestAgent_theNetworkOutlivesTheSeedOnlyWhileTheInstanceDoes(t *testing.T) {
	pveflows, err := nocloud.VendorData("", false)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		vendorData string
		static     bool
	}{
		// manual_cache_clean: the boot without a seed is the same instance, whose network stays.
		"pveflow's vendor-data": {vendorData: pveflows, static: true},
		// DataSourceNone's new instance: cloud-init's fallback, DHCP on net0.
		"no vendor-data": {static: false},
	} {
		t.Run(name, func(t *testing.T) {
			c, clk := newCluster(t)
			finish(t, c, clk, startClone(t, c, newID))
			_, mac := parseNet(c.vms[newID].cfg["net0"])
			var img bytes.Buffer
			_, err := nocloud.Write(&img, nocloud.Seed{InstanceID: "iid-1", Hostname: "proxy-a", VendorData: tc.vendorData,
				Network: []nocloud.Ethernet{{Name: "net0", MAC: mac, Addresses: []string{"192.0.2.10/24"}}}})
			require.NoError(t, err)
			bootClonedWithSeed(t, c, clk, img.Bytes())

			// The seed is detached and the guest started again.
			upid, err := c.Stop(t.Context(), "pve1", newID)
			require.NoError(t, err)
			finish(t, c, clk, upid)
			require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"delete": "ide2"}))
			upid, err = c.Start(t.Context(), "pve1", newID)
			require.NoError(t, err)
			finish(t, c, clk, upid)

			static := pve.AgentIPAddress{Address: "192.0.2.10", Type: "ipv4", Prefix: 24}
			if tc.static {
				assert.Contains(t, agentInterfaceOf(t, c, clk, "net0").IPAddresses, static)
			} else {
				assert.NotContains(t, agentInterfaceOf(t, c, clk, "net0").IPAddresses, static)
			}
		})
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	hw, err := net.ParseMAC(s)
	require.NoError(t, err)
	return hw
}

func TestState_saysWhatTheGuestRunsWithBesideItsConfig(t *testing.T) {
	c, clk := newCluster(t)
	finish(t, c, clk, startClone(t, c, newID))
	_, mac := parseNet(c.vms[newID].cfg["net0"])
	bootClonedWithSeed(t, c, clk, seedWithNetwork(t, []nocloud.Ethernet{{Name: "net0", MAC: mac,
		Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"}, Gateway4: "192.0.2.1"}}))
	booted := c.State().Guests[newID]

	// Cores written to a running VM wait for its next start.
	cores := cpus(c.vms[newID].cfg)
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": fmt.Sprint(cores + 2)}))
	st := c.State()

	assert.Equal(t, Guest{Running: true, Cores: cores, MemoryMiB: booted.MemoryMiB, InstanceID: "iid-1",
		Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"}}, st.Guests[newID])
	assert.Equal(t, fmt.Sprint(cores+2), st.VMs[slices.IndexFunc(st.VMs, func(vm VM) bool { return vm.VMID == newID })].Config["cores"])
}

// vlanWithoutDHCP is the network of TestAgent_isLateByWaitOnlinesTimeout's further NIC: VLAN 30
// on vmbr1, with no DHCP server.
var vlanWithoutDHCP = Network{Bridge: "vmbr1", VLAN: 30}

func TestAgent_isLateByWaitOnlinesTimeoutWhenTheBootWaitsForANICWithoutDHCP(t *testing.T) {
	pveflows, err := nocloud.VendorData("", false)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		// net0 and net1 are the NICs' network-config entries, without their MACs; net0 nil is
		// no network-config, cloud-init's fallback.
		net0, net1 *nocloud.Ethernet
		net0NoDHCP bool
		late       bool
	}{
		{name: "a further NIC asking DHCP, not optional", net0: &nocloud.Ethernet{DHCP4: true}, net1: &nocloud.Ethernet{DHCP4: true}, late: true},
		{name: "a further NIC asking DHCP, optional", net0: &nocloud.Ethernet{DHCP4: true}, net1: &nocloud.Ethernet{DHCP4: true, Optional: true}},
		{name: "a further NIC with a static address", net0: &nocloud.Ethernet{DHCP4: true}, net1: &nocloud.Ethernet{Addresses: []string{"198.51.100.10/24"}}},
		{name: "a further NIC network-config leaves out", net0: &nocloud.Ethernet{DHCP4: true}},
		{name: "the fallback's DHCP on net0", net0NoDHCP: true, late: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noDHCP := []Network{vlanWithoutDHCP}
			if tc.net0NoDHCP {
				noDHCP = append(noDHCP, Network{Bridge: "vmbr0"})
			}
			c, clk := newCluster(t, func(o *Options) { o.AgentBootDelay, o.NoDHCP = 30*time.Second, noDHCP })
			finish(t, c, clk, startClone(t, c, newID))
			require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"net1": "virtio,bridge=vmbr1,tag=30"}))
			seed := nocloud.Seed{InstanceID: "iid-1", Hostname: "proxy-a", VendorData: pveflows}
			for key, e := range map[string]*nocloud.Ethernet{"net0": tc.net0, "net1": tc.net1} {
				if e != nil {
					e.Name = key
					_, e.MAC = parseNet(c.vms[newID].cfg[key])
					seed.Network = append(seed.Network, *e)
				}
			}
			slices.SortFunc(seed.Network, func(a, b nocloud.Ethernet) int { return strings.Compare(a.Name, b.Name) })
			var img bytes.Buffer
			_, err := nocloud.Write(&img, seed)
			require.NoError(t, err)
			bootClonedWithSeed(t, c, clk, img.Bytes())

			clk.Advance(30 * time.Second)
			_, err = c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
			if !tc.late {
				require.NoError(t, err, "the agent answers after AgentBootDelay")
				return
			}
			require.Error(t, err)
			assert.Equal(t, "QEMU guest agent is not running", err.(*pve.APIError).Message)
			clk.Advance(2 * time.Minute)
			_, err = c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
			assert.NoError(t, err, "wait-online gave up after its 120 s and the boot went on")
		})
	}
}

func TestAgent_answersOnTimeInABootAfterTheInstancesFirst(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) {
		o.AgentBootDelay, o.NoDHCP, o.WaitOnlineTimeout = 30*time.Second, []Network{vlanWithoutDHCP}, 5*time.Minute
	})
	finish(t, c, clk, startClone(t, c, newID))
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"net1": "virtio,bridge=vmbr1,tag=30"}))
	_, mac0 := parseNet(c.vms[newID].cfg["net0"])
	_, mac1 := parseNet(c.vms[newID].cfg["net1"])
	bootClonedWithSeed(t, c, clk, seedWithNetwork(t, []nocloud.Ethernet{{Name: "net0", MAC: mac0, DHCP4: true}, {Name: "net1", MAC: mac1, DHCP4: true}}))
	clk.Advance(5*time.Minute + 30*time.Second)
	net1 := agentInterfaceOf(t, c, clk, "net1")
	assert.Len(t, net1.IPAddresses, 1, "no DHCP server answered: an IPv6 link-local alone: %v", net1.IPAddresses)

	upid, err := c.Reboot(t.Context(), "pve1", newID)
	require.NoError(t, err)
	finish(t, c, clk, upid)
	clk.Advance(30 * time.Second)

	_, err = c.AgentNetworkInterfaces(t.Context(), "pve1", newID)
	assert.NoError(t, err, "the agent installed in the first boot starts without waiting for the network")
}
