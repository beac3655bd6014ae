// Package export is the half of pveflow's telemetry that only its programs need, the worker and
// the pveflow CLI: the tracer provider with its span exporters (OTLP, console) from the OTEL_*
// environment, and the worker's Prometheus metrics. It holds the OpenTelemetry SDK, the
// exporters and the Prometheus client, which the library packages (starter, workflows,
// activities) must not pull into a program that imports them: those use package telemetry,
// which needs only the OpenTelemetry API.
package export

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/pveflow/pveflow/internal/telemetry"
)

// The standard variables that choose the span exporters, and their values.
const (
	envTracesExporter     = "OTEL_TRACES_EXPORTER"
	envSDKDisabled        = "OTEL_SDK_DISABLED"
	envEndpoint           = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint     = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol           = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol     = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	exporterOTLP          = "otlp"
	exporterConsole       = "console"
	exporterNone          = "none"
	protocolGRPC          = "grpc"
	protocolHTTPProtobuf  = "http/protobuf"
	defaultOTLPProtocol   = protocolHTTPProtobuf // the specification's default
	tracesExporterChoices = "otlp, console or none"
)

// exportChoice is what the environment asks of span export: no exporter at all (the zero
// value), or the named exporters with the OTLP protocol when one of them is otlp.
type exportChoice struct {
	exporters []string
	protocol  string
}

// chooseExport reads the choice from the standard variables (getenv is os.Getenv outside
// tests; "" is unset):
//
//   - OTEL_SDK_DISABLED=true: nothing is exported;
//   - OTEL_TRACES_EXPORTER: a comma-separated list of otlp and console, or none; unset, it
//     is otlp when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
//     and none otherwise;
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL: grpc or
//     http/protobuf (the default).
//
// Anything else is an error naming the variable.
func chooseExport(getenv func(string) string) (exportChoice, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return exportChoice{}, nil
	}
	value := strings.ToLower(strings.TrimSpace(getenv(envTracesExporter)))
	if value == "" {
		if getenv(envEndpoint) == "" && getenv(envTracesEndpoint) == "" {
			return exportChoice{}, nil
		}
		value = exporterOTLP
	}
	var choice exportChoice
	for name := range strings.SplitSeq(value, ",") {
		switch name = strings.TrimSpace(name); name {
		case exporterOTLP, exporterConsole:
			if !slices.Contains(choice.exporters, name) {
				choice.exporters = append(choice.exporters, name)
			}
		case exporterNone:
			if value != exporterNone {
				return exportChoice{}, fmt.Errorf("%s %q: none stands alone", envTracesExporter, getenv(envTracesExporter))
			}
			return exportChoice{}, nil
		default:
			return exportChoice{}, fmt.Errorf("%s %q: want %s", envTracesExporter, getenv(envTracesExporter), tracesExporterChoices)
		}
	}
	if slices.Contains(choice.exporters, exporterOTLP) {
		variable := envTracesProtocol
		if getenv(variable) == "" {
			variable = envProtocol
		}
		switch p := cmp.Or(strings.TrimSpace(getenv(variable)), defaultOTLPProtocol); p {
		case protocolGRPC, protocolHTTPProtobuf:
			choice.protocol = p
		default:
			return exportChoice{}, fmt.Errorf("%s %q: want %s or %s", variable, getenv(variable), protocolGRPC, protocolHTTPProtobuf)
		}
	}
	return choice, nil
}

// SetupTracing makes the tracer provider the standard environment asks for (see chooseExport)
// the global one, for the Temporal interceptor (telemetry.TracingInterceptor) and the Proxmox
// transport (PVETransport) on otel.GetTracerProvider(), and returns the func that flushes and
// stops it.
// The spans' resource names service, a default service.name that OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override. The console exporter writes to console.
//
// When nothing asks for an exporter, it changes nothing and its shutdown does nothing: spans
// are then never recorded. getenv makes that choice; the exporters read their endpoint,
// headers, TLS and timeouts, and the resource its attributes, from the process environment as
// the OpenTelemetry SDK does.
func SetupTracing(ctx context.Context, getenv func(string) string, service string, console io.Writer) (shutdown func(context.Context) error, err error) {
	choice, err := chooseExport(getenv)
	if err != nil || len(choice.exporters) == 0 {
		return func(context.Context) error { return nil }, err
	}
	opts := make([]sdktrace.TracerProviderOption, 0, len(choice.exporters)+1)
	for _, name := range choice.exporters {
		exp, err := newExporter(ctx, name, choice.protocol, console)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	// Later detectors win: the environment's service name over the default.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// newExporter makes the exporter called name, one of chooseExport's.
func newExporter(ctx context.Context, name, protocol string, console io.Writer) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch {
	case name == exporterConsole:
		exp, err = stdouttrace.New(stdouttrace.WithWriter(console))
	case protocol == protocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("%s span exporter: %w", name, err)
	}
	return exp, nil
}

// NewTracerProvider is sdktrace.NewTracerProvider with the replay-safe span IDs of workflow
// spans (telemetry.ReplaySafeIDs): SetupTracing's provider, and a test's.
func NewTracerProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append(opts, sdktrace.WithIDGenerator(telemetry.ReplaySafeIDs{}))...)
}
