package starter_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
)

// The examples (example_test.go) run as a program of an operator runs: they dial the Temporal
// server the environment names, with starter.DialFromEnv, and send their requests to the
// default task queue. TestMain starts that server, with a worker against the Proxmox
// simulator's default cluster, and points the environment at it, so the examples' output is
// the real calls'. The tests have stacks of their own (startStack) and never read this one.
func TestMain(m *testing.M) {
	flag.Parse()
	stop := func() {}
	if examplesRun() {
		var err error
		if stop, err = startExampleStack(); err != nil {
			fmt.Fprintln(os.Stderr, "the examples' stack:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// startExampleStack starts the examples' server and worker and sets the environment
// DialFromEnv reads to them alone: the settings of whoever runs the tests (a TEMPORAL_PROFILE,
// make run's PVEFLOW_CODEC_KEY_FILE) would point the examples elsewhere or encrypt what this
// worker cannot read. The tests that read the environment set it themselves (isolate).
func startExampleStack() (stop func(), err error) {
	cfg, err := simulatorConfig()
	if err != nil {
		return nil, err
	}
	// The SDK's default logger writes every worker's start to stdout; warnings on stderr say
	// what went wrong when an example fails.
	logger := log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	server, err := testserver.Start(testserver.WithBaseClientOptions(client.Options{Logger: logger}))
	if err != nil {
		return nil, err
	}
	s := starter.New(server.Client(), core.DefaultTaskQueue, starter.WithNamespace(server.Namespace()))
	server.NewWorker(core.DefaultTaskQueue, registration(cfg, pvesim.New(pvesim.Default()), server, s))

	dir, err := os.MkdirTemp("", "pveflow-examples-")
	if err != nil {
		server.Stop()
		return nil, err
	}
	stop = func() {
		server.Stop()
		_ = os.RemoveAll(dir)
	}
	noProfiles := filepath.Join(dir, "temporal.toml")
	if err := os.WriteFile(noProfiles, nil, 0o600); err != nil {
		stop()
		return nil, err
	}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "TEMPORAL_GRPC_META_") {
			_ = os.Unsetenv(name)
		}
	}
	for _, name := range connectionEnv {
		_ = os.Unsetenv(name)
	}
	_ = os.Setenv("TEMPORAL_ADDRESS", server.Address())
	_ = os.Setenv("TEMPORAL_NAMESPACE", server.Namespace())
	_ = os.Setenv("TEMPORAL_CONFIG_FILE", noProfiles)
	return stop, nil
}

// examplesRun says whether m.Run will run an example, as -test.run and -test.skip select
// them, so that a run of some tests alone does not start the examples' server. The examples
// are the Example functions of example_test.go. -test.run's first element (before a '/')
// selects the top-level names; -test.skip is taken to skip none, which at worst starts a
// server for nothing.
func examplesRun() bool {
	if flag.Lookup("test.list").Value.String() != "" {
		return false
	}
	run := flag.Lookup("test.run").Value.String()
	if run == "" {
		return true
	}
	re, err := regexp.Compile(strings.SplitN(run, "/", 2)[0])
	if err != nil {
		return true // m.Run says what is wrong with it
	}
	f, err := parser.ParseFile(token.NewFileSet(), "example_test.go", nil, parser.SkipObjectResolution)
	if err != nil {
		return true // the examples would not have compiled either
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && strings.HasPrefix(fn.Name.Name, "Example") && re.MatchString(fn.Name.Name) {
			return true
		}
	}
	return false
}
