package pvesim

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"time"
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
	// Guests are what each VM's guest runs with, by VMID: what no config shows.
	Guests map[int]Guest `json:"guests"`
	// Pace is how long the cluster's tasks and guests' boots take (Options.TaskDurations and
	// Options.AgentBootDelay): what a benchmark's floor is made of.
	Pace Pace `json:"pace"`
}

// Pace is how long a cluster's tasks take, by type, and how long a started guest runs before
// its agent answers.
type Pace struct {
	TaskDurations  map[string]time.Duration `json:"taskDurations"`
	AgentBootDelay time.Duration            `json:"agentBootDelay"`
}

// ProxyFloor is the least one proxy's create and delete can take at this pace, its task times
// alone, with no time of pveflow's in it: the tasks they wait for, one after another, and the
// guest's boot. The create runs a clone, the seed's upload, the resize, the start and the seed's
// release; the delete a stop, a destroy and the seed's deletion, which finds it gone.
func (p Pace) ProxyFloor() (create, del time.Duration) {
	create = p.AgentBootDelay
	for _, typ := range []string{"qmclone", "imgcopy", "resize", "qmstart", "imgdel"} {
		create += p.TaskDurations[typ]
	}
	for _, typ := range []string{"qmstop", "qmdestroy", "imgdel"} {
		del += p.TaskDurations[typ]
	}
	return create, del
}

// Guest is what a VM runs with, as its QEMU and its guest OS have it rather than as its config
// says: what a change that wrote the config has yet to bring to the guest (a reboot, a new
// seed) shows here.
type Guest struct {
	Running bool `json:"running"`
	// Cores and MemoryMiB are those in effect: the running QEMU's, the config's when stopped.
	Cores     int   `json:"cores"`
	MemoryMiB int64 `json:"memoryMiB"`
	// InstanceID is the instance-id of the instance the guest's cloud-init last ran; empty
	// before it first ran.
	InstanceID string `json:"instanceID,omitempty"`
	// Addresses are the static addresses the guest configured on net0 from its instance's
	// network-config, as address/prefix-length: none for DHCP.
	Addresses []string `json:"addresses,omitempty"`
}

// State returns the cluster's State.
func (c *Cluster) State() State {
	st := State{
		VMs:                 c.VMs(),
		Volumes:             c.Volumes(),
		Clones:              c.CloneRuns(),
		MaxConcurrentClones: make(map[string]int),
		Faults:              make(map[string]int),
		Guests:              make(map[int]Guest),
		Pace:                c.Pace(),
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
	for id, g := range c.vms {
		st.Guests[id] = g.guestState()
	}
	c.mu.Unlock()
	for node, storages := range nodes {
		for _, id := range storages {
			st.MaxConcurrentClones[node+"/"+id] = c.MaxConcurrentClones(node, id)
		}
	}
	return st
}

// guestState is what g runs with.
func (g *vm) guestState() Guest {
	out := Guest{Running: g.running, Cores: g.cpus(), MemoryMiB: g.memoryMiB(), InstanceID: g.guest.cloudInit.instanceID}
	_, mac := parseNet(g.cfg["net0"])
	if hw, err := net.ParseMAC(mac); err == nil {
		if e, ok := g.guest.network.ethernet(hw.String()); ok {
			for _, p := range e.addresses {
				out.Addresses = append(out.Addresses, fmt.Sprint(p))
			}
		}
	}
	return out
}
