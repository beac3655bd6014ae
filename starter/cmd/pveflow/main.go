// Command pveflow creates, deletes and follows pveflow's proxy VMs from the command line, through
// package starter.
//
//	go run ./starter/cmd/pveflow create --uid 6f1c... --image debian13 --machine-type small --wait
//	go run ./starter/cmd/pveflow demo
//
// Run `pveflow help` for every command, the environment it reads and its exit codes.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/temporal"
	"golang.org/x/term"

	"github.com/pveflow/pveflow/internal/telemetry"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes; `pveflow help` documents them.
const (
	exitOK            = 0
	exitError         = 1
	exitUsage         = 2
	exitPermanent     = 3
	exitTransient     = 4
	exitQuotaExceeded = 5
	exitCanceled      = 6
)

const helpText = `pveflow creates and deletes egress-proxy VMs on Proxmox VE through Temporal workflows.

Usage:
  pveflow [--json] [--task-queue Q] <command> [flags]

Commands:
  create --uid UID [--name N] [--zone Z] [--image I] [--machine-type M] [--region R]
         [--user-data-file F] [--wait]
                  start creating the proxy of UID (or join the create that runs);
                  --wait waits for its VM and prints it. The user-data file holds
                  at most 65536 bytes (64 KiB)
  delete --uid UID [--name N] [--provider-id vms/<vmid>/<name>] [--wait]
                  start deleting the proxy of UID; a create that still runs is cancelled.
                  The UID alone finds the proxy's VM. --name (or the name in
                  --provider-id) is needed only for the seed ISO of a proxy created with
                  --name before pveflow found seed ISOs by UID
  status --uid UID [--delete]
                  where the create (or the delete) of UID is, and what it waits for:
                  from the workflow's status query, or, when no worker answers it,
                  from what Temporal keeps (its search attributes and pending wait),
                  with when a worker last polled its task queue
  wait --uid UID [--delete] [--activity-id ID] --retry-now | --pause [--reason R]
       | --resume
                  act on the wait the create (or the delete) of UID is in:
                  --retry-now polls again now with its attempts back at one;
                  --pause stops its polls until --resume.
                  --activity-id names the activity when several are pending
  result --uid UID [--delete]
                  wait for the create (or the delete) of UID and print its result
  list [--phase P]
                  the proxy workflows, newest first, all or those in phase P
                  (cloning, seeding, booting, created, failed, deleted, ...)
  get (--uid UID | --provider-id vms/<vmid>/<name>)
                  what the proxy's VM is doing: Running (with its IPv4),
                  Provisioning or Stopped, read from Proxmox
  ls              the VMs on the cluster that carry pveflow's mark
  check [--last]  check every configured node: version, node, ISO storage, templates;
                  --last prints the latest scheduled check instead of running one
  gc (--keep UID | --keep-file F | --keep-command CMD)... | --all [--dry-run] [--grace D]
                  delete the VMs with pveflow's mark whose UID is not kept, each through
                  the DeleteProxy of its UID, and the seed ISOs no VM has. --keep,
                  --keep-file (one UID a line, # comments) and --keep-command (run with
                  sh -c, prints one UID a line) repeat, and add up; the kept set is read
                  just before the run. An empty kept set is refused: --all keeps none.
                  --dry-run lists what would be deleted. Nothing younger than --grace
                  (default 1h) is taken; a UID whose create or delete runs is skipped.
                  Exits 1 when a deletion failed, after printing what became of each
  demo [--image I] [--machine-type M] [--zone Z]
                  create a proxy with a new UID, wait for it, then delete it
  codec-server [--listen ADDR] [--ui-origin URL]...
                  serve /encode and /decode with the keys of $PVEFLOW_CODEC_KEY_FILE
                  (required), so the Temporal Web UI (and temporal workflow show
                  --codec-endpoint) shows payloads decrypted. --listen defaults to
                  127.0.0.1:8081; --ui-origin, repeatable, is the origin the UI is
                  served from (default http://127.0.0.1:8233). Runs until interrupted
  codec-keygen --out FILE [--id ID]
                  write a new key file with one random key, mode 0600; an existing
                  FILE is never replaced
  version         pveflow's module version, build and Temporal SDK version
  help [COMMAND]  this text, or the help of COMMAND (as COMMAND -h does)

get, ls and check have help of their own: pveflow get --help.

A UID is 1 to 128 ASCII letters, digits, '-', '_' and '.', starting with a letter or digit:
Kubernetes UIDs, ULIDs, UUIDs and object names up to 128 characters fit. Any other --uid is a
usage error.

Global flags, before or after the command:
  --json          print results as JSON on stdout
  --task-queue Q  the workers' task queue (default $PVEFLOW_TASK_QUEUE, else "pveflow")

While it waits, pveflow shows the workflow's phase, step, elapsed time and the attempt of the
current wait on stderr. The user-data file is sent to the workflow and never printed.

Environment, as for the temporal CLI:
  TEMPORAL_ADDRESS    Temporal frontend host:port (default 127.0.0.1:7233)
  TEMPORAL_NAMESPACE  namespace (default "default")
  TEMPORAL_API_KEY    API key (turns TLS on)
  TEMPORAL_TLS        true or false: TLS on or off
  TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH
                      client certificate and key files for mTLS
  TEMPORAL_TLS_SERVER_CA_CERT_PATH
                      CA file that verifies the server
  TEMPORAL_TLS_SERVER_NAME
                      server name the certificate must have, if not the address's
  TEMPORAL_CONFIG_FILE
                      TOML file of profiles (default the temporal CLI's)
  TEMPORAL_PROFILE    its profile to use (default "default"); the variables above
                      win over the profile's settings
  TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY, TEMPORAL_TLS_CA
                      deprecated names of the TLS files: they warn
and pveflow's own:
  PVEFLOW_CODEC_KEY_FILE
                      key file of the payload codec (make one with codec-keygen):
                      when set, workflow inputs (user-data among them), results and
                      failure messages are encrypted in Temporal's history. The
                      worker needs the same file
and OpenTelemetry's:
  OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
  OTEL_SERVICE_NAME (default pveflow-cli)
                      export the spans of the calls to Temporal (StartWorkflow, ...),
                      whose children the workflow's spans are: otlp, console (on
                      stderr) or none; unset, nothing is exported

Exit codes:
  0  success
  1  any other error (the server cannot be reached, no such workflow, ...)
  2  usage error, an invalid --uid, a user-data file over 64 KiB or an empty kept
     set among them
  3  the workflow failed Permanent: bad input or a state a person must resolve;
     starting it again fails again
  4  the workflow failed Transient: a budget ran out or Proxmox had trouble;
     starting it again resumes
  5  the workflow failed QuotaExceeded: a storage is full
  6  the workflow was cancelled (a delete cancels the create of its proxy)
  7  get found no VM of the proxy
  8  check found a node unhealthy
`

// cli is one invocation of pveflow.
type cli struct {
	getenv         func(string) string
	stdout, stderr io.Writer
	json           bool
	taskQueue      string
	starter        *starter.Client
}

// usageError is a command line pveflow cannot run.
type usageError struct{ error }

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := &cli{getenv: getenv, stdout: stdout, stderr: stderr}
	err := c.run(ctx, args)
	if h, ok := errors.AsType[helpRequest](err); ok {
		if help, ok := commandHelp(h.command); ok {
			fmt.Fprint(stdout, help)
		} else {
			fmt.Fprint(stdout, helpText)
		}
		return exitOK
	}
	code := exitCode(err)
	switch code {
	case exitOK:
	case exitUsage:
		fmt.Fprintf(stderr, "pveflow: %v\nRun 'pveflow help' for usage.\n", err)
	default:
		fmt.Fprintf(stderr, "pveflow: %v\n", err)
	}
	return code
}

// exitCode is the exit code that reports err.
func exitCode(err error) int {
	var usage usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usage), errors.Is(err, starter.ErrInvalidUID), errors.Is(err, starter.ErrUserDataTooLarge),
		errors.Is(err, starter.ErrEmptyKeep):
		return exitUsage
	}
	if code := readExitCode(err); code != 0 {
		return code
	}
	switch starter.FailureType(err) {
	case workflows.FailPermanent:
		return exitPermanent
	case workflows.FailTransient:
		return exitTransient
	case workflows.FailQuotaExceeded:
		return exitQuotaExceeded
	case starter.FailCanceled:
		return exitCanceled
	}
	return exitError
}

func (c *cli) run(ctx context.Context, args []string) error {
	global := c.flagSet("pveflow")
	if err := global.Parse(args); err != nil {
		return flagError(global, err)
	}
	if global.NArg() == 0 {
		return usageError{errors.New("no command given")}
	}
	name, args := global.Arg(0), global.Args()[1:]
	switch name {
	case "create":
		return c.create(ctx, args)
	case "delete":
		return c.delete(ctx, args)
	case "status":
		return c.status(ctx, args)
	case "wait":
		return c.wait(ctx, args)
	case "version":
		return c.version(args)
	case "result":
		return c.result(ctx, args)
	case "list":
		return c.list(ctx, args)
	case "get":
		return c.get(ctx, args)
	case "ls":
		return c.ls(ctx, args)
	case "check":
		return c.check(ctx, args)
	case "gc":
		return c.gc(ctx, args)
	case "demo":
		return c.demo(ctx, args)
	case "codec-server":
		return c.codecServer(ctx, args)
	case "codec-keygen":
		return c.codecKeygen(ctx, args)
	case "help":
		return helpRequest{command: strings.Join(args, " ")}
	}
	return usageError{fmt.Errorf("unknown command %q", name)}
}

// flagSet is a flag set for a command, with the global flags. A flag error is a usageError.
func (c *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run reports the error; help is `pveflow help`
	fs.BoolVar(&c.json, "json", c.json, "print results as JSON")
	fs.StringVar(&c.taskQueue, "task-queue", cmp.Or(c.taskQueue, c.getenv("PVEFLOW_TASK_QUEUE"), workflows.DefaultTaskQueue), "task queue")
	return fs
}

// parse parses a command's flags and checks that it has no arguments besides.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())}
	}
	return nil
}

// flagError is a flag set's parse error as run reports it: -h asks for the command's help,
// anything else is a usage error.
func flagError(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return helpRequest{command: fs.Name()}
	}
	return usageError{fmt.Errorf("%s: %w", fs.Name(), err)}
}

// cliProgram names the CLI in its client identity and, by default, as the service of its spans.
const cliProgram = "pveflow-cli"

// tracingFlushTimeout bounds how long a command, done, waits for its spans to be exported.
const tracingFlushTimeout = 5 * time.Second

// connect sets up tracing from the environment, dials Temporal and makes the starter; the
// returned func closes the connection and exports the spans left.
func (c *cli) connect(ctx context.Context) (func(), error) {
	// The SDK's own logs, and the starter's, are for warnings here: stdout carries results.
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	shutdownTracing, err := telemetry.SetupTracing(ctx, c.getenv, cliProgram, c.stderr)
	if err != nil {
		return nil, err
	}
	flush := func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := shutdownTracing(flushCtx); err != nil {
			logger.Warn("exporting the spans failed", slog.Any("error", err))
		}
	}
	opts, err := starter.ClientOptionsWithLogger(c.getenv, logger)
	if err != nil {
		flush()
		return nil, err
	}
	opts.Identity = starter.Identity(cliProgram) // beside each workflow it started, in the UI
	tc, err := starter.Dial(ctx, opts)
	if err != nil {
		flush()
		return nil, err
	}
	c.starter = starter.New(tc, c.taskQueue, starter.WithDataConverter(opts.DataConverter), starter.WithNamespace(opts.Namespace))
	return func() {
		tc.Close()
		flush()
	}, nil
}

// terminalWidth is the width of stderr when it is a terminal, else 0.
func (c *cli) terminalWidth() int {
	f, ok := c.stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0
	}
	if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
		return w
	}
	return 80
}

// failed is a workflow that closed without its result.
type failed struct {
	op  starter.Op
	uid string
	err error
}

func (f failed) Error() string {
	var appErr *temporal.ApplicationError
	switch t := starter.FailureType(f.err); {
	case t == starter.FailCanceled:
		return fmt.Sprintf("%s of proxy %s was cancelled", f.op, f.uid)
	case t != "" && errors.As(f.err, &appErr):
		return fmt.Sprintf("%s of proxy %s failed (%s): %s", f.op, f.uid, t, appErr.Message())
	}
	return f.err.Error()
}

func (f failed) Unwrap() error { return f.err }
