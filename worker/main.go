// Command worker runs pveflow's Temporal worker: the CreateProxy and DeleteProxy workflows, the
// read workflows, and the activities that call Proxmox VE through the REST API client. At start
// it creates or updates the Temporal Schedule that runs CheckHealth (--health-every).
//
//	go run ./worker --config /etc/pveflow/config.yaml
//	go run ./worker --simulator
//
// With --simulator it serves the Proxmox simulator on loopback in the same process and points
// the real client at it, so the whole path runs without a cluster. The Temporal server is named
// by the TEMPORAL_* environment and the temporal CLI's profiles, as for the temporal CLI, and
// PVEFLOW_CODEC_KEY_FILE turns payload encryption on (see starter.ClientOptions). With
// --metrics-listen it serves Prometheus metrics, the SDK's and its own, at /metrics. The standard
// OTEL_* environment turns span and metric export on (see export.SetupTracing and
// export.NewMetrics). SIGINT or SIGTERM stops the worker once the activities in flight have
// finished; a second one ends it at once.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/buildinfo"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/internal/telemetry/export"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // the next signal kills the process, should stopping hang
	}()
	os.Exit(run(ctx, os.Args[1:], env.ToMap(os.Environ()), os.Stdout, os.Stderr))
}

// workerProgram names the worker in its client identity, workerProgram@host:pid, which the
// Temporal UI shows beside every task the worker took.
const workerProgram = "pveflow-worker"

// flushTimeout bounds how long the worker, stopping, waits for its last spans to be exported,
// and as long for its last metrics.
const flushTimeout = 5 * time.Second

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// run runs the worker until ctx is done and returns the exit code. environ is the environment,
// by name. Start-up errors are written to stderr one line each; logs go there too. Only
// --version writes to stdout.
func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, environ, stderr)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return exitOK
	case errors.Is(err, errVersion):
		v, _ := buildinfo.Read()
		if err := v.Write(stdout, "worker"); err != nil {
			return exitError
		}
		return exitOK
	case err != nil:
		return exitUsage
	}
	getenv := func(name string) string { return environ[name] }
	if err := serve(ctx, opts, getenv, stderr); err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return exitError
	}
	return exitOK
}

// serve starts the simulator if asked, connects to Proxmox and Temporal, and runs the worker
// until ctx is done.
func serve(ctx context.Context, opts options, getenv func(string) string, stderr io.Writer) error {
	logger := opts.logger(stderr)
	cfg, err := config.Load(opts.ConfigPath)
	if err != nil {
		return err
	}
	shutdownTracing, err := export.SetupTracing(ctx, workerProgram, stderr)
	if err != nil {
		return err
	}
	defer func() {
		// ctx is done by now: the flush gets a context of its own.
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		defer cancel()
		if err := shutdownTracing(flushCtx); err != nil {
			logger.Warn("exporting the last spans failed", slog.Any("error", err))
		}
	}()
	if opts.Simulator {
		sim, err := startSimulator(opts, logger)
		if err != nil {
			return err
		}
		defer sim.Close()
		cfg.Proxmox.URL, cfg.Proxmox.CAFile, cfg.Proxmox.TokenFile = sim.URL(), sim.CAFile(), sim.TokenFile()
		cfg.Proxmox.InsecureSkipTLSVerify = false
	}
	// The client reads the token file on every request, so a bad one would otherwise
	// surface only as the first activity's failure.
	if err := pve.CheckTokenFile(cfg.Proxmox.TokenFile); err != nil {
		return fmt.Errorf("proxmox.tokenFile %s: %w", cfg.Proxmox.TokenFile, err)
	}
	clientConfig := pve.ClientConfig{
		URL:                   cfg.Proxmox.URL,
		TokenFile:             cfg.Proxmox.TokenFile,
		CAFile:                cfg.Proxmox.CAFile,
		InsecureSkipTLSVerify: cfg.Proxmox.InsecureSkipTLSVerify,
		RequestTimeout:        time.Duration(cfg.Proxmox.RequestTimeoutSeconds) * time.Second,
		Logger:                logger,
		WrapTransport:         export.PVETransport(otel.GetTracerProvider()),
		// proxmox.calls caps every worker of the task queue together: this worker's client
		// applies its share (KeepCallShare, below).
		SharedLimits: capped(cfg.Proxmox.Calls),
	}
	clientOpts, err := starter.ClientOptionsWithLogger(getenv, logger)
	if err != nil {
		return err
	}
	metrics, err := export.NewMetrics(ctx, workerProgram, opts.MetricsListen != "", logger, stderr)
	if err != nil {
		return err
	}
	if metrics != nil {
		defer func() {
			flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			defer cancel()
			if err := metrics.Close(flushCtx); err != nil {
				logger.Warn("exporting the last metrics failed", slog.Any("error", err))
			}
		}()
		clientOpts.MetricsHandler = metrics.Handler()
		clientConfig.ObserveRequest = metrics.ObserveProxmoxRequest
		clientConfig.ObserveHeld = metrics.ObserveProxmoxHeld
	}
	var ready readiness
	if opts.MetricsListen != "" {
		stopOps, err := serveOps(opts.MetricsListen, opsMux(metrics, &ready), logger)
		if err != nil {
			return err
		}
		defer stopOps()
	}
	api, err := pve.NewClient(clientConfig)
	if err != nil {
		return err
	}
	clientOpts.Identity = starter.Identity(workerProgram)
	c, err := starter.Dial(ctx, clientOpts)
	if err != nil {
		return err
	}
	defer c.Close()

	// The worker's own client sends the requests of Rollout and CollectGarbage to the proxies'
	// entities, and applies the health schedule.
	requests := starter.New(c, opts.TaskQueue, starter.WithDataConverter(clientOpts.DataConverter), starter.WithNamespace(clientOpts.Namespace))
	applyHealthSchedule(ctx, requests, opts.HealthEvery, logger)

	workerOpts := worker.Options{
		// No activity attempt runs longer than budgets.request (its StartToClose timeout), so
		// this lets every attempt in flight finish. One cut off anyway is retried by Temporal.
		WorkerStopTimeout:            cfg.Budgets.Request,
		StickyScheduleToStartTimeout: stickyScheduleToStart,
		// No task queue activity rate: an activity held in the queue spends its
		// ScheduleToClose budget there and fails a create that the client's own cap
		// (proxmox.calls) would only have delayed (docs/proxmox.md, "The call cap").
		Interceptors: []interceptor.WorkerInterceptor{activities.CallPriority(core.CareWorkflows...)},
	}
	if opts.DeploymentName != "" {
		workerOpts.DeploymentOptions = workflows.DeploymentOptions(opts.DeploymentName, opts.BuildID)
	}
	w := worker.New(c, opts.TaskQueue, workerOpts)
	(&workflows.Workflows{Config: cfg}).Register(w)
	w.RegisterActivity(&activities.Activities{API: api, Proxmox: cfg.Proxmox, Runs: &activities.TemporalRuns{Client: c},
		Proxies: starter.EntityProxies{Client: requests}, AddressPools: starter.AddressPools{Client: requests},
		Privileges: activities.NewPrivilegeCache(activities.PrivilegeCacheTTL, nil), LookAgainWithin: activities.DefaultLookAgainWithin})
	logger.Info("pveflow worker starting",
		slog.String("temporal", clientOpts.HostPort),
		slog.String("namespace", clientOpts.Namespace),
		slog.String("taskQueue", opts.TaskQueue),
		slog.String("identity", clientOpts.Identity),
		slog.String("proxmox", cfg.Proxmox.URL),
		slog.String("payloads", payloadEncryption(getenv)),
		slog.String("deployment", deployment(opts)))
	if opts.Promote {
		go promote(ctx, c, opts, logger)
	}
	if capped(cfg.Proxmox.Calls) {
		share := starter.CallShare{Worker: clientOpts.Identity, Cap: cfg.Proxmox.Calls, Proxmox: api, Drain: api.RequestTimeout(), Logger: logger}
		slot, before, err := claimSlot(slotDir(getenv), opts.TaskQueue, clientOpts.Identity)
		if err != nil {
			logger.Warn("no worker slot: a worker started after this one is killed waits for its call share's lease to end", "error", err)
		} else {
			defer slot.Close()
			api.TellCallsInFlight(slot.recordCalls)
			share.Replaces, share.ReplacedCalls = before.identity, before.calls
			logger.Info("worker slot", "slot", slot.Name(), "replaces", before.identity)
		}
		go requests.KeepCallShare(ctx, share)
	}
	ready.watch(pollingCheck(c, opts.TaskQueue, clientOpts.Identity), proxmoxCheck(api))
	if err := w.Run(doneChan(ctx)); err != nil {
		return fmt.Errorf("worker on task queue %s: %w", opts.TaskQueue, err)
	}
	logger.Info("pveflow worker stopped")
	return nil
}

// capped is whether proxmox.calls caps the calls at all.
func capped(c config.Calls) bool { return c.PerSecond > 0 || c.Concurrency > 0 }

// applyHealthSchedule makes the health schedule of the worker's task queue run CheckHealth every
// interval, unless interval is 0. A schedule that cannot be applied is logged, not fatal: the
// worker's work is the proxies, and `pveflow check` still runs a check on request.
func applyHealthSchedule(ctx context.Context, s *starter.Client, every time.Duration, logger *slog.Logger) {
	if every == 0 {
		return
	}
	if err := s.ApplyHealthSchedule(ctx, every); err != nil {
		logger.Warn("Health schedule not applied; pveflow check --last has nothing new to read", slog.Any("error", err))
		return
	}
	logger.Info("Health schedule applied", slog.Duration("every", every))
}

// payloadEncryption says, for the start-up log, whether the worker encrypts payloads and with
// which key file.
func payloadEncryption(getenv func(string) string) string {
	if path := getenv(starter.CodecKeyFileEnv); path != "" {
		return "encrypted with the keys of " + path
	}
	return "plain (" + starter.CodecKeyFileEnv + " unset)"
}

// stickyScheduleToStart is how long a workflow task waits on the sticky queue of the worker
// that ran the workflow last before Temporal gives it to any worker: one second, where the SDK's
// default is five. A worker that dies (killed, out of memory) tells the server nothing, and for
// 10 s after its last poll the server still puts the next workflow task of each workflow it ran
// on its sticky queue, where the task waits out this timeout. Under worker kills that wait was
// most of the time a storage's clone slots stood idle while creates queued: a slot's turn is two
// workflow tasks (the admission's grant, the granted create's Clone call: docs/architecture.md,
// *Clone admission*). A live worker takes its sticky tasks within milliseconds, so a task that
// times out there, and is replayed from its history by another worker, stays the exception.
// Less than a second is taken too; 500 ms did not clearly keep the slots busier under kills
// (0.87 in one run, against 0.81 and 0.86 with a second) and would replay more on a loaded
// worker.
const stickyScheduleToStart = time.Second

// deployment says, for the start-up log, which worker deployment and build the worker is.
func deployment(o options) string {
	if o.DeploymentName == "" {
		return "unversioned"
	}
	return o.DeploymentName + " build " + o.BuildID
}

// promote makes the worker's build its deployment's current version once the server has seen
// it poll. A failure leaves the worker running, serving the runs already on its build.
func promote(ctx context.Context, c client.Client, o options, logger *slog.Logger) {
	if err := starter.PromoteBuild(ctx, c, o.DeploymentName, o.BuildID); err != nil {
		if ctx.Err() == nil {
			logger.Error("worker build not promoted", slog.Any("error", err))
		}
		return
	}
	logger.Info("worker build promoted: new and running workflows go to it",
		slog.String("deployment", o.DeploymentName), slog.String("buildID", o.BuildID))
}

// doneChan is ctx.Done as the channel type worker.Run takes.
func doneChan(ctx context.Context) <-chan any {
	ch := make(chan any)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}

// simResourcesLag is how often the simulator refreshes the status cache behind cluster
// resources, as pvestatd does on a real cluster: names and statuses lag by up to this much.
const simResourcesLag = 10 * time.Second

// startSimulator serves the simulator's default cluster on a free loopback port, in real time,
// and writes its URL to <dir>/url beside the CA and token files, for tools and tests to find.
func startSimulator(o options, logger *slog.Logger) (*simserver.Server, error) {
	dir, err := filepath.Abs(o.SimulatorDir)
	if err != nil {
		return nil, fmt.Errorf("simulator directory %s: %w", o.SimulatorDir, err)
	}
	model := pvesim.Default()
	model.TaskDurations = map[string]time.Duration{"qmclone": o.SimulatorCloneTime}
	model.AgentBootDelay = o.SimulatorAgentDelay
	model.ResourcesLag = simResourcesLag
	model.StallClones = o.SimulatorStallClones
	srv, err := simserver.Start(simserver.Options{API: pvesim.New(model), Dir: dir, Logger: logger})
	if err != nil {
		return nil, err
	}
	urlFile := filepath.Join(dir, "url")
	if err := os.WriteFile(urlFile, []byte(srv.URL()+"\n"), 0o644); err != nil {
		return nil, errors.Join(fmt.Errorf("simulator: %w", err), srv.Close())
	}
	logger.Info("Proxmox simulator serving",
		slog.String("url", srv.URL()),
		slog.String("urlFile", urlFile),
		slog.String("caFile", srv.CAFile()),
		slog.String("tokenFile", srv.TokenFile()),
		slog.Duration("cloneTime", o.SimulatorCloneTime),
		slog.Bool("stallClones", o.SimulatorStallClones))
	return srv, nil
}
