package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/syncbuf"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// metrics is one scrape of the metrics endpoint, by family name.
type metrics map[string]*dto.MetricFamily

func scrape(t *testing.T, url string) metrics {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value is the value of the series of family name that has labels (among others): a counter's
// or a gauge's value, a histogram's count. ok is false when there is no such series.
func (m metrics) value(name string, labels map[string]string) (v float64, ok bool) {
	fam := m[name]
	if fam == nil {
		return 0, false
	}
	for _, s := range fam.GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		switch fam.GetType() {
		case dto.MetricType_COUNTER:
			return s.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return s.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(s.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func hasLabels(s *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range s.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

var metricsURLRE = regexp.MustCompile(`msg="metrics serving" url=(\S+)`)

// metricsURL waits for the worker to log where it serves its metrics.
func metricsURL(t *testing.T, log *syncbuf.Buffer) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if m := metricsURLRE.FindStringSubmatch(log.String()); m != nil {
			return m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the worker logged no metrics address within a minute:\n%s", log.String())
	return ""
}

// stopVM stops a VM of the simulator whose directory is simDir, as a person would in PVE's UI.
func stopVM(t *testing.T, simDir, node string, vmid int) {
	t.Helper()
	url, err := os.ReadFile(filepath.Join(simDir, "url"))
	require.NoError(t, err)
	api, err := pve.NewClient(pve.ClientConfig{URL: strings.TrimSpace(string(url)),
		CAFile: filepath.Join(simDir, "ca.pem"), TokenFile: filepath.Join(simDir, "token")})
	require.NoError(t, err)
	_, err = api.Stop(t.Context(), node, vmid)
	require.NoError(t, err)
}

func TestRun_metricsShowProxiesProxmoxRequestsTaskWaitsClonesChecksAndHealsWithTheSDKsOwn(t *testing.T) {
	server := testserver.New(t)
	// One clone at a time onto a storage, so that of two creates one queues; checks every
	// second, so that a VM stopped is healed at once.
	sim, err := os.ReadFile(simulatorYAML)
	require.NoError(t, err)
	configPath := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(configPath, append(sim, "clones: {perStorage: 1}\nentity: {checkInterval: 1s, checkJitter: 0s}\n"...), 0o600))
	w := runSimWorker(t, server, "--config", configPath, "--simulator-clone-time", "1s", "--metrics-listen", "127.0.0.1:0")
	url := metricsURL(t, w.stderr)
	s := starter.New(server.Client(), "worker-test")
	uids := []string{"6c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f", "7d2e3f4a-5b6c-4d7e-8f9a-0b1c2d3e4f5a"}
	const badUID = "8e3f4a5b-6c7d-4e8f-9a0b-1c2d3e4f5a6b"
	var reqs []*starter.Request
	for _, uid := range uids {
		req, err := s.Create(context.Background(), proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small"})
		require.NoError(t, err)
		reqs = append(reqs, req)
	}
	// The proxy's entity refuses an unknown image before any CreateProxy runs.
	_, err = s.Create(context.Background(), proxyvm.ProxySpec{UID: badUID, Image: "no-such-image", MachineType: "small"})
	require.ErrorIs(t, err, starter.ErrRejected)
	waitCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	created := make(chan error, len(uids))
	results := make([]proxyvm.CreateProxyResult, len(uids))
	for i, req := range reqs {
		go func() { created <- req.Get(waitCtx, &results[i]) }()
	}

	// While the creates run, the admission of their storage shows one clone running and the
	// other queued.
	const storage = "pve1/local-lvm"
	var mostQueued, mostRunning float64
	for pending := len(uids); pending > 0; {
		select {
		case err := <-created:
			require.NoError(t, err, w.stderr.String())
			pending--
		case <-time.After(20 * time.Millisecond):
		}
		m := scrape(t, url)
		queued, _ := m.value("pveflow_clones_queued", map[string]string{"storage": storage})
		running, _ := m.value("pveflow_clones_running", map[string]string{"storage": storage})
		mostQueued, mostRunning = max(mostQueued, queued), max(mostRunning, running)
	}
	del, err := s.Delete(context.Background(), proxyvm.DeleteProxyInput{UID: uids[0]})
	require.NoError(t, err)
	require.NoError(t, del.Get(waitCtx, nil), w.stderr.String())
	// The second proxy's VM stopped behind pveflow's back: a check finds it, a heal starts it.
	stopVM(t, w.simDir, results[1].Node, results[1].VMID)
	healed := map[string]string{"kind": "create", "outcome": "completed"}
	require.Eventually(t, func() bool {
		_, ok := scrape(t, url).value("pveflow_proxy_heals_total", healed)
		return ok
	}, time.Minute, 100*time.Millisecond, "no heal counted:\n%s", w.stderr)
	m := scrape(t, url)

	assert.Equal(t, 1.0, mostQueued, "clones queued")
	assert.Equal(t, 1.0, mostRunning, "clones running")
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"pveflow_proxies_created_total", map[string]string{"outcome": "completed", "failure_type": ""}, 3},
		{"pveflow_proxies_deleted_total", map[string]string{"outcome": "completed", "failure_type": ""}, 1},
		{"pveflow_proxy_create_duration_seconds", map[string]string{"outcome": "completed"}, 3},
		{"pveflow_proxy_delete_duration_seconds", map[string]string{"outcome": "completed"}, 1},
		{"pveflow_proxmox_request_duration_seconds", map[string]string{"method": "Clone", "status_class": "2xx"}, 2},
		{"pveflow_proxmox_request_duration_seconds", map[string]string{"method": "UploadISO", "status_class": "2xx"}, 3},
		{"pveflow_proxmox_request_duration_seconds", map[string]string{"method": "Destroy", "status_class": "2xx"}, 1},
		{"pveflow_task_wait_duration_seconds", map[string]string{"task_type": "qmclone"}, 2},
		{"pveflow_task_wait_duration_seconds", map[string]string{"task_type": "imgcopy"}, 3},
		{"pveflow_task_wait_duration_seconds", map[string]string{"task_type": "qmstart"}, 3},
		{"pveflow_task_wait_duration_seconds", map[string]string{"task_type": "qmstop"}, 1},
		{"pveflow_task_wait_duration_seconds", map[string]string{"task_type": "qmdestroy"}, 1},
		{"pveflow_clones_queued", map[string]string{"storage": storage}, 0},
		{"pveflow_clones_running", map[string]string{"storage": storage}, 0},
		{"pveflow_proxy_checks_total", map[string]string{"found": "stopped"}, 1},
		{"pveflow_proxy_heals_total", healed, 1},
	}
	for _, tt := range tests {
		got, ok := m.value(tt.name, tt.labels)
		if assert.True(t, ok, "%s%v missing", tt.name, tt.labels) {
			assert.Equal(t, tt.want, got, "%s%v", tt.name, tt.labels)
		}
	}
	// A clone takes a second: its first poll finds it running.
	clonePolls, _ := m.value("pveflow_task_polls_total", map[string]string{"task_type": "qmclone"})
	assert.Greater(t, clonePolls, 2.0, "polls of the clones' waits")
	createTime := m["pveflow_proxy_create_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleSum()
	assert.Positive(t, createTime, "seconds spent creating")
	for _, sdk := range []string{"temporal_request_total", "temporal_workflow_completed_total", "temporal_activity_execution_latency_seconds"} {
		assert.Contains(t, m, sdk, "the SDK's own metrics")
	}
}

func TestRun_withoutTheEndpointMetricsGoToTheExporterOTELMetricsExporterNames(t *testing.T) {
	// The exporters read the process environment, as the OpenTelemetry SDK does.
	t.Setenv("OTEL_METRICS_EXPORTER", "console")
	server := testserver.New(t)
	w := runSimWorker(t, server)

	createProxy(t, server, w)
	require.Equal(t, exitOK, w.stop(), w.stderr.String())

	// The console exporter writes to stderr, among the logs, as the worker stops.
	assert.NotContains(t, w.stderr.String(), "metrics serving")
	assert.Contains(t, w.stderr.String(), `"Name":"pveflow_proxies_created"`)
	assert.Contains(t, w.stderr.String(), `"Name":"temporal_request"`, "the SDK's own")
	assert.Contains(t, w.stderr.String(), `{"Key":"service.name","Value":{"Type":"STRING","Value":"pveflow-worker"}}`)
}
