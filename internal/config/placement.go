package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Placement is where a proxy VM goes and what it is made of, resolved from a request against
// the configuration. Workflow histories record it as JSON, so its fields are only ever added to.
type Placement struct {
	// Node is the node the proxy goes on; empty until one of Candidates is chosen (WithNode).
	Node string `json:"node"`
	// TemplateVMID is Node's template; 0 while Node is empty.
	TemplateVMID int    `json:"templateVMID"`
	Cores        int    `json:"cores"`
	MemoryMiB    int64  `json:"memoryMiB"`
	DiskGiB      int64  `json:"diskGiB,omitempty"`
	MachineType  string `json:"machineType"`
	Image        string `json:"image"`
	// Candidates are the nodes the proxy may go on, sorted: Node alone once it is known, else
	// every configured node with a template of Image.
	Candidates []string `json:"candidates,omitempty"`
	// TemplateOn is the template each candidate clones from.
	TemplateOn map[string]int `json:"templateOn,omitempty"`
}

// On is the template a proxy on node is cloned from, and whether there is one: with a template
// per node, node's own; with one for the cluster, that one, whatever the node.
func (t Template) On(node string) (vmid int, ok bool) {
	if len(t.Nodes) > 0 {
		vmid, ok = t.Nodes[node]
		return vmid, ok
	}
	return t.VMID, t.VMID != 0
}

// ResolvePlacement resolves a request's zone (a node), image (a template) and machine type. A
// region is not asked for: one PVE cluster is one region.
//
// A zone places the proxy on that node, which needs a template of the image. Without a zone, a
// single configured node is the node; with several, Node is left empty and Candidates lists the
// nodes with a template of the image, for the caller to choose from (ChooseNode, WithNode).
// The error reports every problem at once, with the valid choices.
func (c Proxmox) ResolvePlacement(zone, image, machineType string) (Placement, error) {
	var p problems
	pl := Placement{Image: image, MachineType: machineType}
	zoneKnown := zone == "" || slices.Contains(c.Nodes, zone)
	if !zoneKnown {
		p.add("zone", "%q is not a configured node (choices: %s)", zone, choices(c.Nodes))
	}
	t, imageKnown := c.Templates[image]
	if !imageKnown {
		p.add("image", "%q is not a configured template (choices: %s)", image, choices(slices.Collect(maps.Keys(c.Templates))))
	}
	if zoneKnown && imageKnown {
		with := nodesWith(t, c.Nodes)
		switch {
		case zone != "" && !slices.Contains(with, zone):
			p.add("zone", "%q has no template of image %q (nodes with one: %s)", zone, image, orNone(with))
		case len(with) == 0:
			p.add("image", "%q has a template on no configured node (nodes: %s)", image, orNone(c.Nodes))
		case zone != "":
			pl.Candidates = []string{zone}
		default:
			pl.Candidates = with
		}
		if len(pl.Candidates) > 0 {
			pl.TemplateOn = make(map[string]int, len(pl.Candidates))
			for _, n := range pl.Candidates {
				pl.TemplateOn[n], _ = t.On(n)
			}
		}
		switch {
		case zone != "":
			pl.Node = zone
		case len(c.Nodes) == 1:
			pl.Node = c.Nodes[0]
		}
		pl.TemplateVMID = pl.TemplateOn[pl.Node]
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

// WithNode is p placed on node, one of its Candidates: Node and TemplateVMID set, the rest kept.
func (p Placement) WithNode(node string) (Placement, error) {
	vmid, ok := p.TemplateOn[node]
	if !ok || !slices.Contains(p.Candidates, node) {
		return Placement{}, fmt.Errorf("node %q is not a candidate for image %q (candidates: %s)", node, p.Image, orNone(p.Candidates))
	}
	p.Node, p.TemplateVMID = node, vmid
	p.Candidates, p.TemplateOn = slices.Clone(p.Candidates), maps.Clone(p.TemplateOn)
	return p, nil
}

// nodesWith is the configured nodes that have a template t, sorted.
func nodesWith(t Template, nodes []string) []string {
	var with []string
	for _, n := range nodes {
		if _, ok := t.On(n); ok {
			with = append(with, n)
		}
	}
	slices.Sort(with)
	return with
}

func choices(names []string) string {
	return strings.Join(slices.Sorted(slices.Values(names)), ", ")
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return choices(names)
}

// TemplateVMIDs are the templates p may clone from, its node's and every candidate's, sorted.
func (p Placement) TemplateVMIDs() []int {
	var vmids []int
	if p.TemplateVMID != 0 {
		vmids = append(vmids, p.TemplateVMID)
	}
	for _, node := range p.Candidates {
		if vmid, ok := p.TemplateOn[node]; ok {
			vmids = append(vmids, vmid)
		}
	}
	slices.Sort(vmids)
	return slices.Compact(vmids)
}
