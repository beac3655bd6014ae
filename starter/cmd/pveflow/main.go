// Command pveflow creates, deletes and follows pveflow's proxy VMs from the command line, through
// package starter.
//
//	go run ./starter/cmd/pveflow create --uid 6f1c... --image debian13 --machine-type small --wait
//	go run ./starter/cmd/pveflow demo
//
// Run `pveflow help` for every command, the environment it reads and its exit codes, and
// `pveflow completion bash|zsh` for the shell's completion.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.temporal.io/sdk/temporal"
	"golang.org/x/term"

	"github.com/pveflow/pveflow/internal/telemetry/export"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes; exitCodes documents them.
const (
	exitOK            = 0
	exitError         = 1
	exitUsage         = 2
	exitPermanent     = 3
	exitTransient     = 4
	exitQuotaExceeded = 5
	exitCanceled      = 6
	exitNotFound      = 7
	exitUnhealthy     = 8
)

// exitCodes are what the exit codes mean, as `pveflow help` and the README list them.
var exitCodes = []struct {
	code    int
	meaning string
}{
	{exitOK, "success"},
	{exitError, "any other error: Temporal cannot be reached, no such workflow, a deletion of gc failed, ..."},
	{exitUsage, "usage error: an unknown command or flag, an invalid --uid, --name, address or --nic, a file named by a flag that cannot be read, user-data over 64 KiB, an empty kept set"},
	{exitPermanent, "the proxy refused the request (an unknown image or machine type, a change of a proxy not present), or its workflow failed Permanent: bad input or a state a person must resolve; a new start fails again"},
	{exitTransient, "the workflow failed Transient: a budget ran out or Proxmox had trouble; a new start resumes"},
	{exitQuotaExceeded, "the workflow failed QuotaExceeded: a storage is full"},
	{exitCanceled, "a later request superseded the request (a delete stops the create of its proxy), or its workflow was cancelled"},
	{exitNotFound, "get found no VM of the proxy"},
	{exitUnhealthy, "check found a node unhealthy"},
}

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
	root := c.command()
	// Never nil: cobra would read os.Args instead.
	root.SetArgs(append([]string{}, args...))
	err := root.ExecuteContext(ctx)
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
	var u unhealthy
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usage), errors.Is(err, starter.ErrInvalidUID), errors.Is(err, starter.ErrInvalidName), errors.Is(err, starter.ErrUserDataTooLarge),
		errors.Is(err, starter.ErrInvalidNetwork),
		errors.Is(err, starter.ErrEmptyKeep):
		return exitUsage
	case errors.Is(err, starter.ErrRejected):
		return exitPermanent
	case errors.Is(err, starter.ErrNotFound):
		return exitNotFound
	case errors.As(err, &u):
		return exitUnhealthy
	}
	switch starter.FailureType(err) {
	case core.FailPermanent:
		return exitPermanent
	case core.FailTransient:
		return exitTransient
	case core.FailQuotaExceeded:
		return exitQuotaExceeded
	case starter.FailSuperseded, starter.FailCanceled:
		return exitCanceled
	}
	return exitError
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
	shutdownTracing, err := export.SetupTracing(ctx, cliProgram, c.stderr)
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

// failed is a request whose operation closed without its result, or a workflow that did.
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
	case t == starter.FailSuperseded && errors.As(f.err, &appErr):
		return fmt.Sprintf("%s of proxy %s was superseded: %s", f.op, f.uid, appErr.Message())
	case t != "" && errors.As(f.err, &appErr):
		return fmt.Sprintf("%s of proxy %s failed (%s): %s", f.op, f.uid, t, appErr.Message())
	}
	return f.err.Error()
}

func (f failed) Unwrap() error { return f.err }
