package export

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrape is what the metrics' HTTP handler serves, in Prometheus's text format.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, 200, rec.Code)
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return string(body)
}

// newMetrics is the metrics Prometheus scrapes, with nothing else asked of the OTEL_*
// environment.
func newMetrics(t *testing.T, logTo io.Writer) *Metrics {
	t.Helper()
	otelEnv(t, nil)
	m, err := NewMetrics(t.Context(), "pveflow-test", true, slog.New(slog.NewTextHandler(logTo, nil)), io.Discard)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close(t.Context())) })
	return m
}

func TestMetrics_handlerCountersGaugesAndTimersAreServedWithPrometheusNames(t *testing.T) {
	m := newMetrics(t, io.Discard)
	h := m.Handler().WithTags(map[string]string{"outcome": "completed"})

	h.Counter("pveflow_things").Inc(2)
	h.Gauge("pveflow_level").Update(3)
	h.Timer("pveflow_wait_duration").Record(1500 * time.Millisecond)

	text := scrape(t, m)
	assert.Contains(t, text, "# TYPE pveflow_things_total counter\npveflow_things_total{outcome=\"completed\"} 2\n")
	assert.Contains(t, text, "# TYPE pveflow_level gauge\npveflow_level{outcome=\"completed\"} 3\n")
	assert.Contains(t, text, "# TYPE pveflow_wait_duration_seconds histogram\n")
	assert.Contains(t, text, "pveflow_wait_duration_seconds_bucket{outcome=\"completed\",le=\"1\"} 0\n")
	assert.Contains(t, text, "pveflow_wait_duration_seconds_bucket{outcome=\"completed\",le=\"2.5\"} 1\n")
	assert.Contains(t, text, "pveflow_wait_duration_seconds_sum{outcome=\"completed\"} 1.5\n")
}

func TestMetrics_proxmoxRequestsByMethodAndStatusClass(t *testing.T) {
	m := newMetrics(t, io.Discard)

	m.ObserveProxmoxRequest("Clone", "2xx", 20*time.Millisecond)
	m.ObserveProxmoxRequest("Clone", "2xx", 30*time.Millisecond)
	m.ObserveProxmoxRequest("VMConfig", "5xx", 10*time.Millisecond)

	text := scrape(t, m)
	assert.Contains(t, text, `pveflow_proxmox_request_duration_seconds_count{method="Clone",status_class="2xx"} 2`+"\n")
	assert.Contains(t, text, `pveflow_proxmox_request_duration_seconds_bucket{method="Clone",status_class="2xx",le="0.025"} 1`+"\n")
	assert.Contains(t, text, `pveflow_proxmox_request_duration_seconds_count{method="VMConfig",status_class="5xx"} 1`+"\n")
}

func TestMetrics_proxmoxRequestsHeldByMethod(t *testing.T) {
	m := newMetrics(t, io.Discard)

	m.ObserveProxmoxHeld("TaskStatus", 40*time.Millisecond)
	m.ObserveProxmoxHeld("TaskStatus", 2*time.Second)

	text := scrape(t, m)
	assert.Contains(t, text, `pveflow_proxmox_request_held_duration_seconds_count{method="TaskStatus"} 2`+"\n")
	assert.Contains(t, text, `pveflow_proxmox_request_held_duration_seconds_bucket{method="TaskStatus",le="0.05"} 1`+"\n")
}

func TestMetrics_processAndGoRuntimeMetricsAreServed(t *testing.T) {
	text := scrape(t, newMetrics(t, io.Discard))

	assert.Contains(t, text, "\ngo_goroutines ")
	assert.Contains(t, text, "\nprocess_start_time_seconds ")
}

func TestMetrics_aMetricThatCannotBeRecordedIsLoggedNotPanicked(t *testing.T) {
	var log bytes.Buffer
	m := newMetrics(t, &log)

	assert.NotPanics(t, func() { m.Handler().Counter("not a valid name").Inc(1) })

	assert.Contains(t, log.String(), "metric not recorded")
}

func TestNewMetrics_recordsNothingWhenNothingReadsThem(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
	}{
		{"nothing set", nil},
		{"an OTLP endpoint is for the spans", map[string]string{envEndpoint: "http://127.0.0.1:4318"}},
		{"none", map[string]string{envMetricsExporter: "none"}},
		{"the SDK disabled", map[string]string{envSDKDisabled: "true", envMetricsExporter: "console"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			otelEnv(t, tc.vars)

			m, err := NewMetrics(t.Context(), "pveflow-test", false, slog.New(slog.DiscardHandler), io.Discard)

			require.NoError(t, err)
			assert.Nil(t, m)
		})
	}
}

func TestNewMetrics_consoleExportsOnCloseBesidesTheScrape(t *testing.T) {
	otelEnv(t, map[string]string{envMetricsExporter: "console"})
	var console bytes.Buffer
	m, err := NewMetrics(t.Context(), "pveflow-test", true, slog.New(slog.DiscardHandler), &console)
	require.NoError(t, err)

	m.ObserveProxmoxRequest("Clone", "2xx", 20*time.Millisecond)

	assert.Contains(t, scrape(t, m), `pveflow_proxmox_request_duration_seconds_count{method="Clone",status_class="2xx"} 1`+"\n")
	require.NoError(t, m.Close(t.Context()))
	assert.Contains(t, console.String(), `"Name":"pveflow_proxmox_request_duration"`)
	assert.Contains(t, console.String(), `{"Key":"service.name","Value":{"Type":"STRING","Value":"pveflow-test"}}`)
}

func TestNewMetrics_consoleAloneRecordsWithoutTheScrape(t *testing.T) {
	otelEnv(t, map[string]string{envMetricsExporter: "console"})
	var console bytes.Buffer
	m, err := NewMetrics(t.Context(), "pveflow-test", false, slog.New(slog.DiscardHandler), &console)
	require.NoError(t, err)

	m.Handler().Counter("pveflow_things").Inc(2)

	require.NoError(t, m.Close(t.Context()))
	assert.Contains(t, console.String(), `"Name":"pveflow_things"`)
}

func TestNewMetrics_otlpAndPrometheusMakeAReader(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
	}{
		// Nothing listens there: the reader dials on its first export, at Close.
		{"otlp", map[string]string{envMetricsExporter: "otlp", envEndpoint: "http://" + closedAddr(t)}},
		// A server of its own, on a port of the system's choosing.
		{"prometheus", map[string]string{envMetricsExporter: "prometheus",
			"OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT": "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			otelEnv(t, tc.vars)

			m, err := NewMetrics(t.Context(), "pveflow-test", false, slog.New(slog.DiscardHandler), io.Discard)

			require.NoError(t, err)
			require.NotNil(t, m)
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			_ = m.Close(ctx) // nothing listens for otlp's last export: its error is not the point
		})
	}
}

func TestNewMetrics_anExporterItCannotMakeIsAnErrorNamingTheVariable(t *testing.T) {
	otelEnv(t, map[string]string{envMetricsExporter: "statsd"})

	_, err := NewMetrics(t.Context(), "pveflow-test", true, slog.New(slog.DiscardHandler), io.Discard)

	require.Error(t, err)
	assert.Contains(t, err.Error(), `OTEL_METRICS_EXPORTER "statsd": unknown exporter`)
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
