package core

import (
	"errors"

	"go.temporal.io/sdk/temporal"
)

// FailureText is what an operator reads of a request that failed at step: the message of its
// workflow failure (see fail), without the type and retry flag that Error adds.
func FailureText(step string, err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(Fail(step, err), &appErr) {
		return appErr.Message()
	}
	return err.Error()
}
