package export

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
)

// proxmoxRequestDuration is the timer of Proxmox API requests, by API method and status class.
// Prometheus shows it as the histogram pveflow_proxmox_request_duration_seconds, whose _count
// counts the requests.
const proxmoxRequestDuration = "pveflow_proxmox_request_duration"

// proxmoxRequestHeld is the timer of Proxmox API requests the call cap (proxmox.calls) held back
// before sending them, by API method, and how long each waited. Prometheus shows it as the
// histogram pveflow_proxmox_request_held_duration_seconds, whose _count counts the requests held
// back.
const proxmoxRequestHeld = "pveflow_proxmox_request_held_duration"

// secondsBuckets are the bucket bounds of every histogram, all of them in seconds: from a quick
// API request to a clone of a large disk, and the SDK's own latencies.
var secondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// Metrics are the worker's Prometheus metrics: the Temporal SDK's own and pveflow's, which the
// workflows and activities record through the SDK's metrics handler, on a registry of their own.
type Metrics struct {
	handler  client.MetricsHandler
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry
}

// NewMetrics builds the metrics; a metric that cannot be recorded is logged to logger.
func NewMetrics(logger *slog.Logger) (*Metrics, error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Prometheus knows its target by the scrape, so neither the OTel resource nor the
	// instrumentation scope adds anything but labels on every series.
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(exporter),
		sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: secondsBuckets}},
		)),
	)
	handler := temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter: provider.Meter("pveflow"),
		// The default panics: a metric is not worth a worker.
		OnError:              func(err error) { logger.Warn("metric not recorded", slog.Any("error", err)) },
		UseMonotonicCounters: true,
	})
	return &Metrics{handler: handler, provider: provider, registry: registry}, nil
}

// Handler is the metrics handler for the Temporal client's options: the SDK records its own
// metrics with it, and workflow.GetMetricsHandler and activity.GetMetricsHandler hand it on.
func (m *Metrics) Handler() client.MetricsHandler { return m.handler }

// HTTPHandler serves the metrics in Prometheus's exposition formats.
func (m *Metrics) HTTPHandler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// ObserveProxmoxRequest records a Proxmox API request; it is pve.ClientConfig.ObserveRequest.
func (m *Metrics) ObserveProxmoxRequest(method, statusClass string, took time.Duration) {
	m.handler.WithTags(map[string]string{"method": method, "status_class": statusClass}).
		Timer(proxmoxRequestDuration).Record(took)
}

// ObserveProxmoxHeld records a Proxmox API request the call cap held back; it is
// pve.ClientConfig.ObserveHeld.
func (m *Metrics) ObserveProxmoxHeld(method string, held time.Duration) {
	m.handler.WithTags(map[string]string{"method": method}).Timer(proxmoxRequestHeld).Record(held)
}

// Close stops recording.
func (m *Metrics) Close(ctx context.Context) error {
	return m.provider.Shutdown(ctx)
}
