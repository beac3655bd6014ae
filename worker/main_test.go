package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/syncbuf"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// simulatorYAML is the simulator's configuration, for the tests that point the worker at it.
var simulatorYAML = filepath.Join("..", "testdata", "config", "simulator.yaml")

// writeConfig writes a valid configuration whose token file is tokenFile and returns its path.
func writeConfig(t *testing.T, url, tokenFile string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "proxmox:\n" +
		"  url: " + url + "\n" +
		"  tokenFile: " + tokenFile + "\n" +
		"  nodes: [pve1]\n" +
		"  templates: {debian13: {vmid: 9000}}\n" +
		"  machineTypes: {small: {cores: 1, memoryMiB: 512}}\n"
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return path
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

func TestRun_startUpErrorsAreOneLineNamingWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("pveflow@pve!test=secret\n"), 0o600))
	missingToken := filepath.Join(dir, "no-token")
	readableToken := filepath.Join(dir, "readable-token")
	require.NoError(t, os.WriteFile(readableToken, []byte("pveflow@pve!test=secret\n"), 0o600))
	require.NoError(t, os.Chmod(readableToken, 0o644))
	missingConfig := filepath.Join(dir, "no-config.yaml")
	readableKeyFile := filepath.Join(dir, "codec.key")
	require.NoError(t, os.WriteFile(readableKeyFile, []byte("k1 "+base64.StdEncoding.EncodeToString(make([]byte, 32))+"\n"), 0o600))
	require.NoError(t, os.Chmod(readableKeyFile, 0o644))
	temporal := closedAddr(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{
			name: "missing config file",
			args: []string{"--config", missingConfig},
			want: "worker: read config: open " + missingConfig,
		},
		{
			name: "invalid config",
			args: []string{"--config", writeConfig(t, "ftp://pve.example.com", token)},
			want: `proxmox.url: "ftp://pve.example.com" must use http or https`,
		},
		{
			name: "missing token file",
			args: []string{"--config", writeConfig(t, "https://127.0.0.1:8006", missingToken)},
			want: "worker: proxmox.tokenFile " + missingToken + ": no such file or directory",
		},
		{
			name: "token file others may read",
			args: []string{"--config", writeConfig(t, "https://127.0.0.1:8006", readableToken)},
			want: "worker: proxmox.tokenFile " + readableToken + ": mode 0644 gives others access to it, or its group write access: chmod 600 " + readableToken,
		},
		{
			name: "half an mTLS pair",
			args: []string{"--config", writeConfig(t, "https://127.0.0.1:8006", token)},
			env:  map[string]string{"TEMPORAL_TLS_CLIENT_CERT_PATH": token},
			want: "worker: connection to Temporal: invalid TLS config: if either client cert or key path is present, other must be present too",
		},
		{
			name: "Temporal address without a port",
			args: []string{"--config", writeConfig(t, "https://127.0.0.1:8006", token)},
			env:  map[string]string{"TEMPORAL_ADDRESS": "localhost"},
			want: `worker: TEMPORAL_ADDRESS "localhost": want host:port, such as 127.0.0.1:7233`,
		},
		{
			name: "unreachable Temporal",
			args: []string{"--config", writeConfig(t, "https://127.0.0.1:8006", token)},
			env:  map[string]string{"TEMPORAL_ADDRESS": temporal},
			want: "worker: cannot reach Temporal at " + temporal + ": ",
		},
		{
			name: "codec key file others may read",
			args: []string{"--config", writeConfig(t, "https://127.0.0.1:8006", token)},
			env:  map[string]string{"PVEFLOW_CODEC_KEY_FILE": readableKeyFile},
			want: "worker: PVEFLOW_CODEC_KEY_FILE: codec: bad key file " + readableKeyFile + ": mode 0644",
		},
		{
			name: "metrics address taken",
			args: []string{"--config", writeConfig(t, "https://127.0.0.1:8006", token), "--metrics-listen", taken.Addr().String()},
			want: "worker: --metrics-listen: listen tcp " + taken.Addr().String() + ": bind: address already in use",
		},
		{
			name: "config from the environment",
			env:  map[string]string{"PVEFLOW_CONFIG": missingConfig},
			want: "worker: read config: open " + missingConfig,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer

			code := run(context.Background(), tt.args, tt.env, io.Discard, &stderr)

			assert.Equal(t, exitError, code)
			assert.Contains(t, stderr.String(), tt.want)
			assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %s", stderr.String())
		})
	}
}

func TestRun_anExporterTheOTelEnvironmentNamesButNoneKnowsIsAStartUpError(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("pveflow@pve!test=secret\n"), 0o600))
	for _, tt := range []struct{ variable, want string }{
		{"OTEL_TRACES_EXPORTER", `worker: OTEL_TRACES_EXPORTER "zipkin": unknown exporter`},
		{"OTEL_METRICS_EXPORTER", `worker: OTEL_METRICS_EXPORTER "zipkin": unknown exporter`},
	} {
		t.Run(tt.variable, func(t *testing.T) {
			// The exporters read the process environment, as the OpenTelemetry SDK does.
			t.Setenv(tt.variable, "zipkin")
			var stderr bytes.Buffer

			code := run(context.Background(), []string{"--config", writeConfig(t, "https://127.0.0.1:8006", token)}, nil, io.Discard, &stderr)

			assert.Equal(t, exitError, code)
			assert.Contains(t, stderr.String(), tt.want)
			assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %s", stderr.String())
		})
	}
}

func TestRun_usageErrorsExit2WithOneLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no config", nil, nil, "--config (or PVEFLOW_CONFIG) is required unless --simulator"},
		{"unknown flag", []string{"--cluster", "x"}, nil, "unknown flag: --cluster"},
		{"unknown flag with one dash", []string{"-bogus"}, nil, "unknown flag: -bogus"},
		{"a flag with one dash", []string{"-config", "x.yaml"}, nil, "-config: long flags take two dashes: --config"},
		{"bad log level", []string{"--simulator", "--log-level", "chatty"}, nil, `--log-level "chatty": want debug, info, warn or error`},
		{"bad log level from the environment", []string{"--simulator"}, map[string]string{"PVEFLOW_LOG_LEVEL": "chatty"},
			`--log-level "chatty": want debug, info, warn or error`},
		{"bad log format", []string{"--simulator", "--log-format", "xml"}, nil, `--log-format "xml": want text or json`},
		{"bad duration from the environment", []string{"--simulator"}, map[string]string{"PVEFLOW_HEALTH_EVERY": "often"},
			`PVEFLOW_HEALTH_EVERY: unable to parse duration: time: invalid duration "often"`},
		{"bad boolean from the environment", []string{"--simulator"}, map[string]string{"PVEFLOW_PROMOTE": "maybe"},
			`PVEFLOW_PROMOTE: strconv.ParseBool: parsing "maybe": invalid syntax`},
		{"stray argument", []string{"--simulator", "now"}, nil, `unexpected arguments ["now"]`},
		{"negative clone time", []string{"--simulator", "--simulator-clone-time", "-1s"}, nil,
			"--simulator-clone-time and --simulator-agent-delay must not be negative"},
		{"promote without a deployment", []string{"--simulator", "--promote"}, nil, "--promote needs --deployment-name (or PVEFLOW_DEPLOYMENT_NAME)"},
		{"negative health interval", []string{"--simulator", "--health-every", "-1m"}, nil, "--health-every must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer

			code := run(context.Background(), tt.args, tt.env, io.Discard, &stderr)

			assert.Equal(t, exitUsage, code)
			assert.Equal(t, "worker: "+tt.want+"; run 'worker --help' for usage\n", stderr.String())
		})
	}
}

func TestRun_versionPrintsTheBuildOnStdout(t *testing.T) {
	var stdout, stderr bytes.Buffer

	code := run(context.Background(), []string{"--version"}, nil, &stdout, &stderr)

	assert.Equal(t, exitOK, code)
	assert.Regexp(t, `^worker  +github.com/pveflow/pveflow \S+\n`, stdout.String())
	assert.Contains(t, stdout.String(), "temporal sdk  v1.50.0\n")
	assert.Empty(t, stderr.String())
}

func TestRun_helpListsEveryFlagWithItsVariable(t *testing.T) {
	var stderr bytes.Buffer

	code := run(context.Background(), []string{"--help"}, nil, io.Discard, &stderr)

	assert.Equal(t, exitOK, code)
	var o options
	flagSet(&o).VisitAll(func(f *pflag.Flag) {
		if !actions[f.Name] {
			assert.Regexp(t, `(?m)^      --`+f.Name+` .*\(\$`+flagEnv(f.Name)+`\)`, stderr.String())
		}
	})
}

func TestParseFlags_aFlagWinsOverItsVariable(t *testing.T) {
	environ := map[string]string{"PVEFLOW_TASK_QUEUE": "from-env", "PVEFLOW_HEALTH_EVERY": "1m", "PVEFLOW_PROMOTE": "true",
		"PVEFLOW_DEPLOYMENT_NAME": "pveflow", "PVEFLOW_BUILD_ID": "b1", "PVEFLOW_SIMULATOR": "true"}

	o, err := parseFlags([]string{"--task-queue", "from-flag"}, environ, io.Discard)

	require.NoError(t, err)
	assert.Equal(t, "from-flag", o.TaskQueue)
	assert.Equal(t, time.Minute, o.HealthEvery)
	assert.True(t, o.Promote)
	assert.True(t, o.Simulator)
	assert.Equal(t, simulatorConfig, o.ConfigPath)
}

func TestFlags_eachReadsTheVariableItsHelpNames(t *testing.T) {
	var o options
	var named []string
	flagSet(&o).VisitAll(func(f *pflag.Flag) {
		if !actions[f.Name] {
			named = append(named, flagEnv(f.Name))
		}
	})
	params, err := env.GetFieldParams(&o)
	require.NoError(t, err)
	var read []string
	for _, p := range params {
		read = append(read, p.Key)
	}

	assert.Equal(t, named, read, "the env tags of options, in the order of the flags")
}

// workerRun is the worker run by a test against a test server, on task queue "worker-test".
type workerRun struct {
	simDir string // with -simulator, where the simulator writes its url, CA and token
	stderr *syncbuf.Buffer
	stop   func() int // stops the worker and returns its exit code
}

// runSimWorker runs the worker with -simulator and args against server until its stop is
// called or the test ends. Later args override the simulator's defaults.
func runSimWorker(t *testing.T, server *testserver.Server, args ...string) workerRun {
	t.Helper()
	simDir := t.TempDir()
	w := runWorker(t, server, append([]string{
		"--simulator", "--config", simulatorYAML, "--simulator-dir", simDir,
		"--simulator-clone-time", "500ms", "--simulator-agent-delay", "100ms",
	}, args...)...)
	w.simDir = simDir
	return w
}

// runWorker runs the worker with args against server until its stop is called or the test ends.
func runWorker(t *testing.T, server *testserver.Server, args ...string) workerRun {
	t.Helper()
	w := workerRun{stderr: &syncbuf.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, append([]string{"--task-queue", "worker-test"}, args...), map[string]string{
			"TEMPORAL_ADDRESS":   server.Address(),
			"TEMPORAL_NAMESPACE": server.Namespace(),
			"XDG_RUNTIME_DIR":    t.TempDir(), // its worker slot
		}, io.Discard, w.stderr)
	}()
	var code int
	stopped := false
	w.stop = func() int {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code = <-exit:
			case <-time.After(time.Minute):
				t.Fatal("the worker did not stop within a minute of its context's end")
			}
		}
		return code
	}
	t.Cleanup(func() { w.stop() })
	return w
}

// createProxy creates a proxy through the worker on "worker-test" and returns the result.
func createProxy(t *testing.T, server *testserver.Server, w workerRun) proxyvm.CreateProxyResult {
	t.Helper()
	s := starter.New(server.Client(), "worker-test")
	const uid = "b3a1f9c2-6d4e-4a8b-9c70-2e5f1d3a4b68"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := s.Create(ctx, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small"})
	require.NoError(t, err, w.stderr.String())
	var res proxyvm.CreateProxyResult
	require.NoError(t, req.Get(ctx, &res), w.stderr.String())
	return res
}

func TestRun_simulatorModeCreatesAProxyAndStopsCleanly(t *testing.T) {
	server := testserver.New(t)
	w := runSimWorker(t, server)

	res := createProxy(t, server, w)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tq, err := server.Client().DescribeTaskQueue(ctx, "worker-test", enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	require.NoError(t, err)
	schedule, err := server.Client().ScheduleClient().GetHandle(ctx, core.HealthScheduleID("worker-test")).Describe(ctx)
	require.NoError(t, err, "the worker applied the health schedule")
	code := w.stop()

	assert.Equal(t, 5*time.Minute, schedule.Schedule.Spec.Intervals[0].Every)
	assert.NotEmpty(t, res.IPv4)
	require.NotEmpty(t, tq.GetPollers())
	assert.Equal(t, starter.Identity("pveflow-worker"), tq.GetPollers()[0].GetIdentity())
	assert.Equal(t, exitOK, code, w.stderr.String())
	url, err := os.ReadFile(filepath.Join(w.simDir, "url"))
	require.NoError(t, err)
	assert.Contains(t, w.stderr.String(), "url="+strings.TrimSpace(string(url)))
	assert.FileExists(t, filepath.Join(w.simDir, "ca.pem"))
	assert.FileExists(t, filepath.Join(w.simDir, "token"))
}

func TestRun_promotedWorkerIsItsDeploymentsCurrentBuildAndServesCreates(t *testing.T) {
	server := testserver.New(t)
	w := runSimWorker(t, server, "--deployment-name", "pveflow-test", "--build-id", "b1", "--promote")

	res := createProxy(t, server, w)

	assert.NotEmpty(t, res.IPv4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	desc, err := server.Client().WorkerDeploymentClient().GetHandle("pveflow-test").Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	require.NoError(t, err)
	require.NotNil(t, desc.Info.RoutingConfig.CurrentVersion)
	assert.Equal(t, "b1", desc.Info.RoutingConfig.CurrentVersion.BuildID)
	assert.Contains(t, w.stderr.String(), "worker build promoted")
}
