package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChooseNode_table(t *testing.T) {
	const g = int64(1) << 30
	// ok is a node that can take a proxy, with used bytes of 64 GiB in use.
	ok := func(node string, used int64) NodeFacts {
		return NodeFacts{Node: node, Online: true, MemTotal: 64 * g, MemUsed: used, ISOStorage: true, TemplateHere: true}
	}
	with := func(f NodeFacts, change func(*NodeFacts)) NodeFacts {
		change(&f)
		return f
	}

	tests := []struct {
		name       string
		facts      []NodeFacts
		memoryMiB  int64
		wantNode   string
		wantReason string
	}{
		{
			name:       "the emptiest eligible node wins",
			facts:      []NodeFacts{ok("pve1", 30*g), ok("pve2", 20*g)},
			memoryMiB:  2048,
			wantNode:   "pve2",
			wantReason: "pve2: 42.0 GiB free after this proxy; pve1 32.0 GiB",
		},
		{
			name: "a node without the template is skipped",
			facts: []NodeFacts{
				with(ok("pve1", 0), func(f *NodeFacts) { f.TemplateHere = false }),
				ok("pve2", 20*g),
			},
			memoryMiB:  2048,
			wantNode:   "pve2",
			wantReason: "pve2: 42.0 GiB free after this proxy; pve1 no template it can be cloned from",
		},
		{
			name: "a node the template can be cloned to is eligible",
			facts: []NodeFacts{
				with(ok("pve1", 0), func(f *NodeFacts) { f.TemplateHere, f.CloneableTo = false, true }),
				ok("pve2", 20*g),
			},
			memoryMiB:  2048,
			wantNode:   "pve1",
			wantReason: "pve1: 62.0 GiB free after this proxy; pve2 42.0 GiB",
		},
		{
			name: "a node in HA maintenance mode is skipped, however empty",
			facts: []NodeFacts{
				with(ok("pve1", 0), func(f *NodeFacts) { f.InMaintenance = true }),
				ok("pve2", 20*g),
			},
			memoryMiB:  2048,
			wantNode:   "pve2",
			wantReason: "pve2: 42.0 GiB free after this proxy; pve1 in HA maintenance mode",
		},
		{
			name: "an offline node is skipped",
			facts: []NodeFacts{
				{Node: "pve1"},
				ok("pve2", 20*g),
			},
			memoryMiB:  2048,
			wantNode:   "pve2",
			wantReason: "pve2: 42.0 GiB free after this proxy; pve1 offline",
		},
		{
			name: "a node without the ISO storage is skipped",
			facts: []NodeFacts{
				with(ok("pve1", 0), func(f *NodeFacts) { f.ISOStorage = false }),
				ok("pve2", 20*g),
			},
			memoryMiB:  2048,
			wantNode:   "pve2",
			wantReason: "pve2: 42.0 GiB free after this proxy; pve1 ISO storage not active",
		},
		{
			name:       "a tie goes to the first node by name",
			facts:      []NodeFacts{ok("pve2", 20*g), ok("pve1", 20*g)},
			memoryMiB:  2048,
			wantNode:   "pve1",
			wantReason: "pve1: 42.0 GiB free after this proxy; pve2 42.0 GiB",
		},
		{
			name: "the reason ranks the eligible nodes, then gives the skipped",
			facts: []NodeFacts{
				{Node: "pve3"},
				ok("pve1", 32*g+512<<20),
				ok("pve2", 20*g+512<<20),
			},
			memoryMiB:  2048,
			wantNode:   "pve2",
			wantReason: "pve2: 41.5 GiB free after this proxy; pve1 29.5 GiB; pve3 offline",
		},
		{
			name:       "a node short of memory still ranks",
			facts:      []NodeFacts{ok("pve1", 63*g)},
			memoryMiB:  2048,
			wantNode:   "pve1",
			wantReason: "pve1: -1.0 GiB free after this proxy",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ChooseNode(tt.facts, tt.memoryMiB)
			require.NoError(t, err)
			assert.Equal(t, Choice{Node: tt.wantNode, Reason: tt.wantReason}, got)
		})
	}
}

func TestChooseNode_errors(t *testing.T) {
	tests := []struct {
		name    string
		facts   []NodeFacts
		wantErr string
	}{
		{
			name: "no eligible node says why each was skipped",
			facts: []NodeFacts{
				{Node: "pve2", Online: true, MemTotal: 1 << 36},
				{Node: "pve1"},
				{Node: "pve3", Online: true, MemTotal: 1 << 36, ISOStorage: true},
			},
			wantErr: "no node can take the proxy: pve1 offline; pve2 ISO storage not active, no template it can be cloned from; " +
				"pve3 no template it can be cloned from",
		},
		{
			name:    "no facts",
			wantErr: "no node can take the proxy: no candidate nodes",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ChooseNode(tt.facts, 2048)
			require.ErrorIs(t, err, ErrNoNode)
			assert.Equal(t, tt.wantErr, err.Error())
		})
	}
}
