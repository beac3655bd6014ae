package pvesim

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestUpload_requiresExactSize(t *testing.T) {
	tests := []struct {
		name string
		size int64
		want error
	}{
		{"short body", 5, serverErr("upload failed - got 4 of 5 bytes")},
		{"long body", 3, serverErr("upload failed - body longer than 3 bytes")},
		{"no content length", -1, apiErr(501, "chunked transfer encoding not supported")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newCluster(t)
			_, err := c.UploadISO(t.Context(), "pve1", "local", "seed.iso", strings.NewReader("seed"), tt.size)
			assert.Equal(t, tt.want, err)
			assert.Empty(t, isoNames(c))
		})
	}
}

func TestUpload_noContentLengthMatchesChunkedFixture(t *testing.T) {
	c, _ := newCluster(t)
	_, err := c.UploadISO(t.Context(), "pve1", "local", "seed.iso", strings.NewReader("seed"), -1)
	requireFixtureError(t, "err_chunked", err)
}

func TestUpload_extensionChecked(t *testing.T) {
	tests := []struct {
		filename string
		ok       bool
	}{
		{"seed.iso", true},
		{"SEED.IMG", true},
		{"seed.iso.txt", false},
		{"seed", false},
	}
	for _, tt := range tests {
		t.Run(tt.filename, func(t *testing.T) {
			c, _ := newCluster(t)
			_, err := c.UploadISO(t.Context(), "pve1", "local", tt.filename, strings.NewReader("x"), 1)
			if tt.ok {
				assert.NoError(t, err)
				return
			}
			assert.Equal(t, paramErr(map[string]string{"filename": "wrong file extension"}), err)
		})
	}
}

func TestUpload_filenameNormalised(t *testing.T) {
	c, clk := newCluster(t)
	upid, err := c.UploadISO(t.Context(), "pve1", "local", `C:\tmp/../my seed+1.iso`, strings.NewReader("x"), 1)
	require.NoError(t, err)
	finish(t, c, clk, upid)

	assert.Equal(t, []string{"local:iso/my_seed_1.iso"}, isoNames(c))
}

func TestUpload_storesWhenTaskEnds(t *testing.T) {
	c, clk := newCluster(t)
	upid, err := c.UploadISO(t.Context(), "pve1", "local", "seed.iso", strings.NewReader("seed"), 4)
	require.NoError(t, err)
	info, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	assert.Equal(t, "imgcopy", info.Type)
	assert.Empty(t, info.ID)
	assert.Empty(t, isoNames(c))

	finish(t, c, clk, upid)
	vols := c.Volumes()
	i := slices.IndexFunc(vols, func(v Volume) bool { return v.VolID == "local:iso/seed.iso" })
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, Volume{Node: "pve1", Storage: "local", VolID: "local:iso/seed.iso", Size: 4, Data: []byte("seed")}, vols[i])
}

func TestUpload_overwrites(t *testing.T) {
	c, clk := newCluster(t)
	upload(t, c, clk, "seed.iso", []byte("old"))
	upload(t, c, clk, "seed.iso", []byte("newer"))

	for _, v := range c.Volumes() {
		if v.VolID == "local:iso/seed.iso" {
			assert.Equal(t, []byte("newer"), v.Data)
			return
		}
	}
	t.Fatal("the ISO is gone")
}

func TestUpload_storageRefusals(t *testing.T) {
	tests := []struct {
		name, node, storage string
		want                error
	}{
		{"unknown storage", "pve1", "nope", serverErr("storage 'nope' does not exist")},
		{"storage on another node only", "pve1", "backups", serverErr("storage 'backups' is not available on node 'pve1'")},
		{"lvmthin storage", "pve1", "local-lvm", serverErr("can't upload to storage type 'lvmthin'")},
		{"no iso content", "pve2", "backups", serverErr("storage 'backups' does not support 'iso' content")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newCluster(t, func(o *Options) {
				o.Nodes[1].Storages = append(slices.Clone(o.Nodes[1].Storages), Storage{ID: "backups", Type: "dir", Content: "backup", Total: 1 << 40})
			})
			_, err := c.UploadISO(t.Context(), tt.node, tt.storage, "seed.iso", strings.NewReader("x"), 1)
			assert.Equal(t, tt.want, err)
		})
	}
}

func TestUpload_refusalsMatchFixtures(t *testing.T) {
	tests := []struct {
		fixture, storage string
	}{
		{"err_upload_no_iso_content", "backups"},
		{"err_storage_missing", "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			c, _ := newCluster(t, func(o *Options) {
				o.Nodes[0].Storages = append(slices.Clone(o.Nodes[0].Storages), Storage{ID: "backups", Type: "dir", Content: "backup", Total: 1 << 40})
			})
			_, err := c.UploadISO(t.Context(), "pve1", tt.storage, "seed.iso", strings.NewReader("x"), 1)
			requireFixtureError(t, tt.fixture, err)
		})
	}
}

func TestUpload_storageNotOnNodeMatchesFixture(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) {
		o.Nodes[0].Storages = o.Nodes[0].Storages[1:]
		o.VMs = nil
	})
	_, err := c.UploadISO(t.Context(), "pve1", "local", "seed.iso", strings.NewReader("x"), 1)
	requireFixtureError(t, "err_storage_not_on_node", err)
}

func TestDeleteVolume_missingISOTaskOK(t *testing.T) {
	c, clk := newCluster(t)
	upid, err := c.DeleteVolume(t.Context(), "pve1", "local", "local:iso/missing.iso")
	require.NoError(t, err)
	assert.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
}

func TestDeleteVolume_removesISOWhenTaskEnds(t *testing.T) {
	tests := []struct{ name, volid string }{
		{"full volume ID", "local:iso/seed.iso"},
		{"relative volume ID", "iso/seed.iso"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newCluster(t)
			upload(t, c, clk, "seed.iso", []byte("seed"))
			upid, err := c.DeleteVolume(t.Context(), "pve1", "local", tt.volid)
			require.NoError(t, err)
			assert.Equal(t, []string{"local:iso/seed.iso"}, isoNames(c))

			finish(t, c, clk, upid)
			assert.Empty(t, isoNames(c))
		})
	}
}

func TestDeleteVolume_imgdelIDIsStorageForISOs(t *testing.T) {
	c, _ := newCluster(t)
	upid, err := c.DeleteVolume(t.Context(), "pve1", "local", "local:iso/seed.iso")
	require.NoError(t, err)

	info, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	assert.Equal(t, "imgdel", info.Type)
	assert.Equal(t, "local", info.ID)
}

func TestDeleteVolume_badVolumeIDsAre400(t *testing.T) {
	tests := []struct {
		name, storage, volid, want string
	}{
		{"storage mismatch", "local", "other:iso/seed.iso", "storage ID mismatch (other != local)\n"},
		{"no storage", "", "iso/seed.iso", "no storage specified - incomplete volume ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newCluster(t)
			_, err := c.DeleteVolume(t.Context(), "pve1", tt.storage, tt.volid)
			assert.Equal(t, paramErr(map[string]string{"volume": tt.want}), err)
		})
	}
}

func TestDeleteVolume_unparsableVolumeRefusedBeforeTheTask(t *testing.T) {
	tests := []struct {
		name, storage, volid, fixture string
	}{
		{"volume ID without a name", "local", "local:", "err_volume_id_unparsable"},
		{"ISO without its extension", "local", "local:iso/seed.txt", "err_volume_name_unparsable"},
		{"relative ISO without its extension", "local", "iso/seed.txt", "err_volume_name_unparsable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newCluster(t)
			_, err := c.DeleteVolume(t.Context(), "pve1", tt.storage, tt.volid)
			requireFixtureError(t, tt.fixture, err)
			assert.Equal(t, pve.Permanent, pve.Classify(err))
		})
	}
}

func TestStorageStatus_unknownStorageIs400(t *testing.T) {
	c, _ := newCluster(t)
	_, err := c.StorageStatus(t.Context(), "pve1", "nope")
	requireFixtureError(t, "err_storage_no_such", err)
}

func TestStorageStatus_availShrinksWithVolumes(t *testing.T) {
	c, clk := newCluster(t)
	before, err := c.StorageStatus(t.Context(), "pve1", "local")
	require.NoError(t, err)
	upload(t, c, clk, "seed.iso", bytes.Repeat([]byte("x"), 4096))

	after, err := c.StorageStatus(t.Context(), "pve1", "local")
	require.NoError(t, err)
	assert.Equal(t, pve.StorageStatus{Type: "dir", Content: "backup,import,iso,vztmpl", Enabled: true, Active: true,
		Total: before.Total, Used: before.Used + 4096, Avail: before.Avail - 4096}, after)
}

func TestStorageStatus_storagesAreNodeLocalUnlessShared(t *testing.T) {
	c, clk := newCluster(t)
	upload(t, c, clk, "seed.iso", []byte("seed"))

	pve1, err := c.StorageStatus(t.Context(), "pve1", "local")
	require.NoError(t, err)
	pve2, err := c.StorageStatus(t.Context(), "pve2", "local")
	require.NoError(t, err)
	assert.Equal(t, pve1.Avail+4, pve2.Avail)
}

func TestNodeStatus_unknownNodeFails(t *testing.T) {
	c, _ := newCluster(t)
	_, err := c.NodeStatus(t.Context(), "pve9")
	assert.Equal(t, serverErr(noNodeText("pve9")), err)
}

func TestNodeStatus_memoryGrowsWithRunningVMs(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	before, err := c.NodeStatus(t.Context(), "pve1")
	require.NoError(t, err)
	startVM(t, c, clk, newID)

	after, err := c.NodeStatus(t.Context(), "pve1")
	require.NoError(t, err)
	assert.Equal(t, before.Memory.Used+2<<30, after.Memory.Used)
	assert.Equal(t, "pve-manager/9.2.11/5d9b2f1c8a3e4076", after.PVEVersion)
}

func TestVersion_isPVE92(t *testing.T) {
	c, _ := newCluster(t)
	v, err := c.Version(t.Context())
	require.NoError(t, err)
	assert.Equal(t, pve.Version{Version: "9.2.11", Release: "9.2", RepoID: "5d9b2f1c8a3e4076"}, v)
}

func TestStorageContent_listsISOsWithTheirCreationTime(t *testing.T) {
	c, clk := newCluster(t)
	upid, err := c.UploadISO(t.Context(), "pve1", "local", "seed.iso", strings.NewReader("seed"), 4)
	require.NoError(t, err)
	uploaded := finish(t, c, clk, upid)
	clk.Advance(time.Hour)

	isos, err := c.StorageContent(t.Context(), "pve1", "local", "iso")

	require.NoError(t, err)
	assert.Equal(t, []pve.StorageVolume{{VolID: "local:iso/seed.iso", Content: "iso", Format: "iso", Size: 4, CTime: t0.Add(defaultTaskDurations["imgcopy"]).Unix()}}, isos)
	assert.Equal(t, "OK", uploaded.ExitStatus)
}

func TestStorageContent_filtersByContentType(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	isos, err := c.StorageContent(t.Context(), "pve1", "local-lvm", "iso")
	require.NoError(t, err)
	images, err := c.StorageContent(t.Context(), "pve1", "local-lvm", "images")
	require.NoError(t, err)

	assert.Empty(t, isos)
	require.NotEmpty(t, images)
	owners := map[int]bool{}
	for _, v := range images {
		assert.Equal(t, "images", v.Content, v.VolID)
		assert.NotZero(t, v.CTime, v.VolID)
		owners[v.VMID] = true
	}
	assert.Equal(t, map[int]bool{tmplID: true, newID: true}, owners, "the template's disks and the clone's")
}
