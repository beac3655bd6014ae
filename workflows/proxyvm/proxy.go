package proxyvm

import (
	"strings"
	"time"
)

// Proxy phases: what a Proxy entity's ProxyPhase search attribute and status say.
const (
	ProxyAbsent   = "absent"
	ProxyCreating = "creating"
	ProxyPresent  = "present"
	ProxyChanging = "changing"
	ProxyHealing  = "healing"
	ProxyDeleting = "deleting"
	ProxyFailed   = "failed"
)

// Operation kinds, as a Proxy entity runs them.
const (
	OpCreate = "create"
	OpChange = "change"
	OpDelete = "delete"
)

// ProxyStatus is what a Proxy entity's status query answers: the whole proxy. It never holds
// the user-data, only its SHA-256.
type ProxyStatus struct {
	UID   string `json:"uid"`
	Phase string `json:"phase"`
	// Desired is what the operator last asked for.
	Desired DesiredState `json:"desired"`
	// Observed is what the last operation or check found.
	Observed ObservedState `json:"observed"`
	// Operation is the operation that runs, nil when none does. Its step and wait are the
	// child's own: query its WorkflowID.
	Operation *OperationRecord `json:"operation,omitempty"`
	// Requests are the requests accepted and not yet answered, oldest first: what the entity
	// has queued.
	Requests []PendingRequest `json:"requests,omitempty"`
	// LastFailure is the error of the last operation that failed, until one succeeds.
	LastFailure string `json:"lastFailure,omitempty"`
	// NextHealAt, after heals that failed, is when a check may heal the VM again: ever later
	// while heals fail, so a VM that fails at every boot is not made again at every check.
	NextHealAt time.Time `json:"nextHealAt,omitzero"`
	// Operations are the latest operations, oldest first.
	Operations []OperationRecord `json:"operations"`
	// Runs counts the entity's runs: one more at each continue-as-new.
	Runs      int       `json:"runs"`
	StartedAt time.Time `json:"startedAt"`
}

// PendingRequest is a request a proxy's entity accepted and has yet to answer.
type PendingRequest struct {
	// Kind is OpCreate, OpChange or OpDelete.
	Kind string `json:"kind"`
	// Served says that the operation that runs serves it, and answers it when it ends; else it
	// waits for an operation to come.
	Served bool `json:"served"`
}

// DesiredState is what an operator asked a proxy to be.
type DesiredState struct {
	Present     bool   `json:"present"`
	Name        string `json:"name,omitempty"`
	Zone        string `json:"zone,omitempty"`
	Image       string `json:"image,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	// UserDataSHA256 identifies the user-data without holding it.
	UserDataSHA256 string `json:"userDataSHA256,omitempty"`
	// InstanceID is cloud-init's instance-id of the current user-data.
	InstanceID string `json:"instanceID,omitempty"`
}

// ObservedState is the proxy's VM as pveflow last saw it.
type ObservedState struct {
	VMID  int    `json:"vmid,omitempty"`
	Node  string `json:"node,omitempty"`
	State string `json:"state,omitempty"`
	IPv4  string `json:"ipv4,omitempty"`
	IPv6  string `json:"ipv6,omitempty"`
	// Drift lists where the VM's config differs from the spec, such as "cores 2, spec 4".
	Drift     []string  `json:"drift,omitempty"`
	CheckedAt time.Time `json:"checkedAt,omitzero"`
}

// OperationRecord is one operation of a Proxy entity: a child workflow, and why it ran.
type OperationRecord struct {
	Seq  int    `json:"seq"`
	Kind string `json:"kind"`
	// Reason says why it ran: "requested", or what a check found ("VM 1234 was stopped").
	Reason     string    `json:"reason"`
	WorkflowID string    `json:"workflowID"`
	RunID      string    `json:"runID,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	ClosedAt   time.Time `json:"closedAt,omitzero"`
	// Outcome is empty while it runs, then completed, failed or cancelled.
	Outcome string `json:"outcome,omitempty"`
	Error   string `json:"error,omitempty"`
}

// isHeal reports whether the operation is one a check started, whose reason says what it found.
func (r OperationRecord) isHeal() bool { return strings.HasPrefix(r.Reason, "check:") }

// ProxyInput is the input of a Proxy entity: its UID when a request starts it, and its state
// as well when it continues as new.
type ProxyInput struct {
	UID   string      `json:"uid"`
	State *ProxyState `json:"state,omitempty"`
}

// ProxyState is what a Proxy entity carries from one run to the next.
type ProxyState struct {
	// Spec is what the operator asked for while the proxy is present, nil while it is absent.
	// It holds the user-data, which nothing the entity reports shows.
	Spec *ProxySpec `json:"spec,omitempty"`
	// Applied is the spec the VM was last made to match, without its user-data (its InstanceID
	// says which), nil when unknown: never created, deleted, failed, or a check found it off.
	Applied *ProxySpec `json:"applied,omitempty"`
	// UserDataGen counts the new seeds since the proxy was created (new user-data, other NICs);
	// the instance-id carries it.
	UserDataGen int           `json:"userDataGen,omitempty"`
	Observed    ObservedState `json:"observed"`
	// Watched is the VMID the cluster's observer last took the entity's word to watch, 0 when
	// none: then the entity checks itself every entity.checkInterval.
	Watched int `json:"watched,omitempty"`
	// Current is the operation that ran when the last run continued as new.
	Current *OperationRecord `json:"current,omitempty"`
	// Operations are the latest operations, oldest first, at most keptOperations.
	Operations []OperationRecord `json:"operations,omitempty"`
	Seq        int               `json:"seq"`
	Checks     int               `json:"checks"`
	// Blocked is set when the last operation failed: nothing runs again until a request or a
	// check asks for it.
	Blocked     bool   `json:"blocked,omitempty"`
	LastFailure string `json:"lastFailure,omitempty"`
	// FailedHeals counts the heals in a row that failed; NextHealAt is when a check may heal
	// again (healBackoff).
	FailedHeals int       `json:"failedHeals,omitempty"`
	NextHealAt  time.Time `json:"nextHealAt,omitzero"`
	// NeedsPerson is set when the last operation failed Permanent: checks report what they
	// find and heal nothing until a request comes.
	NeedsPerson bool      `json:"needsPerson,omitempty"`
	Runs        int       `json:"runs"`
	StartedAt   time.Time `json:"startedAt"`
	// WantedAt is when the entity last accepted a create or change request: a delete request
	// with an earlier UnlessWantedSince (a garbage collection that looked before) is refused
	// while the proxy is wanted present. Zero from runs before the field was kept.
	WantedAt time.Time `json:"wantedAt,omitzero"`
	// Known is set once the entity knows whether its proxy is wanted: it accepted a create or a
	// delete, or read the proxy's VM (a fresh entity, whose predecessor was terminated, asked for
	// a change).
	Known bool `json:"known,omitempty"`
	// UserDataDigest is set while the spec was rebuilt from the VM's mark, which holds the
	// user-data's digest and not the user-data: until a create or change gives the user-data,
	// it is what the spec's user-data is known by, and no heal makes a seed.
	UserDataDigest string `json:"userDataDigest,omitempty"`
	// Answers are the latest requests' answers by Update ID, oldest first, at most keptAnswers.
	Answers []Answer `json:"answers,omitempty"`
}

// Answer is what a request was answered with, kept by its Update ID: the request sent again
// under that ID, in this run or a later one, gets it again rather than a second operation.
type Answer struct {
	UpdateID string             `json:"updateID"`
	Create   *CreateProxyResult `json:"create,omitempty"`
	Change   *ChangeProxyResult `json:"change,omitempty"`
	Delete   *DeleteProxyResult `json:"delete,omitempty"`
	// FailureType and Failure are the failure's type and message, when it failed: an
	// ApplicationError's, or answerCanceled for a cancellation.
	FailureType string `json:"failureType,omitempty"`
	Failure     string `json:"failure,omitempty"`
}
