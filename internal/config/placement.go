package config

import (
	"errors"
	"maps"
	"slices"
	"strings"
)

// Placement is where a proxy VM goes and what it is made of, resolved from a request against
// the configuration.
type Placement struct {
	Node         string `json:"node"`
	TemplateVMID int    `json:"templateVMID"`
	Cores        int    `json:"cores"`
	MemoryMiB    int64  `json:"memoryMiB"`
	DiskGiB      int64  `json:"diskGiB,omitempty"`
	MachineType  string `json:"machineType"`
	Image        string `json:"image"`
}

// ResolvePlacement resolves a request's zone (a node, optional when only one is configured),
// image (a template) and machine type. A region is not asked for: one PVE cluster is one region.
// The error reports every unknown value with the valid choices.
func (c Proxmox) ResolvePlacement(zone, image, machineType string) (Placement, error) {
	var p problems
	pl := Placement{Image: image, MachineType: machineType}
	switch {
	case zone == "" && len(c.Nodes) == 1:
		pl.Node = c.Nodes[0]
	case zone == "":
		p.add("zone", "must name a node, as %d are configured (choices: %s)", len(c.Nodes), choices(c.Nodes))
	case slices.Contains(c.Nodes, zone):
		pl.Node = zone
	default:
		p.add("zone", "%q is not a configured node (choices: %s)", zone, choices(c.Nodes))
	}
	if t, ok := c.Templates[image]; ok {
		pl.TemplateVMID = t.VMID
	} else {
		p.add("image", "%q is not a configured template (choices: %s)", image, choices(slices.Collect(maps.Keys(c.Templates))))
	}
	if mt, ok := c.MachineTypes[machineType]; ok {
		pl.Cores, pl.MemoryMiB, pl.DiskGiB = mt.Cores, mt.MemoryMiB, mt.DiskGiB
	} else {
		p.add("machineType", "%q is not a configured machine type (choices: %s)", machineType, choices(slices.Collect(maps.Keys(c.MachineTypes))))
	}
	if err := errors.Join(p...); err != nil {
		return Placement{}, err
	}
	return pl, nil
}

func choices(names []string) string {
	return strings.Join(slices.Sorted(slices.Values(names)), ", ")
}
