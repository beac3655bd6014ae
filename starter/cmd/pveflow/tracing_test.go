package main

import (
	"bufio"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// consoleSpan is what a span the console exporter wrote says of its place in a trace.
type consoleSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
}

// consoleSpans reads the spans of a program's output, one JSON object a line among its logs.
func consoleSpans(t *testing.T, output string) []consoleSpan {
	t.Helper()
	var spans []consoleSpan
	lines := bufio.NewScanner(strings.NewReader(output))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		if line := lines.Text(); strings.HasPrefix(line, "{") {
			var s consoleSpan
			require.NoError(t, json.Unmarshal([]byte(line), &s), line)
			spans = append(spans, s)
		}
	}
	require.NoError(t, lines.Err())
	return spans
}

// spanNamed is the one span of spans called name. A workflow's span ends again, with the same
// IDs, each time a worker replays the workflow (after it left the worker's cache), so the spans
// of one ID count once.
func spanNamed(t *testing.T, spans []consoleSpan, name string) consoleSpan {
	t.Helper()
	var found []consoleSpan
	for _, s := range spans {
		if s.Name == name && !slices.ContainsFunc(found, func(f consoleSpan) bool { return f.SpanContext == s.SpanContext }) {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "spans called %s", name)
	return found[0]
}

func TestE2E_withConsoleTracingTheWorkersSpansAreInTheTraceOfTheCLIsRequest(t *testing.T) {
	s := newE2E(t, "e2e-tracing")
	s.extraEnv = []string{"OTEL_TRACES_EXPORTER=console"}
	worker, _ := s.startSimulatorWorker()

	created := s.pveflow("create", "--uid", "3c2b1a09-8f7e-4d6c-9b5a-4f3e2d1c0b9a", "--image", "debian13", "--machine-type", "small", "--wait")
	require.Equal(t, exitOK, created.code, created.stderr)
	worker.stop(t) // which exports its last spans

	request := spanNamed(t, consoleSpans(t, created.stderr), "UpdateWithStartWorkflow:create")
	workerSpans := consoleSpans(t, worker.log.String())
	handle := spanNamed(t, workerSpans, "HandleUpdate:create")
	run := spanNamed(t, workerSpans, "RunWorkflow:CreateProxy")
	clone := spanNamed(t, workerSpans, "PVE POST /nodes/{node}/qemu/{vmid}/clone")
	assert.Equal(t, request.SpanContext, handle.Parent, "the proxy's handling of the request is the child of the CLI's span")
	assert.Equal(t, request.SpanContext.TraceID, run.SpanContext.TraceID, "the create is in the CLI's trace")
	assert.Equal(t, request.SpanContext.TraceID, clone.SpanContext.TraceID, "the clone's HTTP call is in the CLI's trace")
}
