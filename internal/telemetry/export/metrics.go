package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
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

// Metrics are the worker's metrics: the Temporal SDK's own and pveflow's, which the workflows
// and activities record through the SDK's metrics handler, on a meter provider of their own.
type Metrics struct {
	handler  client.MetricsHandler
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry // nil unless they are served for Prometheus
}

// NewMetrics builds the metrics for whatever reads them: with scrape, Prometheus, through
// HTTPHandler (--metrics-listen), which adds the Go runtime's and the process's metrics; and the
// reader OTEL_METRICS_EXPORTER names (see metricReader), whose metrics' resource names service
// as SetupTracing's spans do and whose console exporter writes to console. When neither reads
// them it returns nil: nothing is recorded then. A metric that cannot be recorded is logged to
// logger.
func NewMetrics(ctx context.Context, service string, scrape bool, logger *slog.Logger, console io.Writer) (_ *Metrics, err error) {
	reader, err := metricReader(ctx, console)
	if err != nil || reader == nil && !scrape {
		return nil, err
	}
	defer func() {
		if err != nil && reader != nil {
			err = errors.Join(err, reader.Shutdown(ctx))
		}
	}()
	m := &Metrics{}
	opts := []sdkmetric.Option{sdkmetric.WithView(sdkmetric.NewView(
		sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: secondsBuckets}},
	))}
	if reader != nil {
		res, err := serviceResource(ctx, service)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	}
	if scrape {
		m.registry = prometheus.NewRegistry()
		m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		// Prometheus knows its target by the scrape, so neither the OTel resource nor the
		// instrumentation scope adds anything but labels on every series.
		exporter, err := otelprom.New(otelprom.WithRegisterer(m.registry), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		opts = append(opts, sdkmetric.WithReader(exporter))
	}
	m.provider = sdkmetric.NewMeterProvider(opts...)
	m.handler = temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter: m.provider.Meter("pveflow"),
		// The default panics: a metric is not worth a worker.
		OnError:              func(err error) { logger.Warn("metric not recorded", slog.Any("error", err)) },
		UseMonotonicCounters: true,
	})
	return m, nil
}

// metricReader is the reader OTEL_METRICS_EXPORTER names, made by autoexport (otlp over
// OTEL_EXPORTER_OTLP_METRICS_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, every
// OTEL_METRIC_EXPORT_INTERVAL; prometheus, on a server of its own at
// OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT; console; none), or nil for
// none. Unset, it is none, not the specification's otlp: an OTLP endpoint set for the spans may
// be a collector that takes no metrics (Jaeger's). OTEL_SDK_DISABLED=true is none whatever
// else is set. A value autoexport does not know is an error naming the variable.
func metricReader(ctx context.Context, console io.Writer) (sdkmetric.Reader, error) {
	name := os.Getenv(envMetricsExporter)
	switch {
	case sdkDisabled(), name == "":
		return nil, nil
	case name == exporterConsole:
		exp, err := stdoutmetric.New(stdoutmetric.WithWriter(console))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", envMetricsExporter, name, err)
		}
		return sdkmetric.NewPeriodicReader(exp), nil
	}
	reader, err := autoexport.NewMetricReader(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %q: %w", envMetricsExporter, name, err)
	case autoexport.IsNoneMetricReader(reader):
		return nil, nil
	}
	return reader, nil
}

// Handler is the metrics handler for the Temporal client's options: the SDK records its own
// metrics with it, and workflow.GetMetricsHandler and activity.GetMetricsHandler hand it on.
func (m *Metrics) Handler() client.MetricsHandler { return m.handler }

// HTTPHandler serves the metrics in Prometheus's exposition formats; only metrics built with
// scrape have it.
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

// Close stops recording, and exports what the exporter OTEL_METRICS_EXPORTER names has not yet
// (within ctx).
func (m *Metrics) Close(ctx context.Context) error {
	return m.provider.Shutdown(ctx)
}
