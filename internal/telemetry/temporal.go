// Package telemetry is what pveflow's library packages need of OpenTelemetry, on its API alone:
// Temporal's tracing interceptor, the traced Proxmox transport and the attributes activities put
// on their spans. A program chooses where spans go by setting the global tracer provider;
// pveflow's own programs do it with package export, which holds the SDK and the exporters.
package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// TracingInterceptor is Temporal's OpenTelemetry tracing interceptor on tp, for
// client.Options.Interceptors; the workers made from the client inherit it. It traces
// StartWorkflow in the client, RunWorkflow and StartActivity in the workflow (StartActivity not
// while replaying), and RunActivity in every activity attempt, whose span it puts on the
// activity's context for the Proxmox transport's spans to nest under. The spans carry workflow,
// run and activity IDs and failure messages, never a payload.
//
// With tp = otel.GetTracerProvider() before any provider is set, the spans go to whichever
// provider is set later, and nowhere when none is.
func TracingInterceptor(tp trace.TracerProvider) (interceptor.Interceptor, error) {
	return temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:      tp.Tracer("temporal-sdk-go"), // the contrib's default name
		SpanStarter: startSpan,
	})
}

// runWorkflowSpan starts the name of the one span a workflow starts again each time a worker
// replays it (after a restart, or once it left the worker's cache).
const runWorkflowSpan = "RunWorkflow:"

// spanSeedKey is the context key of the seed ReplaySafeIDs derives a span's IDs from.
type spanSeedKey struct{}

// startSpan starts the interceptor's spans as the contrib does, but gives a RunWorkflow span a
// seed: its name and its start time, the workflow's start time from its history. A replayed
// RunWorkflow span then has the IDs the first one had (ReplaySafeIDs), and the StartActivity
// spans of the earlier run and those after the replay share one parent.
func startSpan(ctx context.Context, t trace.Tracer, name string, opts ...trace.SpanStartOption) trace.Span {
	if strings.HasPrefix(name, runWorkflowSpan) {
		cfg := trace.NewSpanStartConfig(opts...)
		start := cfg.Timestamp()
		ctx = context.WithValue(ctx, spanSeedKey{}, name+"@"+strconv.FormatInt(start.UnixNano(), 10))
	}
	_, span := t.Start(ctx, name, opts...)
	return span
}

// ReplaySafeIDs, the OpenTelemetry SDK's IDGenerator of pveflow's tracer provider
// (export.NewTracerProvider), gives a span started with a seed (startSpan's RunWorkflow spans)
// IDs hashed from the seed and its parent: the same on every replay, on any worker. A RunWorkflow span without a
// parent (a workflow started by a client without tracing) gets a trace ID from its seed too.
// Every other span gets random IDs, as the SDK's default generator gives.
type ReplaySafeIDs struct{}

func (ReplaySafeIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	seed, ok := ctx.Value(spanSeedKey{}).(string)
	if !ok {
		var tid trace.TraceID
		for !tid.IsValid() {
			binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
			binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
		}
		return tid, randomSpanID()
	}
	sum := sha256.Sum256([]byte(seed))
	return trace.TraceID(sum[8:24]), trace.SpanID(sum[:8])
}

func (ReplaySafeIDs) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	seed, ok := ctx.Value(spanSeedKey{}).(string)
	if !ok {
		return randomSpanID()
	}
	parent := trace.SpanContextFromContext(ctx).SpanID()
	h := sha256.New()
	h.Write(traceID[:])
	h.Write(parent[:])
	h.Write([]byte(seed))
	return trace.SpanID(h.Sum(nil)[:8])
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
