package pvesim

import (
	"maps"
	"slices"
)

// State is the cluster as a chaos run's checker reads it afterwards (docs/reliability.md):
// every VM, every volume, the clone log, and the random faults injected.
type State struct {
	VMs []VM `json:"vms"`
	// Volumes are the disk images and ISOs, without an ISO's data.
	Volumes []Volume   `json:"volumes"`
	Clones  []CloneRun `json:"clones"`
	// MaxConcurrentClones is MaxConcurrentClones of each node's storages, keyed
	// "<node>/<storage>".
	MaxConcurrentClones map[string]int `json:"maxConcurrentClones"`
	// Calls counts the API calls made; Faults the random faults (Options.FaultRate) among them,
	// by kind.
	Calls  int            `json:"calls"`
	Faults map[string]int `json:"faults"`
}

// State returns the cluster's State.
func (c *Cluster) State() State {
	st := State{
		VMs:                 c.VMs(),
		Volumes:             c.Volumes(),
		Clones:              c.CloneRuns(),
		MaxConcurrentClones: make(map[string]int),
		Faults:              make(map[string]int),
	}
	for i := range st.Volumes {
		st.Volumes[i].Data = nil
	}
	c.mu.Lock()
	nodes := make(map[string][]string, len(c.nodes))
	for name, nd := range c.nodes {
		nodes[name] = slices.Collect(maps.Keys(nd.storages))
	}
	st.Calls = len(c.faults.calls)
	for f, n := range c.faults.chaos {
		if n > 0 {
			st.Faults[chaosNames[f]] = n
		}
	}
	c.mu.Unlock()
	for node, storages := range nodes {
		for _, id := range storages {
			st.MaxConcurrentClones[node+"/"+id] = c.MaxConcurrentClones(node, id)
		}
	}
	return st
}
