package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The Grafana dashboard of docker-compose.yaml, and the Prometheus configuration whose jobs its
// queries name.
var (
	dashboardPath        = filepath.Join("..", "compose", "grafana", "dashboards", "pveflow.json")
	composePrometheusYML = filepath.Join("..", "compose", "prometheus.yml")
)

// grafanaVariables stand for the variables Grafana puts into the dashboard's queries: the rate
// window is four scrapes of the compose file's Prometheus, and many of the test's.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "15s")

// dashboardTarget is one query of a panel of the dashboard.
type dashboardTarget struct {
	panel, expr string
}

func dashboardTargets(t *testing.T) []dashboardTarget {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(data, &d), dashboardPath)
	var out []dashboardTarget
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, target := range p.Targets {
			expr := grafanaVariables.Replace(target.Expr)
			require.NotContains(t, expr, "$", "panel %q: a Grafana variable the test does not stand in for", p.Title)
			out = append(out, dashboardTarget{panel: p.Title, expr: expr})
		}
	}
	require.NotEmpty(t, out, "%s has no panels", dashboardPath)
	return out
}

// prometheusServer is Debian's Prometheus, scraping targets by job name every second.
type prometheusServer struct{ url string }

func startPrometheus(t *testing.T, targets map[string]string) prometheusServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	require.NoError(t, err, "the dashboard's test runs Prometheus: apt-get install -y prometheus (.ci/run does)")
	type staticConfig struct {
		Targets []string `yaml:"targets"`
	}
	type scrapeConfig struct {
		JobName       string         `yaml:"job_name"`
		StaticConfigs []staticConfig `yaml:"static_configs"`
	}
	cfg := struct {
		Global        map[string]string `yaml:"global"`
		ScrapeConfigs []scrapeConfig    `yaml:"scrape_configs"`
	}{Global: map[string]string{"scrape_interval": "1s"}}
	for job, target := range targets {
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, scrapeConfig{JobName: job, StaticConfigs: []staticConfig{{Targets: []string{target}}}})
	}
	dir := t.TempDir()
	data, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	configFile := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(configFile, data, 0o600))
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testserver.FreePort(t)))
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+configFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	p := prometheusServer{url: "http://" + addr}
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 100*time.Millisecond, "Prometheus did not get ready within a minute:\n%s", &out)
	return p
}

// series is how many series expr selects now, or why Prometheus refused it.
func (p prometheusServer) series(expr string) (int, error) {
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var answer struct {
		Status, Error string
		Data          struct{ Result []json.RawMessage }
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return 0, fmt.Errorf("query %s: %w", expr, err)
	}
	if answer.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", expr, answer.Error)
	}
	return len(answer.Data.Result), nil
}

// composeJobs are the job names of the compose file's Prometheus, which the dashboard's queries
// name: the test's Prometheus scrapes its worker and server under the same.
func composeJobs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(composePrometheusYML)
	require.NoError(t, err)
	var cfg struct {
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(data, &cfg), composePrometheusYML)
	var jobs []string
	for _, c := range cfg.ScrapeConfigs {
		jobs = append(jobs, c.JobName)
	}
	return jobs
}

func TestRun_everyDashboardPanelShowsSeriesOfTheWorkerAndTheServer(t *testing.T) {
	targets := dashboardTargets(t)
	serverMetrics := testserver.FreePort(t)
	server := testserver.New(t, testserver.WithArgs("-metrics-port", strconv.Itoa(serverMetrics)))
	// One clone at a time, so that a create queues; a low rate, so that the call cap holds
	// requests back; checks every second, so that a stopped VM is healed at once.
	sim, err := os.ReadFile(simulatorYAML)
	require.NoError(t, err)
	config := strings.Replace(string(sim), "\nproxmox:\n", "\nproxmox:\n  calls: {perSecond: 10}\n", 1) +
		"clones: {perStorage: 1}\nentity: {checkInterval: 1s, checkJitter: 0s}\n"
	configPath := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(configPath, []byte(config), 0o600))
	w := runSimWorker(t, server, "--config", configPath, "--metrics-listen", "127.0.0.1:0")
	workerURL, err := url.Parse(metricsURL(t, w.stderr))
	require.NoError(t, err)
	jobTargets := map[string]string{"pveflow-worker": workerURL.Host, "temporal": net.JoinHostPort("127.0.0.1", strconv.Itoa(serverMetrics))}
	require.ElementsMatch(t, composeJobs(t), slices.Collect(maps.Keys(jobTargets)), "the jobs of %s, which the test scrapes", composePrometheusYML)
	prom := startPrometheus(t, jobTargets)

	// Two creates, one queued behind the other's clone; a change and a delete of the first;
	// the second's VM stopped, which a check finds and a heal starts again.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := starter.New(server.Client(), "worker-test")
	uids := []string{"6c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f", "7d2e3f4a-5b6c-4d7e-8f9a-0b1c2d3e4f5a"}
	var creates []*starter.Request
	for _, uid := range uids {
		req, err := s.Create(ctx, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small"})
		require.NoError(t, err)
		creates = append(creates, req)
	}
	var second proxyvm.CreateProxyResult
	require.NoError(t, creates[0].Get(ctx, nil), w.stderr.String())
	require.NoError(t, creates[1].Get(ctx, &second), w.stderr.String())
	change, err := s.Change(ctx, proxyvm.ChangeRequest{UID: uids[0], MachineType: "large"})
	require.NoError(t, err)
	require.NoError(t, change.Get(ctx, nil), w.stderr.String())
	del, err := s.Delete(ctx, proxyvm.DeleteProxyInput{UID: uids[0]})
	require.NoError(t, err)
	require.NoError(t, del.Get(ctx, nil), w.stderr.String())
	stopVM(t, w.simDir, second.Node, second.VMID)

	// Each query selects a series once Prometheus has scraped what it counts: the heal's
	// after it ended.
	empty := map[dashboardTarget]string{}
	for _, target := range targets {
		empty[target] = "not asked"
	}
	deadline := time.Now().Add(time.Minute)
	for len(empty) > 0 && time.Now().Before(deadline) {
		for target := range empty {
			switch n, err := prom.series(target.expr); {
			case err != nil:
				empty[target] = err.Error()
			case n == 0:
				empty[target] = "no series"
			default:
				delete(empty, target)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	for target, why := range empty {
		assert.Fail(t, "a dashboard panel shows nothing", "panel %q, query %s: %s", target.panel, target.expr, why)
	}
}
