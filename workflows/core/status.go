package core

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/internal/pve"
)

// Phases a proxy goes through; ProxyPhase carries the current one.
const (
	PhaseValidating  = "validating"
	PhaseLookingUp   = "looking-up"
	PhasePlacing     = "placing"
	PhaseQueued      = "queued"
	PhaseCloning     = "cloning"
	PhaseSeeding     = "seeding"
	PhaseConfiguring = "configuring"
	PhaseStarting    = "starting"
	PhaseBooting     = "booting"
	PhaseCreated     = "created"
	PhaseChanging    = "changing"
	PhaseReseeding   = "reseeding"
	PhaseRebooting   = "rebooting"
	PhaseChanged     = "changed"
	PhaseStopping    = "stopping"
	PhaseDestroying  = "destroying"
	PhaseCleaning    = "cleaning"
	PhaseDeleted     = "deleted"
	PhaseFailed      = "failed"
	PhaseCancelled   = "cancelled"
)

// Status is what the status query answers: where a workflow is and what it waits for.
type Status struct {
	UID   string `json:"uid"`
	Name  string `json:"name"`
	Phase string `json:"phase"`
	// Step says in words what the workflow does now, such as "wait for clone task".
	Step string   `json:"step"`
	Node string   `json:"node,omitempty"`
	VMID int      `json:"vmid,omitempty"`
	UPID pve.UPID `json:"upid,omitempty"`
	// Attempt counts the VMIDs CreateProxy has tried, starting at 1.
	Attempt int `json:"attempt,omitempty"`
	// Admission is the ID of the clone admission this create waits in for a clone lease.
	Admission string `json:"admission,omitempty"`
	// QueuedBehind is how many clones onto the same storage are before this create's while it
	// waits for a clone lease. The admission knows it, not the create: the starter fills it in
	// from the admission's query (AdmissionQuery).
	QueuedBehind int `json:"queuedBehind,omitempty"`
	// Placement says why the create chose its node when no zone named one.
	Placement string `json:"placement,omitempty"`
	// LockRetries counts the calls (a clone, a start, a resize) made again after their task
	// failed on a lock.
	LockRetries int       `json:"lockRetries,omitempty"`
	LastError   string    `json:"lastError,omitempty"`
	StartedAt   time.Time `json:"startedAt"`

	// Warnings are the warnings of the Proxmox tasks that ended "WARNINGS: N", from their logs.
	Warnings []string `json:"warnings,omitempty"`
}

// Tracker keeps a workflow's Status current: in the status query, in the UI's current details,
// and in the search attributes. The search attributes are upserted when the run next waits
// (flush, from execute and from the run's timers), not at every step: the steps between two
// waits run in one workflow task, where upserts no search could see would each cost the history
// an event.
type Tracker struct {
	Ctx    workflow.Context
	Status Status
	// flushed is what the search attributes say; zero until the first flush.
	flushed struct {
		done  bool
		phase string
		node  string
		vmid  int
	}
}

// trackerKey finds a run's tracker in its context, for execute to flush.
const trackerKey = "pveflow-tracker"

// NewTracker makes the tracker of a run; its ctx, the run's context with the tracker in it, is
// the context the run's steps take.
func NewTracker(ctx workflow.Context, uid, name string) (*Tracker, error) {
	t := &Tracker{Status: Status{UID: uid, Name: name, StartedAt: workflow.Now(ctx)}}
	t.Ctx = workflow.WithValue(ctx, trackerKey, t)
	if err := workflow.SetQueryHandler(ctx, StatusQuery, func() (Status, error) { return t.Status, nil }); err != nil {
		return nil, err
	}
	return t, nil
}

// Phase enters a new phase.
func (t *Tracker) Phase(phase, step string) {
	t.Status.Phase, t.Status.Step = phase, step
	workflow.SetCurrentDetails(t.Ctx, phase+": "+step)
}

// Step says what the workflow does now within its phase.
func (t *Tracker) Step(step string) {
	t.Status.Step = step
	workflow.SetCurrentDetails(t.Ctx, t.Status.Phase+": "+step)
}

// VM records the VM the workflow works on.
func (t *Tracker) VM(node string, vmid int) {
	t.Status.Node, t.Status.VMID = node, vmid
}

// Flush upserts, in one command, the search attributes that changed since the last flush.
func (t *Tracker) Flush() {
	var updates []temporal.SearchAttributeUpdate
	if !t.flushed.done {
		updates = append(updates, ProxyUIDKey.ValueSet(t.Status.UID), ProxyNameKey.ValueSet(t.Status.Name))
	}
	if t.Status.Phase != t.flushed.phase {
		updates = append(updates, ProxyPhaseKey.ValueSet(t.Status.Phase))
	}
	if t.Status.VMID != 0 && (t.Status.Node != t.flushed.node || t.Status.VMID != t.flushed.vmid) {
		updates = append(updates, PveNodeKey.ValueSet(t.Status.Node), PveVMIDKey.ValueSet(int64(t.Status.VMID)))
	}
	if len(updates) == 0 {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(t.Ctx, updates...); err != nil {
		// The proxy is then harder to find, but the work itself goes on.
		workflow.GetLogger(t.Ctx).Warn("search attribute update failed", "error", err)
		return
	}
	t.flushed.done, t.flushed.phase, t.flushed.node, t.flushed.vmid = true, t.Status.Phase, t.Status.Node, t.Status.VMID
}

func (t *Tracker) task(upid pve.UPID) { t.Status.UPID = upid }

// warned records the warnings of a task that ended with some.
func (t *Tracker) warned(texts []string) { t.Status.Warnings = append(t.Status.Warnings, texts...) }

// Closed enters the phase an operation's outcome says, cancelled, failed with err, or done,
// and upserts it: the run waits for nothing more.
func (t *Tracker) Closed(err error, done string) {
	switch {
	case t.Ctx.Err() != nil:
		t.Phase(PhaseCancelled, t.Status.Step)
	case err != nil:
		t.Status.LastError = err.Error()
		t.Phase(PhaseFailed, t.Status.Step)
	default:
		t.Phase(done, "done")
	}
	t.Flush()
}
