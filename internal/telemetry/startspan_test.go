package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// spanUnder starts and ends a span as the tracing interceptor does, under parent (none when
// invalid), at start, and returns its IDs.
func spanUnder(parent trace.SpanContext, name string, start time.Time) trace.SpanContext {
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	span := startSpan(ctx, sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(ReplaySafeIDs{})).Tracer("test"), name, trace.WithTimestamp(start))
	span.End()
	return span.SpanContext()
}

func TestStartSpan_workflowSpanIDsFollowFromParentNameAndStart(t *testing.T) {
	start := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	otherParent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{7, 8, 9}, TraceFlags: trace.FlagsSampled,
	})
	run := spanUnder(parent, "RunWorkflow:CreateProxy", start)

	assert.Equal(t, parent.TraceID(), run.TraceID(), "the parent's trace")
	assert.Equal(t, run, spanUnder(parent, "RunWorkflow:CreateProxy", start), "the same span again")
	assert.NotEqual(t, run.SpanID(), spanUnder(otherParent, "RunWorkflow:CreateProxy", start).SpanID(), "another parent")
	assert.NotEqual(t, run.SpanID(), spanUnder(parent, "RunWorkflow:CreateProxy", start.Add(time.Nanosecond)).SpanID(), "another start")
	assert.NotEqual(t, run.SpanID(), spanUnder(parent, "RunWorkflow:DeleteProxy", start).SpanID(), "another workflow")
}

func TestStartSpan_otherSpansGetRandomIDs(t *testing.T) {
	start := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)

	first := spanUnder(trace.SpanContext{}, "RunActivity:Clone", start)
	again := spanUnder(trace.SpanContext{}, "RunActivity:Clone", start)

	assert.True(t, first.IsValid())
	assert.NotEqual(t, first.TraceID(), again.TraceID())
	assert.NotEqual(t, first.SpanID(), again.SpanID())
}
