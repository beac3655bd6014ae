package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/pveflow/pveflow/internal/telemetry/export"
)

// opsMux routes the worker's operations endpoints, all on the --metrics-listen address:
// /metrics for Prometheus, /healthz for liveness and /readyz for readiness.
func opsMux(metrics *export.Metrics, ready *readiness) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.HTTPHandler())
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", ready)
	return mux
}

// opsShutdownTimeout bounds the wait for scrapes in flight when the worker stops.
const opsShutdownTimeout = 5 * time.Second

// serveOps serves handler on addr until stop is called, and logs the address it listens on,
// which for a port 0 is the one the system chose.
func serveOps(addr string, handler http.Handler, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics endpoint stopped", slog.Any("error", err))
		}
	}()
	logger.Info("metrics serving", slog.String("url", "http://"+ln.Addr().String()+"/metrics"))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), opsShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	}, nil
}
