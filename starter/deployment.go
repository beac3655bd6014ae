package starter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// promoteRetry is how often PromoteBuild asks again while the server does not know the build
// yet: a worker's version is registered with its first polls.
const promoteRetry = 500 * time.Millisecond

// PromoteBuild makes buildID the current version of the worker deployment named deployment:
// new runs start on it; running CloneAdmissions move to it at their next workflow task, and
// the short workflows' runs stay on the build they started on (see workflows.DeploymentOptions).
// The build's workers must be polling; until the server has
// seen them, PromoteBuild asks again until ctx ends.
func PromoteBuild(ctx context.Context, c client.Client, deployment, buildID string) error {
	handle := c.WorkerDeploymentClient().GetHandle(deployment)
	for {
		_, err := handle.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID})
		switch {
		case err == nil:
			return nil
		case !versionUnknown(err):
			return fmt.Errorf("promote build %s of worker deployment %s: %w", buildID, deployment, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("promote build %s of worker deployment %s: no worker of that build has polled: %w", buildID, deployment, err)
		case <-time.After(promoteRetry):
		}
	}
}

// versionUnknown reports whether err says the server has not seen the version's workers yet.
func versionUnknown(err error) bool {
	var notFound *serviceerror.NotFound
	var precondition *serviceerror.FailedPrecondition
	return errors.As(err, &notFound) || errors.As(err, &precondition)
}
