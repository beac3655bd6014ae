package config

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolvePlacement_table(t *testing.T) {
	catalogue := Proxmox{
		Templates: map[string]Template{
			"debian13": {VMID: 9000},
			"alpine":   {Nodes: map[string]int{"pve1": 9101, "pve3": 9103}},
			"nowhere":  {Nodes: map[string]int{"pve9": 9109}},
		},
		MachineTypes: map[string]MachineType{
			"small": {Cores: 2, MemoryMiB: 2048, DiskGiB: 20},
			"large": {Cores: 8, MemoryMiB: 16384},
		},
	}
	oneNode, twoNodes, threeNodes := catalogue, catalogue, catalogue
	oneNode.Nodes = []string{"pve1"}
	twoNodes.Nodes = []string{"pve2", "pve1"}
	threeNodes.Nodes = []string{"pve3", "pve2", "pve1"}
	small := Placement{Cores: 2, MemoryMiB: 2048, DiskGiB: 20, MachineType: "small"}
	with := func(p Placement, change func(*Placement)) Placement {
		change(&p)
		return p
	}

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
			want: with(small, func(p *Placement) {
				p.Image, p.Node, p.TemplateVMID = "debian13", "pve1", 9000
				p.Candidates, p.TemplateOn = []string{"pve1"}, map[string]int{"pve1": 9000}
			}),
		},
		{
			name: "zone optional with one node and a template per node",
			cfg:  oneNode, image: "alpine", machineType: "small",
			want: with(small, func(p *Placement) {
				p.Image, p.Node, p.TemplateVMID = "alpine", "pve1", 9101
				p.Candidates, p.TemplateOn = []string{"pve1"}, map[string]int{"pve1": 9101}
			}),
		},
		{
			name: "zone names one of two nodes",
			cfg:  twoNodes, zone: "pve1", image: "debian13", machineType: "large",
			want: Placement{
				Node: "pve1", TemplateVMID: 9000, Cores: 8, MemoryMiB: 16384, MachineType: "large", Image: "debian13",
				Candidates: []string{"pve1"}, TemplateOn: map[string]int{"pve1": 9000},
			},
		},
		{
			name: "zone takes its own template of a per-node template",
			cfg:  threeNodes, zone: "pve3", image: "alpine", machineType: "small",
			want: with(small, func(p *Placement) {
				p.Image, p.Node, p.TemplateVMID = "alpine", "pve3", 9103
				p.Candidates, p.TemplateOn = []string{"pve3"}, map[string]int{"pve3": 9103}
			}),
		},
		{
			name: "no zone with several nodes lists every node for a cluster template",
			cfg:  threeNodes, image: "debian13", machineType: "small",
			want: with(small, func(p *Placement) {
				p.Image = "debian13"
				p.Candidates = []string{"pve1", "pve2", "pve3"}
				p.TemplateOn = map[string]int{"pve1": 9000, "pve2": 9000, "pve3": 9000}
			}),
		},
		{
			name: "no zone with several nodes lists only the nodes of a per-node template",
			cfg:  threeNodes, image: "alpine", machineType: "small",
			want: with(small, func(p *Placement) {
				p.Image = "alpine"
				p.Candidates = []string{"pve1", "pve3"}
				p.TemplateOn = map[string]int{"pve1": 9101, "pve3": 9103}
			}),
		},
		{
			name: "no zone with two nodes and a template on one of them still leaves the node to choose",
			cfg:  twoNodes, image: "alpine", machineType: "small",
			want: with(small, func(p *Placement) {
				p.Image, p.Candidates, p.TemplateOn = "alpine", []string{"pve1"}, map[string]int{"pve1": 9101}
			}),
		},
		{
			name: "zone without a template of a per-node image",
			cfg:  threeNodes, zone: "pve2", image: "alpine", machineType: "small",
			wantErr: []string{`zone: "pve2" has no template of image "alpine" (nodes with one: pve1, pve3)`},
		},
		{
			name: "image whose templates are on no configured node",
			cfg:  twoNodes, image: "nowhere", machineType: "small",
			wantErr: []string{`image: "nowhere" has a template on no configured node (nodes: pve1, pve2)`},
		},
		{
			name: "unknown zone",
			cfg:  oneNode, zone: "pve9", image: "debian13", machineType: "small",
			wantErr: []string{`zone: "pve9" is not a configured node (choices: pve1)`},
		},
		{
			name: "unknown image",
			cfg:  oneNode, image: "ubuntu", machineType: "small",
			wantErr: []string{`image: "ubuntu" is not a configured template (choices: alpine, debian13, nowhere)`},
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
		{
			name: "zone without the template reported with an unknown machine type",
			cfg:  threeNodes, zone: "pve2", image: "alpine", machineType: "huge",
			wantErr: []string{`zone: "pve2" has no template`, `machineType: "huge"`},
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

func TestTemplateOn_table(t *testing.T) {
	perNode := Template{Nodes: map[string]int{"pve1": 9001, "pve2": 9002}}
	tests := []struct {
		name     string
		template Template
		node     string
		wantVMID int
		wantOK   bool
	}{
		{name: "cluster template on any node", template: Template{VMID: 9000}, node: "pve7", wantVMID: 9000, wantOK: true},
		{name: "per-node template on a listed node", template: perNode, node: "pve2", wantVMID: 9002, wantOK: true},
		{name: "per-node template on an unlisted node", template: perNode, node: "pve3"},
		{name: "zero template", template: Template{}, node: "pve1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmid, ok := tt.template.On(tt.node)
			assert.Equal(t, tt.wantVMID, vmid)
			assert.Equal(t, tt.wantOK, ok)
		})
	}
}

func unplaced() Placement {
	return Placement{
		Cores: 2, MemoryMiB: 2048, MachineType: "small", Image: "alpine",
		Candidates: []string{"pve1", "pve3"}, TemplateOn: map[string]int{"pve1": 9101, "pve3": 9103},
	}
}

func TestPlacementWithNode_setsNodeAndItsTemplate(t *testing.T) {
	got, err := unplaced().WithNode("pve3")
	require.NoError(t, err)
	want := unplaced()
	want.Node, want.TemplateVMID = "pve3", 9103
	assert.Equal(t, want, got)
}

func TestPlacementWithNode_refusesANodeThatIsNotACandidate(t *testing.T) {
	_, err := unplaced().WithNode("pve2")
	require.Error(t, err)
	assert.Equal(t, `node "pve2" is not a candidate for image "alpine" (candidates: pve1, pve3)`, err.Error())
}

func TestPlacementWithNode_leavesTheOriginalAlone(t *testing.T) {
	p := unplaced()
	got, err := p.WithNode("pve1")
	require.NoError(t, err)
	got.Candidates[0], got.TemplateOn["pve1"] = "changed", 1
	assert.Equal(t, unplaced(), p)
}

// Workflow histories hold placements as JSON: the names of the fields must never change.
func TestPlacementJSON_fieldNames(t *testing.T) {
	p := Placement{
		Node: "pve1", TemplateVMID: 9000, Cores: 2, MemoryMiB: 2048, DiskGiB: 20, MachineType: "small", Image: "debian13",
		Candidates: []string{"pve1"}, TemplateOn: map[string]int{"pve1": 9000},
	}
	data, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, `{"node":"pve1","templateVMID":9000,"cores":2,"memoryMiB":2048,"diskGiB":20,"machineType":"small",`+
		`"image":"debian13","candidates":["pve1"],"templateOn":{"pve1":9000}}`, string(data))
}

func TestPlacementJSON_recordedBeforeCandidatesDecodes(t *testing.T) {
	var p Placement
	require.NoError(t, json.Unmarshal([]byte(`{"node":"pve1","templateVMID":9000,"cores":2,"memoryMiB":2048,"machineType":"small","image":"debian13"}`), &p))
	assert.Equal(t, Placement{Node: "pve1", TemplateVMID: 9000, Cores: 2, MemoryMiB: 2048, MachineType: "small", Image: "debian13"}, p)
}
