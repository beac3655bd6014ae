package telemetry_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/telemetry"
	"github.com/pveflow/pveflow/internal/telemetry/export"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
)

// replayedRunWorkflowSpan replays a recorded create on a worker that traces to a provider
// made by newProvider, and returns the RunWorkflow span the replay ended.
func replayedRunWorkflowSpan(t *testing.T, newProvider func(...sdktrace.TracerProviderOption) *sdktrace.TracerProvider) trace.SpanContext {
	t.Helper()
	recorder := tracetest.NewSpanRecorder()
	tracing, err := telemetry.TracingInterceptor(newProvider(sdktrace.WithSpanProcessor(recorder)))
	require.NoError(t, err)
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
		Interceptors: []interceptor.WorkerInterceptor{tracing},
	})
	require.NoError(t, err)
	cfg, err := config.Load(filepath.Join("..", "..", "testdata", "config", "simulator.yaml"))
	require.NoError(t, err)
	cfg.Clones.PerStorage = 0 // as the history was recorded: without the clone admission
	(&workflows.Workflows{Config: cfg}).Register(r)

	require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, filepath.Join("..", "..", "testdata", "histories", "create-clean.json")))

	var runs []trace.SpanContext
	for _, s := range recorder.Ended() {
		if s.Name() == "RunWorkflow:"+core.CreateProxyName {
			runs = append(runs, s.SpanContext())
		}
	}
	require.Len(t, runs, 1, "a replay starts the RunWorkflow span again, and no other")
	return runs[0]
}

func TestTracingInterceptor_aReplayedWorkflowSpanHasTheIDsItHadBefore(t *testing.T) {
	first := replayedRunWorkflowSpan(t, export.NewTracerProvider)
	again := replayedRunWorkflowSpan(t, export.NewTracerProvider)

	assert.Equal(t, first.TraceID(), again.TraceID())
	assert.Equal(t, first.SpanID(), again.SpanID())
}

func TestTracingInterceptor_onTheSDKsDefaultProviderAReplayedWorkflowSpanGetsNewIDs(t *testing.T) {
	first := replayedRunWorkflowSpan(t, sdktrace.NewTracerProvider)
	again := replayedRunWorkflowSpan(t, sdktrace.NewTracerProvider)

	assert.NotEqual(t, first.SpanID(), again.SpanID())
}
