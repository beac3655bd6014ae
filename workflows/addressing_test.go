package workflows_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// seedNetworkConfig is the network-config file on the seed the proxy's guest booted from, as
// cloud-init reads it (the create releases the ISO afterwards).
func seedNetworkConfig(t *testing.T, w *world) string {
	t.Helper()
	return seedFile(t, w, "network-config")
}

// seedFiles are the names of the files on the seed the proxy's guest booted from.
func seedFiles(t *testing.T, w *world) []string {
	t.Helper()
	vms := w.vms()
	require.Len(t, vms, 1)
	seed, ok := w.cluster.GuestSeed(vms[0].VMID)
	require.True(t, ok)
	return slices.Sorted(maps.Keys(seed))
}

func TestCreate_aStaticIPv4AndIPv6ProxyGetsExactlyItsAddresses(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.Nameservers = []string{"192.0.2.53"}
	in := createInput()
	in.Addresses = proxy.Addresses{IPv4: "192.0.2.10/24", Gateway4: "192.0.2.1", IPv6: "2001:db8::10/64", Gateway6: "2001:db8::1"}

	res, err := w.create(in)

	require.NoError(t, err)
	assert.Equal(t, "192.0.2.10", res.IPv4)
	assert.Equal(t, "2001:db8::10", res.IPv6)
	assert.Equal(t, []string{"192.0.2.10/24", "2001:db8::10/64"}, res.Addresses, "no DHCP address beside them")
	mac := strings.ToLower(proxy.MACFromNet(vmConfig(t, w, res.VMID)["net0"]))
	assert.Equal(t, `version: 2
ethernets:
  net0:
    match:
      macaddress: "`+mac+`"
    set-name: net0
    dhcp4: false
    addresses:
      - "192.0.2.10/24"
      - "2001:db8::10/64"
    routes:
      - to: default
        via: "192.0.2.1"
      - to: default
        via: "2001:db8::1"
    nameservers:
      addresses:
        - "192.0.2.53"
    dhcp6: false
    accept-ra: false
`, seedNetworkConfig(t, w))
}

func TestCreate_anIPv6OnlyProxyWaitsForItsIPv6Alone(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.Addresses = proxy.Addresses{IPv6: "2001:db8::10/64", Gateway6: "fe80::1", NoIPv4: true}

	res, err := w.create(in)

	require.NoError(t, err)
	assert.Empty(t, res.IPv4)
	assert.Equal(t, "2001:db8::10", res.IPv6)
	assert.Contains(t, seedNetworkConfig(t, w), "dhcp4: false")
}

func TestCreate_dhcpAloneWritesNoNetworkConfig(t *testing.T) {
	w := newWorld(t)

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.NotEmpty(t, res.IPv4)
	assert.Equal(t, []string{res.IPv4 + "/24"}, res.Addresses)
	assert.NotContains(t, seedFiles(t, w), "network-config", "cloud-init's fallback is DHCP on the first NIC")
}

func TestCreate_machineTypeNICsGetTheirBridgesAndVLANTags(t *testing.T) {
	w := newWorld(t)
	mt := w.cfg.Proxmox.MachineTypes["small"]
	mt.NICs = []config.NIC{{VLAN: 20}, {Bridge: "vmbr1", VLAN: 30}}
	w.cfg.Proxmox.MachineTypes["small"] = mt

	res, err := w.create(createInput())

	require.NoError(t, err)
	cfg := vmConfig(t, w, res.VMID)
	assert.Regexp(t, `^virtio=BC:24:11:[0-9A-F:]{8},bridge=vmbr0,.*tag=20$`, cfg["net0"], "the template's NIC, its MAC kept")
	assert.Regexp(t, `^virtio=[0-9A-F:]{17},bridge=vmbr1,tag=30$`, cfg["net1"], "a new NIC with the MAC PVE gave it")
	net1MAC := strings.ToLower(proxy.MACFromNet(cfg["net1"]))
	assert.Contains(t, seedNetworkConfig(t, w), `  net1:
    match:
      macaddress: "`+net1MAC+`"
    set-name: net1
    dhcp4: true
    optional: true
`, "the boot waits for no further NIC: their networks may have no DHCP server")
}

func TestCreate_furtherNICsOnVLANsWithoutDHCPDoNotHoldTheBoot(t *testing.T) {
	took := func(nics []config.NIC) time.Duration {
		w := newWorld(t, func(o *pvesim.Options) {
			o.NoDHCP = []pvesim.Network{{Bridge: "vmbr1", VLAN: 30}, {Bridge: "vmbr1", VLAN: 40}}
		})
		mt := w.cfg.Proxmox.MachineTypes["small"]
		mt.NICs = nics
		w.cfg.Proxmox.MachineTypes["small"] = mt
		start := w.clock.Now()
		_, err := w.create(createInput())
		require.NoError(t, err)
		return w.clock.Now().Sub(start)
	}

	net0Alone := took(nil)
	threeNICs := took([]config.NIC{{}, {Bridge: "vmbr1", VLAN: 30}, {Bridge: "vmbr1", VLAN: 40}})

	assert.Less(t, threeNICs, net0Alone+time.Minute, "systemd-networkd-wait-online's 120 s are not waited: net0 alone took %s", net0Alone)
}

func TestCreate_refusesInvalidAddressesBeforeAnyCall(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.Addresses = proxy.Addresses{IPv4: "192.0.2.0/24", Gateway4: "198.51.100.1"}

	_, err := w.create(in)

	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "192.0.2.0 is the network address of 192.0.2.0/24")
	assert.Empty(t, w.cluster.Calls())
}

func TestChange_aReseedKeepsTheStaticAddresses(t *testing.T) {
	w := newWorld(t)
	addrs := proxy.Addresses{IPv4: "192.0.2.10/24", Gateway4: "192.0.2.1"}
	in := createInput()
	in.Addresses = addrs
	_, err := w.create(in)
	require.NoError(t, err)
	change := proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small", Addresses: addrs,
		InstanceID: uid + "-2", UserData: "#cloud-config\n"}

	res, err := w.change(change)

	require.NoError(t, err)
	assert.Equal(t, "192.0.2.10", res.IPv4)
	assert.Contains(t, seedNetworkConfig(t, w), `      - "192.0.2.10/24"`, "the new instance's cloud-init configures the network anew from it")
}

func TestProxy_aUserDataChangeKeepsTheProxysAddresses(t *testing.T) {
	for name, tc := range map[string]struct {
		create  func(*proxyvm.ProxySpec)
		address string
		ipv4    string
		ipv6    string
	}{
		"static, IPv6 only": {
			create: func(in *proxyvm.ProxySpec) {
				in.Addresses = proxy.Addresses{IPv6: "2001:db8:1::10/64", Gateway6: "fe80::1", NoIPv4: true}
			},
			address: "2001:db8:1::10/64", ipv6: "2001:db8:1::10", // waited for, not an IPv4 the proxy never has
		},
		"from an address pool": {
			create:  func(in *proxyvm.ProxySpec) { in.AddressPool = "egress" },
			address: "192.0.2.10/24", ipv4: "192.0.2.10", ipv6: "2001:db8::10", // asked of the pool again
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := withPools(newWorld(t))
			p := newProxyEntity(t, w)
			in := createInput()
			tc.create(&in)
			p.request(0, core.CreateUpdate, "create", in)
			fresh := "#cloud-config\nruncmd: [echo changed]\n"
			p.request(time.Hour, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, UserData: &fresh})
			var network string
			p.at(2*time.Hour, func() { network = seedNetworkConfig(t, w) })
			p.request(3*time.Hour, core.DeleteUpdate, "delete", deleteInput())

			p.run()

			res := p.answer("change").result.(proxyvm.ChangeProxyResult)
			assert.True(t, res.Restarted)
			assert.Equal(t, tc.ipv4, res.IPv4)
			assert.Equal(t, tc.ipv6, res.IPv6)
			assert.Contains(t, network, `      - "`+tc.address+`"`, "the new seed's network-config")
		})
	}
}

func TestCreate_requestNICsTakeThePlaceOfTheMachineTypes(t *testing.T) {
	w := newWorld(t)
	mt := w.cfg.Proxmox.MachineTypes["small"]
	mt.NICs = []config.NIC{{VLAN: 20}, {Bridge: "vmbr1", VLAN: 30}}
	w.cfg.Proxmox.MachineTypes["small"] = mt
	in := createInput()
	in.NICs = []config.NIC{{VLAN: 40}}

	res, err := w.create(in)

	require.NoError(t, err)
	cfg := vmConfig(t, w, res.VMID)
	assert.Regexp(t, `,tag=40$`, cfg["net0"])
	assert.NotContains(t, cfg, "net1", "the machine type's further NIC is not the request's")
}

func TestCreate_refusesNICsPVEWouldRefuseBeforeAnyCall(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.NICs = []config.NIC{{VLAN: 4095}}

	_, err := w.create(in)

	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "nics[0].vlan: 4095 is outside PVE's VLAN tags 1..4094")
	assert.Empty(t, w.cluster.Calls())
}
