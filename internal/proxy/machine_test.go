package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
)

func TestMachineOf_table(t *testing.T) {
	const disk = "local-lvm:vm-183951-disk-0,iothread=1,size=20G"
	tests := []struct {
		name    string
		cfg     pve.VMConfig
		want    Machine
		wantErr string
	}{
		{
			name: "as pveflow configures it",
			cfg:  pve.VMConfig{"cores": "4", "memory": "4096", "boot": "order=scsi0", "scsi0": disk},
			want: Machine{Cores: 4, MemoryMiB: 4096, BootDisk: "scsi0", DiskGiB: 20},
		},
		{
			name: "memory as a property string",
			cfg:  pve.VMConfig{"cores": "2", "memory": "current=2048", "scsi0": disk},
			want: Machine{Cores: 2, MemoryMiB: 2048, BootDisk: "scsi0", DiskGiB: 20},
		},
		{
			name: "cores and memory left out are PVE's defaults",
			cfg:  pve.VMConfig{"virtio0": disk},
			want: Machine{Cores: 1, MemoryMiB: 512, BootDisk: "virtio0", DiskGiB: 20},
		},
		{
			name: "a disk size in MiB is rounded down to GiB",
			cfg:  pve.VMConfig{"cores": "2", "memory": "2048", "scsi0": "local-lvm:vm-1-disk-0,size=10752M"},
			want: Machine{Cores: 2, MemoryMiB: 2048, BootDisk: "scsi0", DiskGiB: 10},
		},
		{
			name:    "unreadable cores and memory stay unknown",
			cfg:     pve.VMConfig{"cores": "many", "memory": "lots", "scsi0": disk},
			want:    Machine{BootDisk: "scsi0", DiskGiB: 20},
			wantErr: `cores "many" is not a number of cores` + "\n" + `memory "lots" is not a size in MiB`,
		},
		{
			name:    "a disk without a size",
			cfg:     pve.VMConfig{"cores": "2", "memory": "2048", "scsi0": "local-lvm:vm-1-disk-0"},
			want:    Machine{Cores: 2, MemoryMiB: 2048, BootDisk: "scsi0"},
			wantErr: "boot disk scsi0: disk has no size",
		},
		{
			name:    "no boot disk",
			cfg:     pve.VMConfig{"cores": "2", "memory": "2048"},
			want:    Machine{Cores: 2, MemoryMiB: 2048},
			wantErr: "no boot disk",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MachineOf(tt.cfg)
			assert.Equal(t, tt.want, got)
			if tt.wantErr == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tt.wantErr)
			}
		})
	}
}

func TestMachine_drift(t *testing.T) {
	spec := config.Placement{Cores: 4, MemoryMiB: 4096, DiskGiB: 20}
	tests := []struct {
		name    string
		machine Machine
		spec    config.Placement
		want    []string
	}{
		{name: "matches", machine: Machine{Cores: 4, MemoryMiB: 4096, BootDisk: "scsi0", DiskGiB: 20}, spec: spec},
		{
			name:    "every part differs",
			machine: Machine{Cores: 2, MemoryMiB: 2048, BootDisk: "scsi0", DiskGiB: 10},
			spec:    spec,
			want:    []string{"cores 2, spec 4", "memory 2048 MiB, spec 4096 MiB", "disk scsi0 10G, spec 20G"},
		},
		{
			name:    "more cores and memory than the spec are drift",
			machine: Machine{Cores: 8, MemoryMiB: 8192, BootDisk: "scsi0", DiskGiB: 20},
			spec:    spec,
			want:    []string{"cores 8, spec 4", "memory 8192 MiB, spec 4096 MiB"},
		},
		{name: "a larger disk is not drift: PVE cannot shrink it", machine: Machine{Cores: 4, MemoryMiB: 4096, BootDisk: "scsi0", DiskGiB: 40}, spec: spec},
		{
			name:    "a spec that keeps the template's disk",
			machine: Machine{Cores: 4, MemoryMiB: 4096, BootDisk: "scsi0", DiskGiB: 3},
			spec:    config.Placement{Cores: 4, MemoryMiB: 4096},
		},
		{name: "what the machine does not know is passed over", machine: Machine{}, spec: spec},
		{
			name:    "a disk whose key is unknown",
			machine: Machine{Cores: 4, MemoryMiB: 4096, DiskGiB: 10},
			spec:    spec,
			want:    []string{"disk 10G, spec 20G"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, d := range tt.machine.Drift(tt.spec) {
				got = append(got, d.String())
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDifference_change(t *testing.T) {
	tests := []struct {
		d    Difference
		want string
	}{
		{Difference{What: DiffCores, Have: 2, Want: 4}, "cores 2 -> 4"},
		{Difference{What: DiffMemory, Have: 2048, Want: 4096}, "memory 2048 -> 4096 MiB"},
		{Difference{What: DiffDisk, Have: 10, Want: 20, Disk: "scsi0"}, "disk scsi0 10G -> 20G"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.d.Change())
		})
	}
}
