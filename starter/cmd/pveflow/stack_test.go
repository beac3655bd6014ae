package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/syncbuf"
	"github.com/pveflow/pveflow/internal/testserver"
)

// The end-to-end tests run pveflow the way `make run` does: the embedded Temporal server, the
// worker and this CLI, each a process of its own.
// One server serves every test; each test has a task queue and a worker of its own.

// shared is what the end-to-end tests share, made by the first that runs.
var shared struct {
	once     sync.Once
	err      error
	bin      string // directory of the built worker, pveflow and pvesim
	server   *testserver.Server
	temporal string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.server != nil {
		shared.server.Stop()
	}
	if shared.bin != "" {
		_ = os.RemoveAll(shared.bin)
	}
	os.Exit(code)
}

// e2e is one end-to-end test's view of the shared stack.
type e2e struct {
	t         *testing.T
	taskQueue string
	extraEnv  []string // NAME=value for every process, besides the server's
}

// newE2E builds the binaries and starts the Temporal server on first use.
func newE2E(t *testing.T, taskQueue string) *e2e {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the worker and the CLI and runs them against a Temporal server")
	}
	shared.once.Do(func() {
		if shared.bin, shared.err = os.MkdirTemp("", "pveflow-e2e-"); shared.err != nil {
			return
		}
		build := exec.Command("go", "build", "-o", shared.bin+string(filepath.Separator),
			"./worker", "./starter/cmd/pveflow", "./internal/pvesim/cmd/pvesim")
		build.Dir = filepath.Join("..", "..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			shared.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		if shared.server, shared.err = testserver.Start(); shared.err == nil {
			shared.temporal = shared.server.Address()
		}
	})
	require.NoError(t, shared.err)
	return &e2e{t: t, taskQueue: taskQueue}
}

// env is the whole environment of the processes: the Temporal server, the test's extraEnv, and
// nothing from the environment the tests run in.
func (s *e2e) env() []string {
	return append([]string{"TEMPORAL_ADDRESS=" + shared.temporal, "TEMPORAL_NAMESPACE=default"}, s.extraEnv...)
}

// writeConfig writes a worker configuration for the simulator's default cluster. Its url,
// caFile and tokenFile are the simulator's, or placeholders for -simulator to replace.
// Its budgets and polls are those of a quick simulator, so that a wait that goes wrong fails
// the test within seconds; budgets are more of its budgets, such as "clone: 4s". It has no
// call cap: the default is sized for a cluster's budgets, which a call's attempt here (a third
// of unlock's 2 s) is a few hundred times shorter than; the cap has tests of its own
// (TestServer_callCapHoldsTheClientToItsRateAndConcurrency).
func (s *e2e) writeConfig(url, caFile, tokenFile string, budgets ...string) string {
	s.t.Helper()
	yaml := fmt.Sprintf(`proxmox:
  url: %s
  caFile: %q
  tokenFile: %q
  nodes: [pve1]
  isoStorage: local
  storage: local-lvm
  templates: {debian13: {vmid: 9000}}
  machineTypes: {small: {cores: 2, memoryMiB: 2048, diskGiB: 10}, large: {cores: 4, memoryMiB: 4096, diskGiB: 20}}
  calls: {perSecond: 0, concurrency: 0}
budgets: {%s}
poll: {initialInterval: 500ms, backoffCoefficient: 1.2, maximumInterval: 2s}
`, url, caFile, tokenFile, strings.Join(append([]string{"unlock: 2s", "request: 5s"}, budgets...), ", "))
	path := filepath.Join(s.t.TempDir(), "config.yaml")
	require.NoError(s.t, os.WriteFile(path, []byte(yaml), 0o600))
	return path
}

// simulatorConfig is a configuration for -simulator.
func (s *e2e) simulatorConfig() string {
	return s.writeConfig("https://127.0.0.1:8006", "", "replaced-by-the-simulator")
}

// process is a background process of a test: a worker or the simulator.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
	err  error // of Wait, once done is closed
}

// start starts the built program name in the background. When the test ends, a process still
// running gets SIGTERM and must exit 0 within a minute.
func (s *e2e) start(name string, args ...string) *process {
	s.t.Helper()
	p := &process{name: name, cmd: exec.Command(filepath.Join(shared.bin, name), args...), log: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = s.env()
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	require.NoError(s.t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	s.t.Cleanup(func() {
		p.stop(s.t)
		if s.t.Failed() {
			s.t.Logf("%s log:\n%s", name, p.log)
		}
	})
	return p
}

// startWorker starts a worker polling the test's task queue.
func (s *e2e) startWorker(args ...string) *process {
	s.t.Helper()
	return s.start("worker", append([]string{"--task-queue", s.taskQueue}, args...)...)
}

// startSimulatorWorker starts a worker in simulator mode and returns it and its simulator's
// directory.
func (s *e2e) startSimulatorWorker() (*process, string) {
	s.t.Helper()
	dir := s.t.TempDir()
	w := s.startWorker("--simulator", "--simulator-dir", dir, "--config", s.simulatorConfig(),
		"--simulator-clone-time", "3s", "--simulator-agent-delay", "500ms")
	require.Eventually(s.t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "url"))
		return err == nil
	}, time.Minute, 50*time.Millisecond, "the worker writes its simulator's URL")
	return w, dir
}

// kill ends the process with SIGKILL, as a crash would.
func (p *process) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	<-p.done
}

func (p *process) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	assert.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
		assert.NoError(t, p.err, "%s exits 0 on SIGTERM", p.name)
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		t.Errorf("%s did not stop within a minute of SIGTERM", p.name)
	}
}

// cli is the outcome of one pveflow command.
type cliRun struct {
	stdout, stderr string
	code           int
}

// pveflow runs the CLI on the test's task queue and waits up to two minutes for it.
func (s *e2e) pveflow(args ...string) cliRun {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(shared.bin, "pveflow"), append([]string{"--task-queue", s.taskQueue}, args...)...)
	cmd.Env = s.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		require.NoError(s.t, err)
	}
	return cliRun{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// startPVESim starts the simulator's own command, which outlives any worker, and returns its
// URL and directory (ca.pem, token). Its tasks take twice as long as a small host's: a clone
// takes 8 s.
func (s *e2e) startPVESim() (url, dir string) {
	s.t.Helper()
	dir = s.t.TempDir()
	p := &process{name: "pvesim", log: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(shared.bin, "pvesim"), "-listen", "127.0.0.1:0", "-dir", dir,
		"-auth-delay", "0s", "-resources-lag", "2s", "-agent-boot-delay", "500ms", "-task-scale", "2")
	p.cmd.Env = s.env()
	p.cmd.Stderr = p.log
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(s.t, err)
	require.NoError(s.t, p.cmd.Start())
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "pvesim serves the Proxmox VE API at "); ok {
				urls <- strings.TrimSuffix(rest, "/api2/json")
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	s.t.Cleanup(func() { p.stop(s.t) })
	select {
	case url = <-urls:
		return url, dir
	case <-time.After(time.Minute):
		s.t.Fatalf("pvesim did not say where it serves:\n%s", p.log)
	}
	return "", ""
}

// proxyVMs lists the VMs of the simulator served at url that are not templates.
func proxyVMs(t *testing.T, url, dir string) []pve.VMResource {
	t.Helper()
	api, err := pve.NewClient(pve.ClientConfig{URL: url, CAFile: filepath.Join(dir, "ca.pem"), TokenFile: filepath.Join(dir, "token")})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resources, err := api.ClusterResources(ctx)
	require.NoError(t, err)
	var vms []pve.VMResource
	for _, r := range resources {
		if r.Type == "qemu" && !r.Template {
			vms = append(vms, r)
		}
	}
	return vms
}

// simulatorURL is the URL a -simulator worker wrote into its directory.
func simulatorURL(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "url"))
	require.NoError(t, err)
	return strings.TrimSpace(string(data))
}
