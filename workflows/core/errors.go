package core

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/activities"
)

// Failure types of the workflows, for the operator to act on.
const (
	// FailPermanent: bad input or a state only a person can resolve (a foreign VM with the
	// proxy's name, a missing privilege). Starting again fails again.
	FailPermanent = "Permanent"
	// FailTransient: a budget ran out or Proxmox had trouble. Starting again resumes.
	FailTransient = "Transient"
	// FailQuotaExceeded: a storage is full.
	FailQuotaExceeded = "QuotaExceeded"
	// FailNotFound: GetProxy found no VM of the proxy.
	FailNotFound = "NotFound"
)

// Permanentf is a Permanent workflow failure.
func Permanentf(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), FailPermanent, nil)
}

// Transientf is a Transient workflow failure.
func Transientf(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), FailTransient, nil)
}

// NotFoundf is a NotFound workflow failure.
func NotFoundf(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), FailNotFound, nil)
}

// Fail turns an activity's failure at a step into the workflow's failure: Permanent,
// QuotaExceeded or Transient, with Proxmox's message. A cancellation stays a cancellation.
//
// An activity's message already names its call ("list cluster resources: ...", see
// activities.failure), so fail adds the step only where it says more than the activity could:
// what a wait that ran out of budget waited for, which of the workflow's tasks failed, or the
// step of a failure that carries no activity message (a timeout with no worker polling).
func Fail(step string, err error) error {
	if temporal.IsCanceledError(err) {
		return err
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return Transientf("%s: %v", step, err)
	}
	msg := appErr.Message()
	switch appErr.Type() {
	case activities.ErrPermanent:
		return Permanentf("%s", msg)
	case activities.ErrQuotaExceeded:
		return quotaExceededf("%s", msg)
	case activities.ErrTaskFailed:
		switch taskFailureClass(appErr) {
		case activities.ErrPermanent:
			return Permanentf("%s: %s", step, msg)
		case activities.ErrQuotaExceeded:
			return quotaExceededf("%s: %s", step, msg)
		}
		return Transientf("%s: %s", step, msg)
	case activities.ErrLocked:
		return Transientf("still locked when its budget ran out: %s", msg)
	case activities.ErrTaskRunning, activities.ErrNotReady, activities.ErrAgentNotRunning:
		// A wait that reaches workflow code has used up its budget.
		return Transientf("%s did not finish within its budget: %s", step, msg)
	}
	return Transientf("%s", msg)
}

// quotaExceededf is a QuotaExceeded workflow failure.
func quotaExceededf(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), FailQuotaExceeded, nil)
}

// IsType reports whether err is an activity failure of the given ApplicationError type.
func IsType(err error, errType string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == errType
}

// taskFailureClass is the pve.Class a TaskFailed error carries as its first detail.
func taskFailureClass(appErr *temporal.ApplicationError) string {
	var class string
	if appErr.HasDetails() && appErr.Details(&class) == nil {
		return class
	}
	return ""
}

// IsTaskFailedWith reports whether err is a failed Proxmox task whose exit status has class.
func IsTaskFailedWith(err error, class string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == activities.ErrTaskFailed && taskFailureClass(appErr) == class
}
