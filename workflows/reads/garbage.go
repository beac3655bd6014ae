package reads

import (
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// DefaultGrace is how old a VM or seed ISO must be before garbage collection takes it, unless a
// run says otherwise.
const DefaultGrace = time.Hour

// What became of a piece of garbage, in GarbageVM.Outcome and GarbageISO.Outcome.
const (
	// GarbageFound: a dry run found it, and would delete it.
	GarbageFound = "found"
	// GarbageDeleted: it is gone.
	GarbageDeleted = "deleted"
	// GarbageSkipped: it is left alone; Detail says why.
	GarbageSkipped = "skipped"
	// GarbageFailed: deleting it failed; Detail holds the error.
	GarbageFailed = "failed"
)

// GarbageVolume is a volume a collection found on a storage, and what became of it.
type GarbageVolume struct {
	VolID     string    `json:"volid"`
	Node      string    `json:"node"`
	Storage   string    `json:"storage"`
	CreatedAt time.Time `json:"createdAt"`
	Outcome   string    `json:"outcome"`
	Detail    string    `json:"detail,omitempty"`
	// Age is how old the volume was when the run looked; it is set on the young ones.
	Age time.Duration `json:"age,omitempty"`
}

// FoundVolume is v, listed on storage on node, as a collection finds it.
func FoundVolume(v pve.StorageVolume, node, storage string) GarbageVolume {
	return GarbageVolume{VolID: v.VolID, Node: node, Storage: storage, CreatedAt: time.Unix(v.CTime, 0).UTC(), Outcome: GarbageFound}
}

// SkipYoung leaves v alone for being younger than the grace period, at now.
func (v *GarbageVolume) SkipYoung(now time.Time) {
	v.Outcome, v.Detail, v.Age = GarbageSkipped, "younger than the grace period", now.Sub(v.CreatedAt)
}
