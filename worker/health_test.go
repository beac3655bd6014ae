package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/internal/testserver"
)

// get answers a GET of url with its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestRun_readyOncePollingAndNotWhileProxmoxOrTemporalIsUnreachable follows /readyz through a
// worker's life: ready once it polls, not ready when Proxmox stops answering, nor when Temporal
// does, while /healthz says all along that the process serves.
func TestRun_readyOncePollingAndNotWhileProxmoxOrTemporalIsUnreachable(t *testing.T) {
	sim, err := simserver.Start(simserver.Options{API: pvesim.New(pvesim.Default()), Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	server := testserver.New(t)
	w := runWorker(t, server, "--config", writeSimConfig(t, sim, sim.TokenFile()), "--metrics-listen", "127.0.0.1:0")
	base := strings.TrimSuffix(metricsURL(t, w.stderr), "/metrics")
	readyz := func() (int, string) { return get(t, base+"/readyz") }

	require.Eventually(t, func() bool { code, _ := readyz(); return code == http.StatusOK }, time.Minute, 100*time.Millisecond,
		"the worker becomes ready once it polls")
	_, body := readyz()
	assert.Equal(t, "temporal: ok\nproxmox: ok\n", body)

	require.NoError(t, sim.Close())
	code, body := readyz()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "temporal: ok\n")
	assert.Contains(t, body, "proxmox: ")
	assert.NotContains(t, body, "proxmox: ok")

	server.Stop()
	code, body = readyz()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.NotContains(t, body, "temporal: ok")
	code, body = get(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)
}
