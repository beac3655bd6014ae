package activities

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/pveflow/pveflow/internal/pve"
)

// ObserveRequest is the input of ObserveVMs: the VMs an observer watches, and the fingerprint
// of each one's entry when it last listed it (0: not listed since it was asked to watch it).
// Two slices, not a slice of pairs: at 10,000 watched VMs the request is recorded in the
// observer's history at every listing, and pairs would cost it a third more.
type ObserveRequest struct {
	VMIDs []int    `json:"vmids"`
	Seen  []uint32 `json:"seen"`
}

// VMChange is a watched VM whose entry in the cluster's list is new to the observer or looks
// wrong.
type VMChange struct {
	VMID int `json:"vmid"`
	// Fingerprint is the entry's now (Fingerprint), 0 when the VM is not listed.
	Fingerprint uint32 `json:"fingerprint,omitempty"`
	// Why is what the entry says, for the entity woken to read the VM: empty for a VM listed
	// for the first time and looking right, which wakes nobody.
	Why string `json:"why,omitempty"`
}

// ObserveVMs lists the cluster's VMs once (GET /cluster/resources) and returns the watched VMs
// whose entries changed since their fingerprints were taken, that are not listed, or that look
// wrong (not running, locked) however often they did before. The rest, the whole fleet on a
// quiet day, costs nothing more: the list is PVE's own cache, so its answer may lag by seconds,
// and a VM it shows changed is for its entity to read.
func (a *Activities) ObserveVMs(ctx context.Context, req ObserveRequest) ([]VMChange, error) {
	if len(req.Seen) != len(req.VMIDs) {
		return nil, failure("observe the cluster's VMs", pve.Classified(pve.Permanent,
			fmt.Errorf("%d fingerprints for %d VMIDs", len(req.Seen), len(req.VMIDs))))
	}
	rs, err := a.API.ClusterResources(ctx)
	if err != nil {
		return nil, failure("list cluster resources", err)
	}
	listed := make(map[int]pve.VMResource, len(rs))
	for _, r := range rs {
		if r.Type == "qemu" && !r.Template {
			listed[r.VMID] = r
		}
	}
	var changes []VMChange
	for i, vmid := range req.VMIDs {
		r, ok := listed[vmid]
		if !ok {
			changes = append(changes, VMChange{VMID: vmid, Why: "not in the cluster's list"})
			continue
		}
		fp, wrong := Fingerprint(r), looksWrong(r)
		switch {
		case wrong != "":
			changes = append(changes, VMChange{VMID: vmid, Fingerprint: fp, Why: wrong})
		case req.Seen[i] == 0:
			changes = append(changes, VMChange{VMID: vmid, Fingerprint: fp})
		case fp != req.Seen[i]:
			changes = append(changes, VMChange{VMID: vmid, Fingerprint: fp,
				Why: fmt.Sprintf("its entry changed: %q on node %s, %d cores, %d MiB, disk %d GiB", r.Name, r.Node, r.MaxCPU, r.MaxMem>>20, r.MaxDisk>>30)})
		}
	}
	return changes, nil
}

// Fingerprint is FNV-1a 32 of what the cluster's list says of a VM that a proxy's entity cares
// about: its node, name, status, lock, cores, memory and disk. Never 0, which means "not seen".
func Fingerprint(r pve.VMResource) uint32 {
	h := fnv.New32a()
	for _, s := range []string{r.Node, r.Name, r.Status, r.Lock, strconv.Itoa(r.MaxCPU), strconv.FormatInt(r.MaxMem, 10), strconv.FormatInt(r.MaxDisk, 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return max(h.Sum32(), 1)
}

// looksWrong says why a listed VM needs its entity's eyes whatever it looked like before: it is
// not running, or a lock holds it.
func looksWrong(r pve.VMResource) string {
	switch {
	case r.Status != "running":
		return fmt.Sprintf("listed %s on node %s", r.Status, r.Node)
	case r.Lock != "":
		return fmt.Sprintf("listed locked (%s) on node %s", r.Lock, r.Node)
	}
	return ""
}
