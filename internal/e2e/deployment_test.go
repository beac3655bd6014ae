package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

// TestE2E_aRunningCreateMovesToThePromotedBuildAndCompletes rolls a worker deployment from one
// build to the next while a create waits for its clone: the create carries on on the new build
// (workflows.VersioningBehavior is auto-upgrade) and completes with the old build's worker gone.
func TestE2E_aRunningCreateMovesToThePromotedBuildAndCompletes(t *testing.T) {
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second} })
	s := newStack(t, cluster, fastConfig(t), client.Options{})
	c := s.client
	const deployment = "pveflow-e2e"
	startBuild := func(buildID string) worker.Worker {
		w := s.server.NewWorkerWithOptions(workflows.DefaultTaskQueue, s.register,
			worker.Options{DeploymentOptions: workflows.DeploymentOptions(deployment, buildID)})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, starter.PromoteBuild(ctx, c, deployment, buildID))
		return w
	}
	first := startBuild("build-1")
	run, err := c.ExecuteWorkflow(context.Background(), workflows.CreateOptions(uid, workflows.DefaultTaskQueue), workflows.CreateProxyName, createInput(uid))
	require.NoError(t, err)
	eventually(t, "the create waits for its clone", func() bool { return query(t, c, run.GetID()).Phase == workflows.PhaseCloning })

	startBuild("build-2")
	first.Stop()
	_, err = result[workflows.CreateProxyResult](t, run)

	require.NoError(t, err)
	desc, err := c.DescribeWorkflowExecution(context.Background(), run.GetID(), run.GetRunID())
	require.NoError(t, err)
	versioning := desc.GetWorkflowExecutionInfo().GetVersioningInfo()
	assert.Equal(t, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE, versioning.GetBehavior())
	assert.Equal(t, "build-2", versioning.GetDeploymentVersion().GetBuildId())
	assert.Equal(t, []string{"build-1", "build-2"}, workflowTaskBuilds(t, c, run.GetID(), run.GetRunID()),
		"workflow tasks ran on the first build, then on the second")
}

// workflowTaskBuilds lists the builds that completed the run's workflow tasks, in order, each
// once.
func workflowTaskBuilds(t *testing.T, c client.Client, workflowID, runID string) []string {
	t.Helper()
	var builds []string
	for _, ev := range history(t, c, workflowID, runID) {
		if done := ev.GetWorkflowTaskCompletedEventAttributes(); done != nil {
			build := done.GetDeploymentVersion().GetBuildId()
			if len(builds) == 0 || builds[len(builds)-1] != build {
				builds = append(builds, build)
			}
		}
	}
	return builds
}
