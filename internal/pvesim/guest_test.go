package pvesim

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/pve"
)

// bootWithSeed clones newID, attaches an uploaded seed as ide2 unless seed is nil, and starts
// the VM.
func bootWithSeed(t *testing.T, c *Cluster, clk *ManualClock, seed []byte) *vm {
	t.Helper()
	finish(t, c, clk, startClone(t, c, newID))
	if seed != nil {
		upload(t, c, clk, "seed.iso", seed)
		require.NoError(t, c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"ide2": "local:iso/seed.iso,media=cdrom"}))
	}
	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
	return c.vms[newID]
}

func TestBoot_guestReadsTheNoCloudSeedOnItsCDROM(t *testing.T) {
	c, clk := newCluster(t)
	var img bytes.Buffer
	_, err := nocloud.Write(&img, nocloud.Seed{InstanceID: "iid-1", Hostname: "proxy-a", UserData: "#cloud-config\n"})
	require.NoError(t, err)

	g := bootWithSeed(t, c, clk, img.Bytes())

	require.NotNil(t, g.guest.seed)
	assert.Contains(t, g.guest.seed["meta-data"], "iid-1")
	assert.Equal(t, "#cloud-config\n", g.guest.seed["user-data"])
}

func TestBoot_guestFindsNoSeedWithoutACIDataCDROM(t *testing.T) {
	for name, seed := range map[string][]byte{
		"no CD-ROM":              nil,
		"an ISO that is not one": []byte("not an ISO image"),
	} {
		t.Run(name, func(t *testing.T) {
			c, clk := newCluster(t)
			g := bootWithSeed(t, c, clk, seed)
			assert.Nil(t, g.guest.seed)
		})
	}
}
