package export

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
)

// otelEnv sets the standard variables the exporters are chosen by to vars, and every other one
// to empty (unset, to the SDK), for the test: SetupTracing and NewMetrics read the process
// environment, as the OpenTelemetry SDK does.
func otelEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, k := range []string{
		envTracesExporter, envMetricsExporter, envSDKDisabled, envEndpoint, envTracesEndpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	} {
		t.Setenv(k, vars[k])
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
}

func TestSetupTracing_exportsNothingUnlessAsked(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
	}{
		{"nothing set", nil},
		{"none", map[string]string{envTracesExporter: "none"}},
		{"none beats an endpoint", map[string]string{envTracesExporter: "none", envEndpoint: "http://127.0.0.1:4318"}},
		{"the SDK disabled", map[string]string{envSDKDisabled: "true", envTracesExporter: "console"}},
		{"an endpoint for metrics only", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:4318/v1/metrics"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			otelEnv(t, tc.vars)
			before := otel.GetTracerProvider()
			var console bytes.Buffer

			shutdown, err := SetupTracing(context.Background(), "pveflow-test", &console)

			require.NoError(t, err)
			assert.Same(t, before, otel.GetTracerProvider())
			assert.NoError(t, shutdown(context.Background()))
			assert.Empty(t, console.String())
		})
	}
}

func TestSetupTracing_whatItCannotExportIsAStartUpErrorNamingTheVariable(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"unknown exporter", map[string]string{envTracesExporter: "jaeger"}, `OTEL_TRACES_EXPORTER "jaeger": unknown exporter`},
		{"a list", map[string]string{envTracesExporter: "otlp,console"}, `OTEL_TRACES_EXPORTER "otlp,console": unknown exporter`},
		{"unknown protocol", map[string]string{envTracesExporter: "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			`OTEL_TRACES_EXPORTER "otlp": invalid OTLP protocol`},
		{"unknown traces protocol with an endpoint", map[string]string{envEndpoint: "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"},
			`OTEL_TRACES_EXPORTER "": invalid OTLP protocol`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			otelEnv(t, tc.vars)

			_, err := SetupTracing(context.Background(), "pveflow-test", &bytes.Buffer{})

			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// consoleSpan sets tracing up with the console exporter, ends one span on the global provider,
// shuts tracing down and returns what the exporter wrote.
func consoleSpan(t *testing.T) string {
	t.Helper()
	before := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(before) })
	var console bytes.Buffer
	shutdown, err := SetupTracing(context.Background(), "pveflow-test", &console)
	require.NoError(t, err)
	_, span := otel.Tracer("test").Start(context.Background(), "the-span")
	span.End()
	require.NoError(t, shutdown(context.Background()))
	return console.String()
}

func TestSetupTracing_consoleExportsTheGlobalProvidersSpansOnShutdown(t *testing.T) {
	otelEnv(t, map[string]string{envTracesExporter: "console"})

	out := consoleSpan(t)

	assert.Contains(t, out, `"Name":"the-span"`)
	assert.Contains(t, out, `{"Key":"service.name","Value":{"Type":"STRING","Value":"pveflow-test"}}`, "the default service name")
}

func TestSetupTracing_serviceNameFromTheEnvironmentWins(t *testing.T) {
	otelEnv(t, map[string]string{
		envTracesExporter:          "console",
		"OTEL_SERVICE_NAME":        "edge-proxies",
		"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=staging",
	})

	out := consoleSpan(t)

	assert.Contains(t, out, `{"Key":"service.name","Value":{"Type":"STRING","Value":"edge-proxies"}}`)
	assert.Contains(t, out, `{"Key":"deployment.environment.name","Value":{"Type":"STRING","Value":"staging"}}`)
	assert.NotContains(t, out, "pveflow-test")
}

func TestSetupTracing_otlpSetsTheGlobalProvider(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
	}{
		{"an endpoint alone, over http/protobuf", map[string]string{envEndpoint: "http://127.0.0.1:4318"}},
		{"a traces endpoint alone", map[string]string{envTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}},
		{"otlp over grpc", map[string]string{envTracesExporter: "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", envEndpoint: "http://127.0.0.1:4317"}},
		{"the traces protocol wins", map[string]string{envTracesExporter: "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "udp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			otelEnv(t, tc.vars)
			before := otel.GetTracerProvider()
			t.Cleanup(func() { otel.SetTracerProvider(before) })

			// Exporters dial on their first export: none happens here.
			shutdown, err := SetupTracing(context.Background(), "pveflow-test", &bytes.Buffer{})

			require.NoError(t, err)
			assert.NotSame(t, before, otel.GetTracerProvider())
			assert.NoError(t, shutdown(context.Background()))
		})
	}
}
