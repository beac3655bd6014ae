// Package testserver runs a Temporal server for pveflow's tests: the embedded dev server,
// pveflow-temporal, as a child process on a free loopback port with its state in a temporary
// SQLite file and pveflow's search attributes registered.
//
// The server is a process rather than a library because its dependency graph is the Temporal
// server's: it lives in a module of its own (internal/devserver), so that importing pveflow's
// packages never brings go.temporal.io/server into a consumer's module graph. The tests that
// need a server take it from here.
//
// WithPostgres starts instead a host of a Temporal cluster on a PostgreSQL whose schemas are set
// up (pveflow-temporal sql-tool): several servers on one database are one cluster.
//
// PVEFLOW_TEMPORAL_BIN names a built pveflow-temporal (`make test` builds it once for every
// package). Without it the first server of a test binary builds one with `go build`, which the
// build cache makes quick after the first time.
package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
)

// BinEnv names a built pveflow-temporal binary to run instead of building one.
const BinEnv = "PVEFLOW_TEMPORAL_BIN"

// startTimeout bounds how long a server may take to print its address.
const startTimeout = 2 * time.Minute

// stopTimeout is how long a server has to stop after SIGTERM before it is killed.
const stopTimeout = 30 * time.Second

// A Server is a running pveflow-temporal with a client to its namespace. Workers made with
// NewWorker stop with it.
type Server struct {
	fatalf    func(format string, args ...any)
	cmd       *exec.Cmd
	dir       string // holds the database
	exited    chan struct{}
	address   string
	namespace string
	history   string // the history service's address, with WithPostgres
	base      client.Options
	client    client.Client

	mu      sync.Mutex
	workers []worker.Worker
	clients []client.Client

	stopOnce sync.Once
}

// An Option changes how New starts a Server.
type Option func(*options)

type options struct {
	base     client.Options
	extra    []string
	postgres []string
	// testLog is the SDK's logger where base names none: the test's own output, for a server
	// from New.
	testLog log.Logger
}

// WithBaseClientOptions makes the server's client, its workers' clients and the clients of
// NewClient start from base: with a codec's DataConverter and FailureConverter, say. HostPort
// and Namespace are the server's.
func WithBaseClientOptions(base client.Options) Option {
	return func(o *options) { o.base = base }
}

// WithArgs passes more flags to pveflow-temporal, such as -search-attribute.
func WithArgs(args ...string) Option {
	return func(o *options) { o.extra = append(o.extra, args...) }
}

// WithPostgres makes the server a host of the Temporal cluster on the PostgreSQL at host:port,
// user temporal without a password, databases temporal and temporal_visibility, rather than a
// server of its own on a SQLite file. WithArgs gives the other flags: -history-shards,
// -cluster-address.
func WithPostgres(host string, port int) Option {
	return func(o *options) {
		o.postgres = []string{"-postgres", "-pg-host", host, "-pg-port", strconv.Itoa(port)}
	}
}

// New starts a server for t and stops it when t ends. It fails t when the server does not
// start.
//
// The SDK's log of the server's clients and workers goes to t's output, as t.Log's does: shown
// under the test that failed, not mixed into every test's output.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	out := &testOutput{w: t.Output()}
	// Registered first, so run last: the workers' and clients' last lines, as Stop stops them,
	// are the test's; a line after the test ended would panic.
	t.Cleanup(out.close)
	s, err := Start(append(opts, func(o *options) { o.testLog = out.logger() })...)
	if err != nil {
		t.Fatal(err)
	}
	s.fatalf = t.Fatalf
	t.Cleanup(s.Stop)
	return s
}

// testOutput is a test's output that drops what is written after the test ended: a client's
// goroutines may still log while it closes.
type testOutput struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (o *testOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return len(p), nil
	}
	return o.w.Write(p)
}

func (o *testOutput) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
}

// logger logs every level: the output is shown only for a test that fails, or under -v.
func (o *testOutput) logger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(o, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// Start starts a server that runs until Stop, for a server shared by a package's tests. Its
// NewClient and NewWorker panic where those of a server from New fail the test.
func Start(opts ...Option) (_ *Server, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.base.Logger == nil {
		o.base.Logger = o.testLog
	}
	bin, err := binary()
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	dir, err := os.MkdirTemp("", "pveflow-temporal-")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	store := []string{"-db", filepath.Join(dir, "temporal.db")}
	if o.postgres != nil {
		store = o.postgres
	}
	args := append(append(store, "-port", "0", "-ui-port", "-1"), o.extra...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = childProcAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	var stderr tail
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testserver: starting %s: %w", bin, err)
	}
	s := &Server{
		cmd: cmd, dir: dir, exited: make(chan struct{}), base: o.base,
		fatalf: func(format string, args ...any) { panic(fmt.Sprintf(format, args...)) },
	}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()

	ready := make(chan error, 1)
	go func() { ready <- s.readAddress(stdout) }()
	select {
	case err = <-ready:
	case <-time.After(startTimeout):
		err = fmt.Errorf("no address printed within %s", startTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("testserver: %s %s: %w; its log ends:\n%s", bin, strings.Join(args, " "), err, stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if s.client, err = s.dial(ctx, client.Options{}); err != nil {
		return nil, err
	}
	return s, nil
}

// readAddress reads the server's start-up lines up to its namespace, then drains its output.
func (s *Server) readAddress(stdout io.Reader) error {
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		key, value, _ := strings.Cut(lines.Text(), ": ")
		switch key {
		case "Temporal server":
			s.address = value
		case "namespace":
			s.namespace = value
		case "Temporal history service":
			s.history = value
		}
		if s.address != "" && s.namespace != "" {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return nil
		}
	}
	return errors.Join(errors.New("the server exited before printing its address"), lines.Err())
}

// CPU is the processor time the server's process has used so far, user and system, as Linux's
// /proc counts it: a benchmark divides it by wall time to see how busy the server was.
func (s *Server) CPU() (time.Duration, error) {
	return ProcessTreeCPU(s.cmd.Process.Pid)
}

// ProcessTreeCPU is the processor time, user and system, that the process pid, its children
// (PostgreSQL's backends, say) and theirs have used so far, as Linux's /proc counts it: those
// that exited count once their parent has waited for them.
func ProcessTreeCPU(pid int) (time.Duration, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, err
	}
	children := map[int][]int{}
	for _, path := range stats {
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if fields, err := procStat(child); err == nil {
			parent, _ := strconv.Atoi(fields[1])
			children[parent] = append(children[parent], child)
		}
	}
	var ticks int64
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		fields, err := procStat(queue[0])
		if err != nil {
			if queue[0] == pid {
				return 0, fmt.Errorf("testserver: the processor time of process %d: %w", pid, err)
			}
			continue // a child that exited meanwhile
		}
		// utime, stime, cutime and cstime, in clock ticks of USER_HZ, 100 on Linux.
		for _, f := range fields[11:15] {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("testserver: the processor time of process %d: %w", queue[0], err)
			}
			ticks += n
		}
		queue = append(queue, children[queue[0]]...)
	}
	const userHZ = 100
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// procStat is the fields of /proc/<pid>/stat after the command name, field 2, which is in
// parentheses and may hold spaces: the state is the first, the parent's pid the second.
func procStat(pid int) ([]string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	fields := strings.Fields(rest)
	if len(fields) < 15 {
		return nil, fmt.Errorf("short /proc/%d/stat %q", pid, rest)
	}
	return fields, nil
}

// Address is the frontend's host:port.
func (s *Server) Address() string { return s.address }

// HistoryAddress is the address of the history service of a server started WithPostgres, which
// the history shards it owns record as their owner; "" otherwise.
func (s *Server) HistoryAddress() string { return s.history }

// Namespace is the namespace the server registered, with pveflow's search attributes.
func (s *Server) Namespace() string { return s.namespace }

// Client is a client of the server's namespace, made with the base client options. The server
// closes it when it stops.
func (s *Server) Client() client.Client { return s.client }

// NewClient dials the server's namespace with opts over the base client options: opts'
// non-zero DataConverter, FailureConverter, Identity, Logger, MetricsHandler and Interceptors
// win. The server closes the client when it stops.
func (s *Server) NewClient(opts client.Options) client.Client {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := s.dial(ctx, opts)
	if err != nil {
		s.fatalf("%v", err)
	}
	return c
}

func (s *Server) dial(ctx context.Context, opts client.Options) (client.Client, error) {
	merged := s.base
	merged.HostPort, merged.Namespace = s.address, s.namespace
	if opts.DataConverter != nil {
		merged.DataConverter = opts.DataConverter
	}
	if opts.FailureConverter != nil {
		merged.FailureConverter = opts.FailureConverter
	}
	if opts.Identity != "" {
		merged.Identity = opts.Identity
	}
	if opts.Logger != nil {
		merged.Logger = opts.Logger
	}
	if opts.MetricsHandler != nil {
		merged.MetricsHandler = opts.MetricsHandler
	}
	if opts.Interceptors != nil {
		merged.Interceptors = opts.Interceptors
	}
	c, err := client.DialContext(ctx, merged)
	if err != nil {
		return nil, fmt.Errorf("testserver: dialling the server at %s: %w", s.address, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients = append(s.clients, c)
	return c, nil
}

// NewWorker starts a worker on taskQueue with what register registers, on the server's client.
// It fails the test when the worker does not start, and stops when the server stops.
func (s *Server) NewWorker(taskQueue string, register func(worker.Registry)) worker.Worker {
	return s.NewWorkerWithOptions(taskQueue, register, worker.Options{})
}

// NewWorkerWithOptions is NewWorker with worker options. A failing workflow task fails its
// workflow, so that a test sees a nondeterminism error rather than a hang.
func (s *Server) NewWorkerWithOptions(taskQueue string, register func(worker.Registry), opts worker.Options) worker.Worker {
	opts.WorkflowPanicPolicy = worker.FailWorkflow
	w := worker.New(s.client, taskQueue, opts)
	register(w)
	if err := w.Start(); err != nil {
		s.fatalf("testserver: starting a worker on %s: %v", taskQueue, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers = append(s.workers, w)
	return w
}

// Stop stops the workers, closes the clients, stops the server and removes its database. Calls after the first do
// nothing.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		workers, clients := s.workers, s.clients
		s.mu.Unlock()
		for _, w := range workers {
			w.Stop()
		}
		for _, c := range clients {
			c.Close()
		}
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		_ = os.RemoveAll(s.dir)
	})
}

// Kill kills the server's process with SIGKILL, as a crash would, and waits for it to exit. Its
// workers and clients stay; Stop stops them.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

var build struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of pveflow-temporal, BinEnv's or one built for this test binary, for
// a test that runs the server itself: the chaos test kills it and starts it again on its data.
func Binary() (string, error) { return binary() }

// binary returns the path of pveflow-temporal: BinEnv's, or one built for this test binary.
func binary() (string, error) {
	if bin := os.Getenv(BinEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s: %w", BinEnv, err)
		}
		return bin, nil
	}
	build.once.Do(func() { build.path, build.err = buildBinary() })
	return build.path, build.err
}

// buildBinary builds pveflow-temporal from the devserver module beside this package's source.
func buildBinary() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the source tree to build pveflow-temporal; set " + BinEnv)
	}
	module := filepath.Join(filepath.Dir(file), "..", "devserver")
	dir, err := os.MkdirTemp("", "pveflow-temporal-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "pveflow-temporal")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/pveflow-temporal")
	cmd.Dir = module
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building pveflow-temporal in %s (or set %s): %v\n%s", module, BinEnv, err, out)
	}
	return bin, nil
}

// tail keeps the last 8 KiB written to it: the end of the server's log, for a failed start.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 8 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailSize {
		t.buf = t.buf[len(t.buf)-tailSize:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// FreePort is a loopback port nothing listens on now, for a server a test starts, or starts
// again, on a port of its choosing.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
