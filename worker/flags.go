package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/pveflow/pveflow/workflows"
)

// simulatorConfig is the configuration -simulator uses when none is given: the simulator's
// default cluster, relative to the repository root where `go run ./worker` runs.
const simulatorConfig = "testdata/config/simulator.yaml"

// options are the worker's command line.
type options struct {
	configPath string
	taskQueue  string
	logJSON    bool
	logLevel   slog.Level
	simulator  bool
	sim        simOptions
	// metricsListen is the address of the metrics endpoint; empty turns it off.
	metricsListen string
	// healthEvery is the interval of the health schedule the worker applies at start; 0
	// leaves the schedule alone.
	healthEvery time.Duration
	deployment  deploymentOptions
}

// deploymentOptions put the worker in a worker deployment (see workflows.DeploymentOptions).
type deploymentOptions struct {
	name    string // "" leaves the worker unversioned
	buildID string
	promote bool
}

// simOptions shape the in-process simulator of -simulator.
type simOptions struct {
	dir         string
	cloneTime   time.Duration
	agentDelay  time.Duration
	stallClones bool
}

const usageText = `Usage: worker [flags]

Runs pveflow's Temporal worker. The Temporal server is named as for the temporal CLI: by
TEMPORAL_ADDRESS (default 127.0.0.1:7233), TEMPORAL_NAMESPACE (default "default"),
TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH
(mTLS), TEMPORAL_TLS_SERVER_CA_CERT_PATH and TEMPORAL_TLS_SERVER_NAME, over the profile
TEMPORAL_PROFILE chooses in TEMPORAL_CONFIG_FILE (default the temporal CLI's). TEMPORAL_TLS_CERT,
TEMPORAL_TLS_KEY and TEMPORAL_TLS_CA are deprecated names of the TLS files.

PVEFLOW_CODEC_KEY_FILE names the key file of the payload codec: when set, workflow and activity
inputs and results (cloud-init user-data among them) and failure messages are encrypted in
Temporal's history. The starters and the codec server must use the same file.

OTEL_TRACES_EXPORTER (otlp, console or none), OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL
(grpc or http/protobuf) and OTEL_SERVICE_NAME (default pveflow-worker) export the worker's spans,
as for any OpenTelemetry program; with none of them set, nothing is exported. Console spans go to
stderr.

Flags:
`

// parseFlags reads the command line, with defaults from the PVEFLOW_* environment. A usage
// error has been written to stderr when it returns one.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	var o options
	fs.StringVar(&o.configPath, "config", getenv("PVEFLOW_CONFIG"), "configuration `file` (env PVEFLOW_CONFIG); required unless -simulator, which defaults to "+simulatorConfig)
	fs.StringVar(&o.taskQueue, "task-queue", cmp.Or(getenv("PVEFLOW_TASK_QUEUE"), workflows.DefaultTaskQueue), "task `queue` to poll (env PVEFLOW_TASK_QUEUE)")
	fs.StringVar(&o.metricsListen, "metrics-listen", getenv("PVEFLOW_METRICS_LISTEN"), "`address` to serve Prometheus metrics (/metrics) and health checks (/healthz, /readyz) on, such as 127.0.0.1:9464; off when empty (env PVEFLOW_METRICS_LISTEN)")
	logFormat := fs.String("log-format", cmp.Or(getenv("PVEFLOW_LOG_FORMAT"), "text"), "log `format`, text or json (env PVEFLOW_LOG_FORMAT)")
	logLevel := fs.String("log-level", cmp.Or(getenv("PVEFLOW_LOG_LEVEL"), "info"), "least `level` logged: debug, info, warn or error (env PVEFLOW_LOG_LEVEL)")
	fs.DurationVar(&o.healthEvery, "health-every", 5*time.Minute, "run the CheckHealth workflow this often, on a Temporal Schedule the worker creates or updates at start; 0 leaves the schedule alone")
	fs.BoolVar(&o.simulator, "simulator", false, "serve the Proxmox simulator in this process and use it instead of the configured cluster")
	fs.StringVar(&o.sim.dir, "simulator-dir", ".run/pvesim", "`directory` receiving the simulator's url, ca.pem and token files")
	fs.DurationVar(&o.sim.cloneTime, "simulator-clone-time", 5*time.Second, "how long a simulated clone takes")
	fs.DurationVar(&o.sim.agentDelay, "simulator-agent-delay", 3*time.Second, "how long a simulated VM runs before its guest agent answers")
	fs.BoolVar(&o.sim.stallClones, "simulator-stall-clones", false, "let every simulated clone run forever, as a clone stuck on its storage does")
	fs.StringVar(&o.deployment.name, "deployment-name", getenv("PVEFLOW_DEPLOYMENT_NAME"), "worker deployment `name` to join as a versioned worker (env PVEFLOW_DEPLOYMENT_NAME); unset, the worker is unversioned")
	fs.StringVar(&o.deployment.buildID, "build-id", cmp.Or(getenv("PVEFLOW_BUILD_ID"), buildID()), "`id` of this build in its deployment (env PVEFLOW_BUILD_ID); the default comes from the binary's build info")
	fs.BoolVar(&o.deployment.promote, "promote", getenv("PVEFLOW_PROMOTE") == "true", "make this build the deployment's current version once it polls, moving running workflows to it (env PVEFLOW_PROMOTE=true)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}

	var problem error
	switch {
	case fs.NArg() > 0:
		problem = fmt.Errorf("unexpected arguments %q", fs.Args())
	case *logFormat != "text" && *logFormat != "json":
		problem = fmt.Errorf("-log-format %q: want text or json", *logFormat)
	case o.logLevel.UnmarshalText([]byte(*logLevel)) != nil:
		problem = fmt.Errorf("-log-level %q: want debug, info, warn or error", *logLevel)
	case o.configPath == "" && !o.simulator:
		problem = errors.New("-config (or PVEFLOW_CONFIG) is required unless -simulator")
	case o.sim.cloneTime < 0 || o.sim.agentDelay < 0:
		problem = errors.New("-simulator-clone-time and -simulator-agent-delay must not be negative")
	case o.deployment.promote && o.deployment.name == "":
		problem = errors.New("-promote needs -deployment-name (or PVEFLOW_DEPLOYMENT_NAME)")
	case o.deployment.name != "" && o.deployment.buildID == "":
		problem = errors.New("-deployment-name needs a -build-id: this binary's build info has none")
	case o.healthEvery < 0:
		problem = errors.New("-health-every must not be negative")
	}
	if problem != nil {
		fmt.Fprintln(stderr, "worker:", problem)
		fs.Usage()
		return options{}, problem
	}
	o.logJSON = *logFormat == "json"
	if o.configPath == "" {
		o.configPath = simulatorConfig
	}
	return o, nil
}

// logger is the worker's logger, writing to w.
func (o options) logger(w io.Writer) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	if o.logJSON {
		return slog.New(slog.NewJSONHandler(w, hopts))
	}
	return slog.New(slog.NewTextHandler(w, hopts))
}
