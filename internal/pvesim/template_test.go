package pvesim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestDefault_templateMatchesFixture(t *testing.T) {
	want := pve.VMConfig{}
	for key, value := range fixtureData(t, "vm_config_template") {
		if key != "digest" {
			want[key] = fmt.Sprint(value)
		}
	}
	opts := Default()
	require.Len(t, opts.VMs, 1)
	assert.Equal(t, VM{Node: "pve1", VMID: tmplID, Config: want}, opts.VMs[0])
}

func TestTemplate_diskCountShapesDrives(t *testing.T) {
	tests := []struct {
		disks int
		want  pve.VMConfig // the drives, and bios when set
	}{
		{1, pve.VMConfig{"scsi0": "local-lvm:base-9001-disk-0,size=3G"}},
		{2, pve.VMConfig{
			"bios":     "ovmf",
			"efidisk0": "local-lvm:base-9001-disk-0,efitype=4m,pre-enrolled-keys=0,size=4M",
			"scsi0":    "local-lvm:base-9001-disk-1,size=3G",
		}},
		{4, pve.VMConfig{
			"bios":     "ovmf",
			"efidisk0": "local-lvm:base-9001-disk-0,efitype=4m,pre-enrolled-keys=0,size=4M",
			"scsi0":    "local-lvm:base-9001-disk-1,size=3G",
			"scsi1":    "local-lvm:base-9001-disk-2,size=8G",
			"scsi2":    "local-lvm:base-9001-disk-3,size=8G",
		}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.disks), func(t *testing.T) {
			v := Template(9001, "pve2", tt.disks)
			got := pve.VMConfig{}
			for key, value := range v.Config {
				if isDiskKey(key) || key == "bios" {
					got[key] = value
				}
			}
			assert.Equal(t, tt.want, got)
			assert.Equal(t, "pve2", v.Node)
			assert.Equal(t, "1", v.Config["template"])
		})
	}
}

func TestTemplate_otherVMIDGetsOwnIdentity(t *testing.T) {
	def, other := Template(tmplID, "pve1", 2), Template(9001, "pve1", 2)
	for _, key := range []string{"net0", "smbios1", "vmgenid"} {
		assert.NotEqual(t, def.Config[key], other.Config[key], key)
	}
}

func TestTemplate_disksExistOnStorage(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.VMs = append(o.VMs, Template(9001, "pve2", 3)) })

	assert.Equal(t, []string{"local-lvm:base-9001-disk-0", "local-lvm:base-9001-disk-1", "local-lvm:base-9001-disk-2"}, volumesOf(c, 9001))
	for _, v := range c.Volumes() {
		if strings.HasPrefix(v.VolID, "local-lvm:base-9001-") {
			assert.Equal(t, "pve2", v.Node, v.VolID)
		}
	}
}

func TestTemplate_panicsOnImpossibleDiskCount(t *testing.T) {
	for _, disks := range []int{0, 33} {
		assert.Panics(t, func() { Template(9001, "pve1", disks) }, disks)
	}
	drives := slices.DeleteFunc(slices.Collect(maps.Keys(Template(9001, "pve1", 32).Config)), func(key string) bool {
		return !isDiskKey(key)
	})
	assert.Len(t, drives, 32, "efidisk0 and scsi0 to scsi30")
}
