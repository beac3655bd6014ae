package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestBootDisk_table(t *testing.T) {
	const (
		disk  = "local-lvm:vm-183951-disk-0,iothread=1,size=20G"
		cdrom = "local:iso/proxy-qpm6fsvtzhu6lvk3-seed.iso,media=cdrom"
	)
	tests := []struct {
		name    string
		cfg     pve.VMConfig
		want    string
		wantErr string
	}{
		{
			name: "boot order passes over the cdrom and the NIC",
			cfg:  pve.VMConfig{"boot": "order=ide2;net0;scsi0", "ide2": cdrom, "net0": "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0", "scsi0": disk},
			want: "scsi0",
		},
		{
			name: "boot order passes over keys the config lacks",
			cfg:  pve.VMConfig{"boot": "order=scsi0;virtio1", "virtio1": disk},
			want: "virtio1",
		},
		{
			name: "boot order passes over devices that are not disks",
			cfg:  pve.VMConfig{"boot": "order=hostpci0;sata1", "hostpci0": "0000:01:00.0", "sata1": disk},
			want: "sata1",
		},
		{
			name: "legacy bootdisk",
			cfg:  pve.VMConfig{"boot": "cdn", "bootdisk": "virtio1", "virtio1": disk, "scsi0": disk},
			want: "virtio1",
		},
		{
			name: "boot order without a disk falls back to bootdisk",
			cfg:  pve.VMConfig{"boot": "order=net0", "net0": "virtio=BC:24:11:2E:C5:4A", "bootdisk": "scsi1", "scsi1": disk},
			want: "scsi1",
		},
		{name: "first of scsi0", cfg: pve.VMConfig{"scsi0": disk, "virtio0": disk}, want: "scsi0"},
		{name: "then virtio0", cfg: pve.VMConfig{"virtio0": disk, "sata0": disk}, want: "virtio0"},
		{name: "then sata0", cfg: pve.VMConfig{"sata0": disk, "ide0": disk}, want: "sata0"},
		{name: "then ide0", cfg: pve.VMConfig{"ide0": disk}, want: "ide0"},
		{name: "fallback passes over a cdrom", cfg: pve.VMConfig{"ide0": cdrom, "scsi1": disk}, wantErr: "no boot disk"},
		{
			name:    "no disk",
			cfg:     pve.VMConfig{"boot": "order=ide2;net0", "ide2": cdrom, "net0": "virtio=BC:24:11:2E:C5:4A"},
			wantErr: `no boot disk: boot order "ide2;net0" names none, and the VM has none of scsi0, virtio0, sata0, ide0`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BootDisk(tt.cfg)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDiskSizeGiB_units(t *testing.T) {
	tests := []struct {
		disk string
		want float64
	}{
		{"local-lvm:vm-100-disk-0,size=20G", 20},
		{"local-lvm:vm-100-disk-0,size=512M", 0.5},
		{"local-lvm:vm-100-disk-0,size=1T", 1024},
		{"local-lvm:vm-100-disk-0,size=1048576K", 1},
		{"local-lvm:vm-100-disk-0,size=21474836480", 20},
		{"local-lvm:vm-100-disk-0,size=1.5G,iothread=1", 1.5},
	}
	for _, tt := range tests {
		got, err := DiskSizeGiB(tt.disk)
		require.NoError(t, err, tt.disk)
		assert.Equal(t, tt.want, got, tt.disk)
	}
}

func TestNeedsResize_table(t *testing.T) {
	tests := []struct {
		name    string
		disk    string
		wantGiB int64
		want    bool
		wantErr string
	}{
		{name: "smaller", disk: "local-lvm:vm-100-disk-0,size=2G", wantGiB: 20, want: true},
		{name: "just below", disk: "local-lvm:vm-100-disk-0,size=20479M", wantGiB: 20, want: true},
		{name: "equal", disk: "local-lvm:vm-100-disk-0,size=20G", wantGiB: 20, want: false},
		{name: "equal in another unit", disk: "local-lvm:vm-100-disk-0,size=20480M", wantGiB: 20, want: false},
		{name: "larger", disk: "local-lvm:vm-100-disk-0,size=1T", wantGiB: 100, want: false},
		{name: "no target keeps the template's size", disk: "garbage", wantGiB: 0, want: false},
		{name: "no size", disk: "local-lvm:vm-100-disk-0,iothread=1", wantGiB: 20, wantErr: "disk has no size"},
		{name: "unknown unit", disk: "local-lvm:vm-100-disk-0,size=20X", wantGiB: 20, wantErr: `disk size "20X" is not a size`},
		{name: "not a number", disk: "local-lvm:vm-100-disk-0,size=NaN", wantGiB: 20, wantErr: `disk size "NaN" is not a size`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NeedsResize(tt.disk, tt.wantGiB)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestRewriteNet0_keepsMAC(t *testing.T) {
	tests := []struct {
		name, net0, want string
	}{
		{
			name: "replaces the bridge in place",
			net0: "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,firewall=1",
			want: "virtio=BC:24:11:2E:C5:4A,bridge=vmbr1,firewall=1",
		},
		{
			name: "inserts a missing bridge after the model",
			net0: "virtio=BC:24:11:2E:C5:4A,firewall=1,tag=20",
			want: "virtio=BC:24:11:2E:C5:4A,bridge=vmbr1,firewall=1,tag=20",
		},
		{
			name: "long form",
			net0: "model=virtio,macaddr=BC:24:11:2E:C5:4A,bridge=vmbr0,mtu=1400",
			want: "model=virtio,macaddr=BC:24:11:2E:C5:4A,bridge=vmbr1,mtu=1400",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RewriteNet0(tt.net0, "vmbr1")
			assert.Equal(t, tt.want, got)
			assert.Equal(t, "BC:24:11:2E:C5:4A", MACFromNet(got))
		})
	}
}

func TestRewriteNet0_noBridgeLeavesNet0(t *testing.T) {
	net0 := "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,firewall=1"
	assert.Equal(t, net0, RewriteNet0(net0, ""))
	assert.Equal(t, "", RewriteNet0("", "vmbr1"), "a VM without net0 gets no half NIC")
}

func TestMACFromNet_table(t *testing.T) {
	tests := []struct {
		net, want string
	}{
		{"virtio=BC:24:11:2E:C5:4A,bridge=vmbr0", "BC:24:11:2E:C5:4A"},
		{"e1000=bc:24:11:2e:c5:4a", "bc:24:11:2e:c5:4a"},
		{"model=virtio,bridge=vmbr0,macaddr=BC:24:11:2E:C5:4A", "BC:24:11:2E:C5:4A"},
		{"model=virtio,bridge=vmbr0", ""},
		{"virtio=BC:24:11:2E:C5,bridge=vmbr0", ""},
		{"", ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, MACFromNet(tt.net), "net %q", tt.net)
	}
}

func TestISOVolumes_areTheISOsOfEveryDriveAndNothingElse(t *testing.T) {
	cfg := pve.VMConfig{
		"ide2":     "local:iso/pveflow-seed-abc.iso,media=cdrom",
		"sata5":    "nfs:iso/debian.iso,media=cdrom",
		"scsi0":    "local-lvm:vm-100-disk-0,size=20G",
		"ide0":     "none,media=cdrom",
		"net0":     "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0",
		"cicustom": "user=local:snippets/u.yaml",
	}

	assert.Equal(t, []string{"local:iso/pveflow-seed-abc.iso", "nfs:iso/debian.iso"}, ISOVolumes(cfg))
}
