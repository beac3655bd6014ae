package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolvePlacement_table(t *testing.T) {
	catalogue := Proxmox{
		Templates: map[string]Template{"debian13": {VMID: 9000}, "alpine": {VMID: 9001}},
		MachineTypes: map[string]MachineType{
			"small": {Cores: 2, MemoryMiB: 2048, DiskGiB: 20},
			"large": {Cores: 8, MemoryMiB: 16384},
		},
	}
	oneNode, twoNodes := catalogue, catalogue
	oneNode.Nodes = []string{"pve1"}
	twoNodes.Nodes = []string{"pve2", "pve1"}

	tests := []struct {
		name                     string
		cfg                      Proxmox
		zone, image, machineType string
		want                     Placement
		wantErr                  []string
	}{
		{
			name: "zone optional with one node",
			cfg:  oneNode, image: "debian13", machineType: "small",
			want: Placement{Node: "pve1", TemplateVMID: 9000, Cores: 2, MemoryMiB: 2048, DiskGiB: 20, MachineType: "small", Image: "debian13"},
		},
		{
			name: "zone names one of two nodes",
			cfg:  twoNodes, zone: "pve1", image: "alpine", machineType: "large",
			want: Placement{Node: "pve1", TemplateVMID: 9001, Cores: 8, MemoryMiB: 16384, MachineType: "large", Image: "alpine"},
		},
		{
			name: "zone required with two nodes",
			cfg:  twoNodes, image: "debian13", machineType: "small",
			wantErr: []string{"zone: must name a node, as 2 are configured (choices: pve1, pve2)"},
		},
		{
			name: "unknown zone",
			cfg:  oneNode, zone: "pve9", image: "debian13", machineType: "small",
			wantErr: []string{`zone: "pve9" is not a configured node (choices: pve1)`},
		},
		{
			name: "unknown image",
			cfg:  oneNode, image: "ubuntu", machineType: "small",
			wantErr: []string{`image: "ubuntu" is not a configured template (choices: alpine, debian13)`},
		},
		{
			name: "unknown machine type",
			cfg:  oneNode, image: "debian13", machineType: "huge",
			wantErr: []string{`machineType: "huge" is not a configured machine type (choices: large, small)`},
		},
		{
			name: "every unknown value reported",
			cfg:  twoNodes, zone: "pve9", image: "ubuntu", machineType: "huge",
			wantErr: []string{`zone: "pve9"`, `image: "ubuntu"`, `machineType: "huge"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.ResolvePlacement(tt.zone, tt.image, tt.machineType)
			if tt.wantErr != nil {
				require.Error(t, err)
				for _, want := range tt.wantErr {
					assert.Contains(t, err.Error(), want)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
