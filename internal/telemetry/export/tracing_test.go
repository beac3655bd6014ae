package export

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestChooseExport_readsTheStandardVariables(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want exportChoice
	}{
		{"nothing set exports nothing", nil, exportChoice{}},
		{"none", map[string]string{envTracesExporter: "none"}, exportChoice{}},
		{"none beats an endpoint", map[string]string{envTracesExporter: "none", envEndpoint: "http://127.0.0.1:4318"}, exportChoice{}},
		{"an endpoint alone means otlp over http/protobuf", map[string]string{envEndpoint: "http://127.0.0.1:4318"},
			exportChoice{exporters: []string{"otlp"}, protocol: "http/protobuf"}},
		{"a traces endpoint alone means otlp", map[string]string{envTracesEndpoint: "http://127.0.0.1:4318/v1/traces"},
			exportChoice{exporters: []string{"otlp"}, protocol: "http/protobuf"}},
		{"otlp over grpc", map[string]string{envTracesExporter: "otlp", envProtocol: "grpc"},
			exportChoice{exporters: []string{"otlp"}, protocol: "grpc"}},
		{"the traces protocol wins", map[string]string{envTracesExporter: "otlp", envProtocol: "grpc", envTracesProtocol: "http/protobuf"},
			exportChoice{exporters: []string{"otlp"}, protocol: "http/protobuf"}},
		{"console needs no protocol", map[string]string{envTracesExporter: "console", envProtocol: "http/json"},
			exportChoice{exporters: []string{"console"}}},
		{"a list, spaced, cased and repeated", map[string]string{envTracesExporter: " Console, otlp ,console"},
			exportChoice{exporters: []string{"console", "otlp"}, protocol: "http/protobuf"}},
		{"the SDK disabled exports nothing", map[string]string{envSDKDisabled: "true", envTracesExporter: "otlp"}, exportChoice{}},
		{"the SDK not disabled", map[string]string{envSDKDisabled: "false", envTracesExporter: "console"},
			exportChoice{exporters: []string{"console"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseExport(env(tc.vars))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestChooseExport_refusesWhatItCannotExport(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"unknown exporter", map[string]string{envTracesExporter: "zipkin"}, `OTEL_TRACES_EXPORTER "zipkin": want otlp, console or none`},
		{"empty list item", map[string]string{envTracesExporter: "otlp,"}, `OTEL_TRACES_EXPORTER "otlp,": want otlp, console or none`},
		{"none in a list", map[string]string{envTracesExporter: "otlp,none"}, `OTEL_TRACES_EXPORTER "otlp,none": none stands alone`},
		{"unknown protocol", map[string]string{envTracesExporter: "otlp", envProtocol: "http/json"},
			`OTEL_EXPORTER_OTLP_PROTOCOL "http/json": want grpc or http/protobuf`},
		{"unknown traces protocol", map[string]string{envEndpoint: "http://127.0.0.1:4317", envTracesProtocol: "udp"},
			`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL "udp": want grpc or http/protobuf`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := chooseExport(env(tc.vars))
			assert.EqualError(t, err, tc.want)
		})
	}
}

func TestSetupTracing_withNothingSetLeavesTheGlobalProviderAlone(t *testing.T) {
	before := otel.GetTracerProvider()

	shutdown, err := SetupTracing(context.Background(), env(nil), "pveflow-test", &bytes.Buffer{})

	require.NoError(t, err)
	assert.Same(t, before, otel.GetTracerProvider())
	assert.NoError(t, shutdown(context.Background()))
}

func TestSetupTracing_unknownExporterIsAStartUpError(t *testing.T) {
	_, err := SetupTracing(context.Background(), env(map[string]string{envTracesExporter: "jaeger"}), "pveflow-test", &bytes.Buffer{})

	assert.EqualError(t, err, `OTEL_TRACES_EXPORTER "jaeger": want otlp, console or none`)
}

// consoleSpan sets tracing up with the console exporter, ends one span on the global provider,
// shuts tracing down and returns what the exporter wrote.
func consoleSpan(t *testing.T) string {
	t.Helper()
	before := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(before) })
	var console bytes.Buffer
	shutdown, err := SetupTracing(context.Background(), env(map[string]string{envTracesExporter: "console"}), "pveflow-test", &console)
	require.NoError(t, err)
	_, span := otel.Tracer("test").Start(context.Background(), "the-span")
	span.End()
	require.NoError(t, shutdown(context.Background()))
	return console.String()
}

func TestSetupTracing_consoleExportsTheGlobalProvidersSpansOnShutdown(t *testing.T) {
	// The resource reads the process environment, as the OpenTelemetry SDK does.
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")

	out := consoleSpan(t)

	assert.Contains(t, out, `"Name":"the-span"`)
	assert.Contains(t, out, `{"Key":"service.name","Value":{"Type":"STRING","Value":"pveflow-test"}}`, "the default service name")
}

func TestSetupTracing_serviceNameFromTheEnvironmentWins(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "edge-proxies")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=staging")

	out := consoleSpan(t)

	assert.Contains(t, out, `{"Key":"service.name","Value":{"Type":"STRING","Value":"edge-proxies"}}`)
	assert.Contains(t, out, `{"Key":"deployment.environment.name","Value":{"Type":"STRING","Value":"staging"}}`)
	assert.NotContains(t, out, "pveflow-test")
}

func TestSetupTracing_otlpOverEitherProtocolSetsTheGlobalProvider(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			before := otel.GetTracerProvider()
			t.Cleanup(func() { otel.SetTracerProvider(before) })

			// Exporters dial on their first export: none happens here.
			shutdown, err := SetupTracing(context.Background(), env(map[string]string{
				envEndpoint: "http://127.0.0.1:4318", envProtocol: protocol,
			}), "pveflow-test", &bytes.Buffer{})

			require.NoError(t, err)
			assert.NotSame(t, before, otel.GetTracerProvider())
			assert.NoError(t, shutdown(context.Background()))
		})
	}
}
