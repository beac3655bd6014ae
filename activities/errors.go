package activities

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/pve"
)

// Error types of the ApplicationErrors the activities return. They are recorded in workflow
// histories and matched by the workflows: treat them as a public API.
const (
	// ErrPermanent: bad input, missing privilege, a foreign VM. Not retried.
	ErrPermanent = string(pve.Permanent)
	// ErrTransient: backend trouble; retried within the activity's budget.
	ErrTransient = string(pve.Transient)
	// ErrNotFound: the VM or object does not exist. Not retried: the workflow decides.
	ErrNotFound = string(pve.NotFound)
	// ErrLocked: the VM is locked by another operation. Retried.
	ErrLocked = string(pve.Locked)
	// ErrAlreadyExists: the VMID is taken. Not retried: the workflow probes the next one.
	ErrAlreadyExists = string(pve.AlreadyExists)
	// ErrAgentNotRunning: the guest agent does not answer yet. Retried.
	ErrAgentNotRunning = string(pve.AgentNotRunning)
	// ErrNotRunning: the VM is stopped. Not retried: the workflow decides.
	ErrNotRunning = string(pve.NotRunning)
	// ErrAlreadyRunning: a start found the VM running. Not retried: the workflow counts it as
	// started.
	ErrAlreadyRunning = string(pve.AlreadyRunning)
	// ErrQuotaExceeded: a storage is full. Not retried.
	ErrQuotaExceeded = string(pve.QuotaExceeded)
	// ErrTaskRunning: a Proxmox task is still running. Retried; this is how waits poll.
	ErrTaskRunning = "TaskRunning"
	// ErrTaskFailed: a Proxmox task ended with an error. Not retried. Its first detail is the
	// pve.Class of the exit status, so a workflow can tell a VMID collision from a full disk.
	ErrTaskFailed = "TaskFailed"
	// ErrNotReady: a VM is not yet in the state a wait asked for (running, unlocked, has an
	// IPv4). Retried.
	ErrNotReady = "NotReady"
)

// retryable says which classes a retry can fix.
var retryable = map[pve.Class]bool{
	pve.Transient:       true,
	pve.Locked:          true,
	pve.AgentNotRunning: true,
}

// Fault is what a failed Proxmox call met, beyond its class: whether an answer came, and with
// which HTTP status. It is the first detail of every activity failure but a TaskFailed's, so a
// health check can tell a refused token from an unreachable node without reading messages.
type Fault struct {
	// HTTPStatus is the status PVE (or a proxy in front of it) answered with; 0 when no answer
	// came.
	HTTPStatus int `json:"httpStatus,omitempty"`
	// Timeout is set when no answer came in time: the client's request timeout, or a network
	// that timed out.
	Timeout bool `json:"timeout,omitempty"`
}

// faultOf is the Fault of a seam error.
func faultOf(err error) Fault {
	var f Fault
	var apiErr *pve.APIError
	var netErr net.Error
	switch {
	case errors.As(err, &apiErr):
		f.HTTPStatus = apiErr.Status
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		f.Timeout = true
	}
	return f
}

// FaultOf is the Fault an activity's failure carries, and whether it carries one.
func FaultOf(err error) (Fault, bool) {
	var appErr *temporal.ApplicationError
	var f Fault
	if !errors.As(err, &appErr) || appErr.Type() == ErrTaskFailed || !appErr.HasDetails() || appErr.Details(&f) != nil {
		return Fault{}, false
	}
	return f, true
}

// failure turns a seam error into the ApplicationError the workflow sees. The message keeps what
// an operator needs (the step, VMID, node and Proxmox's own text); the error itself is built by
// the client and the simulator, which never put the token or cloud-init text into it.
func failure(step string, err error) error {
	return failureLookingAgainIn(step, err, 0)
}

// failureLookingAgainIn is failure for a look of a wait that err's class means is not over yet
// (a guest agent that does not answer while the guest boots): retried after next, the wait's
// pace, or by the retry policy when next is 0.
func failureLookingAgainIn(step string, err error, next time.Duration) error {
	class := pve.Classify(err)
	msg := err.Error()
	if _, named := errors.AsType[*pve.CallError](err); !named {
		msg = step + ": " + msg // the Proxmox client names its call; anything else gets the step
	}
	if te, ok := asTaskError(err); ok {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %v", step, te), ErrTaskFailed, nil, string(class))
	}
	if retryable[class] {
		return temporal.NewApplicationErrorWithOptions(msg, string(class), temporal.ApplicationErrorOptions{
			Category:       benignFor(class),
			Details:        []any{faultOf(err)},
			NextRetryDelay: next,
		})
	}
	return temporal.NewNonRetryableApplicationError(msg, string(class), nil, faultOf(err))
}

// benignFor marks the classes that are expected while waiting, so the worker logs them at debug
// level and they do not count as failed activities in metrics.
func benignFor(c pve.Class) temporal.ApplicationErrorCategory {
	if c == pve.AgentNotRunning || c == pve.Locked {
		return temporal.ApplicationErrorCategoryBenign
	}
	return temporal.ApplicationErrorCategoryUnspecified
}

// notReady is the retryable, benign error of a wait that has not reached its state yet, to be
// looked at again after next (by the retry policy when 0). Its message is what the Temporal UI
// shows as the pending activity's last failure.
func notReady(errType string, next time.Duration, format string, args ...any) error {
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf(format, args...), errType, temporal.ApplicationErrorOptions{
		Category:       temporal.ApplicationErrorCategoryBenign,
		NextRetryDelay: next,
	})
}

func asTaskError(err error) (*pve.TaskError, bool) {
	var te *pve.TaskError
	ok := errors.As(err, &te)
	return te, ok
}
