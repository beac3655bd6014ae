package workflows_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/workflows"
)

// historiesDir holds histories recorded from real runs (`make histories`).
var historiesDir = filepath.Join("..", "testdata", "histories")

func recordedHistories(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(historiesDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in %s", historiesDir)
	return files
}

// TestReplay_recordedHistories replays every recorded history against today's workflow code: a
// change that alters what a running workflow would do next fails here, before it can break
// workflows that run on a deployed worker.
func TestReplay_recordedHistories(t *testing.T) {
	for _, file := range recordedHistories(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			(&workflows.Workflows{Config: testConfig(t)}).Register(r)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, file))
		})
	}
}

func TestReplay_catchesAnInsertedStep(t *testing.T) {
	file := filepath.Join(historiesDir, "create-clean.json")
	wfs := &workflows.Workflows{Config: testConfig(t)}
	// CreateProxy with one more call before its first step, as a careless change would add it.
	changed := func(ctx workflow.Context, in workflows.CreateProxyInput) (workflows.CreateProxyResult, error) {
		var a *activities.Activities
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		if err := workflow.ExecuteActivity(ctx, a.Version).Get(ctx, nil); err != nil {
			return workflows.CreateProxyResult{}, err
		}
		return wfs.CreateProxy(ctx, in)
	}
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: workflows.CreateProxyName})

	err := r.ReplayWorkflowHistoryFromJSONFile(nil, file)

	// TMPRL1100 is the SDK's code for a history the code no longer produces.
	require.ErrorContains(t, err, "TMPRL1100")
}
