package pvesim

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/pve"
)

// seedImage is a NoCloud seed of instanceID with vendorData, as pveflow's UploadISO writes one.
func seedImage(t *testing.T, instanceID, vendorData string) []byte {
	t.Helper()
	var img bytes.Buffer
	_, err := nocloud.Write(&img, nocloud.Seed{InstanceID: instanceID, Hostname: "proxy-a", UserData: "#cloud-config\n", VendorData: vendorData})
	require.NoError(t, err)
	return img.Bytes()
}

// pveflowVendorData is the vendor-data pveflow puts on its seeds with the guest agent on.
func pveflowVendorData(t *testing.T) string {
	t.Helper()
	vd, err := nocloud.VendorData("", true)
	require.NoError(t, err)
	return vd
}

// detachSeed ejects the seed from ide2 and deletes the seed ISO, as a create does after the
// first boot.
func detachSeed(t *testing.T, c *Cluster, clk *ManualClock) {
	t.Helper()
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"ide2": "none,media=cdrom"}))
	upid, err := c.DeleteVolume(t.Context(), "pve1", "local", "local:iso/seed.iso")
	require.NoError(t, err)
	if upid != "" {
		require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
	}
}

// attachSeed uploads seed as the seed ISO and attaches it as ide2.
func attachSeed(t *testing.T, c *Cluster, clk *ManualClock, seed []byte) {
	t.Helper()
	upload(t, c, clk, "seed.iso", seed)
	require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"ide2": "local:iso/seed.iso,media=cdrom"}))
}

func reboot(t *testing.T, c *Cluster, clk *ManualClock) {
	t.Helper()
	upid, err := c.Reboot(t.Context(), "pve1", newID)
	require.NoError(t, err)
	require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
}

func cloudInitOf(t *testing.T, c *Cluster) (string, int) {
	t.Helper()
	iid, runs, ok := c.CloudInit(newID)
	require.True(t, ok)
	return iid, runs
}

func TestCloudInit_pveflowsSeedGoneAfterFirstBootARebootKeepsTheInstance(t *testing.T) {
	c, clk := newCluster(t)
	bootWithSeed(t, c, clk, seedImage(t, "iid-1", pveflowVendorData(t)))
	detachSeed(t, c, clk)

	reboot(t, c, clk)

	assert.NotContains(t, isoNames(c), "seed.iso")
	iid, runs := cloudInitOf(t, c)
	assert.Equal(t, "iid-1", iid)
	assert.Equal(t, 1, runs, "cloud-init ran as a new instance again")
}

func TestCloudInit_withoutManualCacheCleanABootWithoutTheSeedIsDataSourceNone(t *testing.T) {
	c, clk := newCluster(t)
	bootWithSeed(t, c, clk, seedImage(t, "iid-1", "#cloud-config\n{}\n"))
	detachSeed(t, c, clk)

	reboot(t, c, clk)

	iid, runs := cloudInitOf(t, c)
	assert.Equal(t, datasourceNoneID, iid)
	assert.Equal(t, 2, runs)
}

func TestCloudInit_aRebootWithTheSameSeedKeepsTheInstance(t *testing.T) {
	c, clk := newCluster(t)
	bootWithSeed(t, c, clk, seedImage(t, "iid-1", "#cloud-config\n{}\n"))

	reboot(t, c, clk)

	iid, runs := cloudInitOf(t, c)
	assert.Equal(t, "iid-1", iid)
	assert.Equal(t, 1, runs)
}

func TestCloudInit_manualCacheCleanAloneIgnoresASeedOfAnotherInstance(t *testing.T) {
	c, clk := newCluster(t)
	bootWithSeed(t, c, clk, seedImage(t, "iid-1", "#cloud-config\nmanual_cache_clean: true\n"))
	detachSeed(t, c, clk)
	attachSeed(t, c, clk, seedImage(t, "iid-2", "#cloud-config\nmanual_cache_clean: true\n"))

	reboot(t, c, clk)

	iid, runs := cloudInitOf(t, c)
	assert.Equal(t, "iid-1", iid)
	assert.Equal(t, 1, runs)
}

func TestCloudInit_pveflowsReseedHookRunsASeedOfAnotherInstance(t *testing.T) {
	c, clk := newCluster(t)
	bootWithSeed(t, c, clk, seedImage(t, "iid-1", pveflowVendorData(t)))
	detachSeed(t, c, clk)
	reboot(t, c, clk)
	attachSeed(t, c, clk, seedImage(t, "iid-2", pveflowVendorData(t)))

	reboot(t, c, clk)
	detachSeed(t, c, clk)
	reboot(t, c, clk)

	iid, runs := cloudInitOf(t, c)
	assert.Equal(t, "iid-2", iid)
	assert.Equal(t, 2, runs)
}

func TestCloudInit_anInstanceBegunWithAnOlderSeedGetsTheReseedHookFromANewSeed(t *testing.T) {
	c, clk := newCluster(t)
	bootWithSeed(t, c, clk, seedImage(t, "iid-1", "#cloud-config\n{}\n"))
	detachSeed(t, c, clk)
	attachSeed(t, c, clk, seedImage(t, "iid-1", pveflowVendorData(t))) // a create restarting it
	reboot(t, c, clk)
	detachSeed(t, c, clk)
	reboot(t, c, clk)
	attachSeed(t, c, clk, seedImage(t, "iid-2", pveflowVendorData(t)))

	reboot(t, c, clk)

	iid, runs := cloudInitOf(t, c)
	assert.Equal(t, "iid-2", iid)
	assert.Equal(t, 2, runs)
}
