package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/pveflow/pveflow/internal/pvesim"
)

// serveState serves the cluster's State as JSON at /state on addr, a loopback address, over
// plain HTTP and outside /api2/json: it is the chaos checker's view of the cluster, which no
// PVE has. It returns the URL of /state and a function that stops serving.
func serveState(cluster *pvesim.Cluster, addr string, logger *slog.Logger) (url string, stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("-state-listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", nil, fmt.Errorf("-state-listen %q is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(cluster.State()); err != nil {
			logger.Debug("pvesim state", "error", err)
		}
	})
	srv := &http.Server{Handler: mux}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Error("pvesim state server stopped", slog.Any("error", err))
		}
	}()
	return "http://" + ln.Addr().String() + "/state", func() { srv.Close() }, nil
}
