// Package export is the half of pveflow's telemetry that only its programs need, the worker and
// the pveflow CLI: the tracer provider with the span exporter the OTEL_* environment names, and
// the worker's metrics, for Prometheus and the metric exporter that environment names. It holds
// the OpenTelemetry SDK, the exporters and the Prometheus client, which the library packages
// (starter, workflows, activities) must not pull into a program that imports them: those use
// package telemetry, which needs only the OpenTelemetry API.
package export

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/pveflow/pveflow/internal/telemetry"
)

// The standard variables pveflow reads itself, beside those autoexport and the exporters read.
const (
	envTracesExporter  = "OTEL_TRACES_EXPORTER"
	envMetricsExporter = "OTEL_METRICS_EXPORTER"
	envSDKDisabled     = "OTEL_SDK_DISABLED"
	envEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	// exporterConsole is the exporter pveflow makes itself: autoexport's writes to stdout,
	// which carries the CLI's results.
	exporterConsole = "console"
)

// SetupTracing makes the tracer provider the standard environment asks for (see spanExporter)
// the global one, for the Temporal interceptor (telemetry.TracingInterceptor) and the Proxmox
// transport (PVETransport) on otel.GetTracerProvider(), and returns the func that flushes and
// stops it.
// The spans' resource names service, a default service.name that OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override. The console exporter writes to console.
//
// When nothing asks for an exporter, it changes nothing and its shutdown does nothing: spans
// are then never recorded. Like the OpenTelemetry SDK, it reads the process environment.
func SetupTracing(ctx context.Context, service string, console io.Writer) (shutdown func(context.Context) error, err error) {
	exp, err := spanExporter(ctx, console)
	if err != nil || exp == nil {
		return func(context.Context) error { return nil }, err
	}
	res, err := serviceResource(ctx, service)
	if err != nil {
		return nil, err
	}
	tp := NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// spanExporter is the exporter OTEL_TRACES_EXPORTER names, made by autoexport (otlp over
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, console, none), or nil
// for none. Unset, it is otlp when an OTLP endpoint is set and none otherwise: the
// specification's default is otlp, which would send every program's spans to localhost:4318
// unasked. OTEL_SDK_DISABLED=true is none whatever else is set. A value autoexport does not
// know is an error naming the variable.
func spanExporter(ctx context.Context, console io.Writer) (sdktrace.SpanExporter, error) {
	name := os.Getenv(envTracesExporter)
	switch {
	case sdkDisabled(), name == "" && os.Getenv(envEndpoint) == "" && os.Getenv(envTracesEndpoint) == "":
		return nil, nil
	case name == exporterConsole:
		return stdouttrace.New(stdouttrace.WithWriter(console))
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %q: %w", envTracesExporter, name, err)
	case autoexport.IsNoneSpanExporter(exp):
		return nil, nil
	}
	return exp, nil
}

// sdkDisabled is whether OTEL_SDK_DISABLED turns all export off.
func sdkDisabled() bool {
	return strings.EqualFold(strings.TrimSpace(os.Getenv(envSDKDisabled)), "true")
}

// serviceResource is the resource of pveflow's spans and pushed metrics: service.name is
// service unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names another.
func serviceResource(ctx context.Context, service string) (*resource.Resource, error) {
	// Later detectors win: the environment's service name over the default.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("telemetry resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	return res, nil
}

// NewTracerProvider is sdktrace.NewTracerProvider with the replay-safe span IDs of workflow
// spans (telemetry.ReplaySafeIDs): SetupTracing's provider, and a test's.
func NewTracerProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append(opts, sdktrace.WithIDGenerator(telemetry.ReplaySafeIDs{}))...)
}
