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
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// TestE2E_aRunningCreateStaysPinnedToItsBuildWhileNewCreatesGoToThePromotedOne rolls a worker
// deployment from one build to the next while a create waits for its clone: the CreateProxy,
// its entity's child, is pinned to the build it started on and completes there, while a
// create requested after the promotion runs on the new build.
func TestE2E_aRunningCreateStaysPinnedToItsBuildWhileNewCreatesGoToThePromotedOne(t *testing.T) {
	const freshUID = "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second} })
	s := newStack(t, cluster, fastConfig(t), client.Options{})
	c := s.client
	const deployment = "pveflow-e2e"
	startBuild := func(buildID string) {
		s.server.NewWorkerWithOptions(core.DefaultTaskQueue, s.register,
			worker.Options{DeploymentOptions: workflows.DeploymentOptions(deployment, buildID)})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, starter.PromoteBuild(ctx, c, deployment, buildID))
	}
	startBuild("build-1")
	old := s.startCreate(createInput(uid))
	eventually(t, "the create waits for its clone", func() bool {
		return query(t, c, core.CreateWorkflowID(uid)).Phase == core.PhaseCloning
	})

	startBuild("build-2")
	fresh := s.startCreate(createInput(freshUID))
	_, oldErr := served[proxyvm.CreateProxyResult](t, old)
	_, freshErr := served[proxyvm.CreateProxyResult](t, fresh)

	require.NoError(t, oldErr)
	require.NoError(t, freshErr)
	for _, tt := range []struct {
		run   client.WorkflowRun
		build string
	}{{s.operation(uid, proxyvm.OpCreate), "build-1"}, {s.operation(freshUID, proxyvm.OpCreate), "build-2"}} {
		desc, err := c.DescribeWorkflowExecution(context.Background(), tt.run.GetID(), tt.run.GetRunID())
		require.NoError(t, err)
		versioning := desc.GetWorkflowExecutionInfo().GetVersioningInfo()
		assert.Equal(t, enumspb.VERSIONING_BEHAVIOR_PINNED, versioning.GetBehavior(), tt.run.GetID())
		assert.Equal(t, tt.build, versioning.GetDeploymentVersion().GetBuildId(), tt.run.GetID())
		assert.Equal(t, []string{tt.build}, workflowTaskBuilds(t, c, tt.run.GetID(), tt.run.GetRunID()),
			"%s: every workflow task ran on %s", tt.run.GetID(), tt.build)
	}
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
