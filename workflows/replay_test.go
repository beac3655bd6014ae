package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/proxy"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
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
			h := load(t, file)
			require.NoError(t, replay(t, r, h, originalExecution(t, h)))
		})
	}
}

// load reads a recorded history.
func load(t *testing.T, file string) *historypb.History {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	require.NoError(t, err)
	return h
}

// originalExecution is the execution a plain history h was recorded under, as far as its
// workflow reads it: a Proxy entity refuses to run under another ID than its proxy's, and a
// history does not hold its own workflow's ID, so it is the one of the UID in its input.
// Other workflows replay under the replayer's own.
func originalExecution(t *testing.T, h *historypb.History) workflow.Execution {
	t.Helper()
	start := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
	if start.GetWorkflowType().GetName() != core.ProxyName {
		return workflow.Execution{}
	}
	var in proxyvm.ProxyInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(start.GetInput(), &in))
	return workflow.Execution{ID: core.ProxyWorkflowID(in.UID)}
}

// replay replays h with r under the execution exec.
func replay(t *testing.T, r worker.WorkflowReplayer, h *historypb.History, exec workflow.Execution) error {
	t.Helper()
	return r.ReplayWorkflowHistoryWithOptions(nil, h, worker.ReplayWorkflowHistoryOptions{OriginalExecution: exec})
}

// newCodec is a codec over a new key file, as PVEFLOW_CODEC_KEY_FILE gives the worker.
func newCodec(t *testing.T) *codec.Codec {
	t.Helper()
	path := filepath.Join(t.TempDir(), "codec.key")
	require.NoError(t, codec.WriteNewKeyFile(path, "replay"))
	c, err := codec.LoadKeyFile(path)
	require.NoError(t, err)
	return c
}

// codecReplayer is a replayer of the workflows on the data and failure converters of c, as a
// worker with PVEFLOW_CODEC_KEY_FILE has them.
func codecReplayer(t *testing.T, c *codec.Codec) worker.WorkflowReplayer {
	t.Helper()
	dc, fc := codec.Converters(c)
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DataConverter: dc, FailureConverter: fc})
	require.NoError(t, err)
	(&workflows.Workflows{Config: testConfig(t)}).Register(r)
	return r
}

// encrypted is the recorded history of file with every payload encrypted by c, as a worker and
// a starter with the codec write it: search attributes stay plain, as the server needs them.
func encrypted(t *testing.T, file string, c *codec.Codec) *historypb.History {
	t.Helper()
	h := load(t, file)
	sealed := 0
	require.NoError(t, proxy.VisitPayloads(context.Background(), h, proxy.VisitPayloadsOptions{
		SkipSearchAttributes: true,
		Visitor: func(_ *proxy.VisitPayloadsContext, p []*commonpb.Payload) ([]*commonpb.Payload, error) {
			sealed += len(p)
			return c.Encode(p)
		},
	}))
	require.NotZero(t, sealed, "no payload in %s", file)
	return h
}

func TestReplay_encryptedHistoriesWithTheSameKeys(t *testing.T) {
	c := newCodec(t)
	for _, file := range recordedHistories(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			exec := originalExecution(t, load(t, file))
			require.NoError(t, replay(t, codecReplayer(t, c), encrypted(t, file, c), exec))
		})
	}
}

// TestReplay_encryptedHistoryDoesNotReplayWithOtherKeys shows that the encrypted replays above
// decrypt: with keys that are not the history's, the workflow cannot read its input, and the
// replay fails.
func TestReplay_encryptedHistoryDoesNotReplayWithOtherKeys(t *testing.T) {
	h := encrypted(t, filepath.Join(historiesDir, "create-clean.json"), newCodec(t))

	err := codecReplayer(t, newCodec(t)).ReplayWorkflowHistory(nil, h)

	require.Error(t, err)
}

func TestReplay_catchesAnInsertedStep(t *testing.T) {
	file := filepath.Join(historiesDir, "create-clean.json")
	wfs := &proxyvm.Workflows{Config: testConfig(t)}
	// CreateProxy with one more call before its first step, as a careless change would add it.
	changed := func(ctx workflow.Context, in proxyvm.ProxySpec) (proxyvm.CreateProxyResult, error) {
		var a *activities.Activities
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		if err := workflow.ExecuteActivity(ctx, a.Version).Get(ctx, nil); err != nil {
			return proxyvm.CreateProxyResult{}, err
		}
		return wfs.CreateProxy(ctx, in)
	}
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: core.CreateProxyName})

	err := r.ReplayWorkflowHistoryFromJSONFile(nil, file)

	// TMPRL1100 is the SDK's code for a history the code no longer produces.
	require.ErrorContains(t, err, "TMPRL1100")
}
