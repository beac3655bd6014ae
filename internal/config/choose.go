package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// NodeFacts is what a workflow learnt from Proxmox about one candidate node (Placement's
// Candidates) before choosing where a proxy goes.
type NodeFacts struct {
	Node   string `json:"node"`
	Online bool   `json:"online"`
	// MemTotal and MemUsed are the node's memory in bytes, as its status reports them.
	MemTotal int64 `json:"memTotal"`
	MemUsed  int64 `json:"memUsed"`
	// ISOStorage is whether the ISO storage (proxmox.isoStorage) is active on the node.
	ISOStorage bool `json:"isoStorage"`
	// TemplateHere is whether the node's template is on the node itself.
	TemplateHere bool `json:"templateHere"`
	// CloneableTo is whether a template on another node can be cloned to this one: the clone's
	// storage is shared.
	CloneableTo bool `json:"cloneableTo"`
	// InMaintenance is whether the node is in PVE's HA maintenance mode, or entering it: the HA
	// manager is moving guests off it, and an operator is about to take it down.
	InMaintenance bool `json:"inMaintenance,omitempty"`
}

// Choice is the node ChooseNode chose, with a one-line reason for a status or a UI.
type Choice struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// ErrNoNode is wrapped by ChooseNode's error when no node can take the proxy. A workflow
// reports it as Permanent: the facts will not change by retrying at once.
var ErrNoNode = errors.New("no node can take the proxy")

const gib = 1 << 30

// ChooseNode chooses the node for a proxy of memoryMiB from facts. A node is eligible when it is
// online, not in HA maintenance mode, has the ISO storage, and has its template or can be
// cloned to from one elsewhere. Of
// those, the one with the most memory free after this proxy wins (MemTotal - MemUsed -
// memoryMiB), ties going to the first node by name. Memory does not exclude a node, as PVE may
// overcommit it; it only ranks. With no eligible node the error, wrapping ErrNoNode, says why
// each node was skipped.
func ChooseNode(facts []NodeFacts, memoryMiB int64) (Choice, error) {
	type ranked struct {
		node string
		free int64
	}
	var eligible []ranked
	var skipped []string
	for _, f := range slices.SortedFunc(slices.Values(facts), func(a, b NodeFacts) int { return cmp.Compare(a.Node, b.Node) }) {
		if why := whySkipped(f); why != "" {
			skipped = append(skipped, f.Node+" "+why)
			continue
		}
		eligible = append(eligible, ranked{f.Node, f.MemTotal - f.MemUsed - memoryMiB<<20})
	}
	if len(eligible) == 0 {
		if len(skipped) == 0 {
			return Choice{}, fmt.Errorf("%w: no candidate nodes", ErrNoNode)
		}
		return Choice{}, fmt.Errorf("%w: %s", ErrNoNode, strings.Join(skipped, "; "))
	}
	slices.SortStableFunc(eligible, func(a, b ranked) int { return cmp.Compare(b.free, a.free) })
	parts := []string{fmt.Sprintf("%s: %s free after this proxy", eligible[0].node, gibString(eligible[0].free))}
	for _, r := range eligible[1:] {
		parts = append(parts, r.node+" "+gibString(r.free))
	}
	return Choice{Node: eligible[0].node, Reason: strings.Join(append(parts, skipped...), "; ")}, nil
}

// whySkipped is why f's node cannot take a proxy, or "" when it can.
func whySkipped(f NodeFacts) string {
	if !f.Online {
		return "offline"
	}
	if f.InMaintenance {
		return "in HA maintenance mode"
	}
	var why []string
	if !f.ISOStorage {
		why = append(why, "ISO storage not active")
	}
	if !f.TemplateHere && !f.CloneableTo {
		why = append(why, "no template it can be cloned from")
	}
	return strings.Join(why, ", ")
}

func gibString(bytes int64) string {
	return fmt.Sprintf("%.1f GiB", float64(bytes)/gib)
}
