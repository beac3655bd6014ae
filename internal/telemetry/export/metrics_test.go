package export_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/telemetry/export"
)

// scrape is what the metrics' HTTP handler serves, in Prometheus's text format.
func scrape(t *testing.T, m *export.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, 200, rec.Code)
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return string(body)
}

func newMetrics(t *testing.T, logTo io.Writer) *export.Metrics {
	t.Helper()
	m, err := export.NewMetrics(slog.New(slog.NewTextHandler(logTo, nil)))
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
