package workflows

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

// tracker keeps a workflow's Status current: in the status query, in the search attributes and
// in the UI's current details.
type tracker struct {
	ctx    workflow.Context
	status Status
}

func newTracker(ctx workflow.Context, uid, name string) (*tracker, error) {
	t := &tracker{ctx: ctx, status: Status{UID: uid, Name: name, StartedAt: workflow.Now(ctx)}}
	if err := workflow.SetQueryHandler(ctx, StatusQuery, func() (Status, error) { return t.status, nil }); err != nil {
		return nil, err
	}
	return t, t.upsert(ProxyUIDKey.ValueSet(uid), ProxyNameKey.ValueSet(name))
}

// phase enters a new phase.
func (t *tracker) phase(phase, step string) {
	t.status.Phase, t.status.Step = phase, step
	workflow.SetCurrentDetails(t.ctx, phase+": "+step)
	t.logErr(t.upsert(ProxyPhaseKey.ValueSet(phase)))
}

// step says what the workflow does now within its phase.
func (t *tracker) step(step string) {
	t.status.Step = step
	workflow.SetCurrentDetails(t.ctx, t.status.Phase+": "+step)
}

// vm records the VM the workflow works on.
func (t *tracker) vm(node string, vmid int) {
	if t.status.Node == node && t.status.VMID == vmid {
		return
	}
	t.status.Node, t.status.VMID = node, vmid
	t.logErr(t.upsert(PveNodeKey.ValueSet(node), PveVMIDKey.ValueSet(int64(vmid))))
}

func (t *tracker) task(upid pve.UPID) { t.status.UPID = upid }

// warned records the warnings of a task that ended with some.
func (t *tracker) warned(texts []string) { t.status.Warnings = append(t.status.Warnings, texts...) }

// closed enters the phase an operation's outcome says: cancelled, failed with err, or done.
func (t *tracker) closed(err error, done string) {
	switch {
	case t.ctx.Err() != nil:
		t.phase(PhaseCancelled, t.status.Step)
	case err != nil:
		t.failed(err)
	default:
		t.phase(done, "done")
	}
}

func (t *tracker) failed(err error) {
	t.status.LastError = err.Error()
	t.phase(PhaseFailed, t.status.Step)
}

func (t *tracker) upsert(updates ...temporal.SearchAttributeUpdate) error {
	return workflow.UpsertTypedSearchAttributes(t.ctx, updates...)
}

// logErr logs a failed search-attribute update: the proxy is then harder to find, but the work
// itself goes on.
func (t *tracker) logErr(err error) {
	if err != nil {
		workflow.GetLogger(t.ctx).Warn("search attribute update failed", "error", err)
	}
}
