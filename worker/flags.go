package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/pveflow/pveflow/internal/cliflag"
	"github.com/pveflow/pveflow/workflows"
)

// simulatorConfig is the configuration --simulator uses when none is given: the simulator's
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

// simOptions shape the in-process simulator of --simulator.
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
TEMPORAL_PROFILE chooses in TEMPORAL_CONFIG_FILE (default the temporal CLI's).

PVEFLOW_CODEC_KEY_FILE names the key file of the payload codec: when set, workflow and activity
inputs and results (cloud-init user-data among them) are encrypted in Temporal's history;
failure messages stay plain, carrying no secret. The starters and the codec server must use
the same file.

OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER (otlp, console or none; for metrics also
prometheus), OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL (grpc or http/protobuf) and
OTEL_SERVICE_NAME (default pveflow-worker) export the worker's spans and metrics, as for any
OpenTelemetry program, except that nothing is exported unless asked: spans go by OTLP once an
endpoint is set, metrics only when OTEL_METRICS_EXPORTER names an exporter (--metrics-listen
serves them to Prometheus either way). The console exporters write to stderr.

Each flag can be set by its variable instead, PVEFLOW_ and the flag's name in capitals with '_'
for '-': --log-level by PVEFLOW_LOG_LEVEL. A flag given wins over its variable.

Flags:
`

// errUsage is the error of a command line the worker cannot run, once it is reported.
var errUsage = errors.New("usage error")

// flagEnv is the variable that sets the flag name when the command line does not.
func flagEnv(name string) string {
	return "PVEFLOW_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagSet is the worker's flags, which parse into o and, for what needs checking after, into
// logFormat and logLevel. Each usage names the flag's variable.
func flagSet(o *options, logFormat, logLevel *string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&o.configPath, "config", "", "configuration `FILE`; required unless --simulator, which defaults to "+simulatorConfig)
	fs.StringVar(&o.taskQueue, "task-queue", workflows.DefaultTaskQueue, "task `QUEUE` to poll")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "`ADDR` to serve Prometheus metrics (/metrics) and health checks (/healthz, /readyz) on, such as 127.0.0.1:9464; off when empty")
	fs.StringVar(logFormat, "log-format", "text", "log `FORMAT`, text or json")
	fs.StringVar(logLevel, "log-level", "info", "least `LEVEL` logged: debug, info, warn or error")
	fs.DurationVar(&o.healthEvery, "health-every", 5*time.Minute, "run the CheckHealth workflow this often, on a Temporal Schedule the worker creates or updates at start; 0 leaves the schedule alone")
	fs.StringVar(&o.deployment.name, "deployment-name", "", "worker deployment `NAME` to join as a versioned worker; unset, the worker is unversioned")
	fs.StringVar(&o.deployment.buildID, "build-id", "", "`ID` of this build in its deployment; unset, it comes from the binary's build info")
	fs.BoolVar(&o.deployment.promote, "promote", false, "make this build the deployment's current version once it polls, moving running workflows to it")
	fs.BoolVar(&o.simulator, "simulator", false, "serve the Proxmox simulator in this process and use it instead of the configured cluster")
	fs.StringVar(&o.sim.dir, "simulator-dir", ".run/pvesim", "`DIR` receiving the simulator's url, ca.pem and token files")
	fs.DurationVar(&o.sim.cloneTime, "simulator-clone-time", 5*time.Second, "how long a simulated clone takes")
	fs.DurationVar(&o.sim.agentDelay, "simulator-agent-delay", 3*time.Second, "how long a simulated VM runs before its guest agent answers")
	fs.BoolVar(&o.sim.stallClones, "simulator-stall-clones", false, "let every simulated clone run forever, as a clone stuck on its storage does")
	fs.VisitAll(func(f *pflag.Flag) { f.Usage += " ($" + flagEnv(f.Name) + ")" })
	fs.BoolP("help", "h", false, "show this help")
	fs.Bool("version", false, "print this build: module version, commit, Go and Temporal SDK")
	return fs
}

// actions are the flags that do something at once instead of setting an option: no variable
// sets them.
var actions = map[string]bool{"help": true, "version": true}

// errVersion is parseFlags' answer to --version.
var errVersion = errors.New("worker: --version")

// parseFlags reads the command line, and the PVEFLOW_* variable of each flag it leaves out. A
// usage error has been reported on stderr, in one line, when it returns errUsage; -h has
// written the help there when it returns pflag.ErrHelp; --version returns errVersion.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	var logFormat, logLevel string
	fs := flagSet(&o, &logFormat, &logLevel)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	problem := cliflag.Explain(fs, fs.Parse(args))
	if help, _ := fs.GetBool("help"); help && problem == nil {
		fs.Usage()
		return options{}, pflag.ErrHelp
	}
	if version, _ := fs.GetBool("version"); version && problem == nil {
		return options{}, errVersion
	}
	if problem == nil {
		problem = setFromEnv(fs, getenv)
	}
	if problem == nil {
		problem = o.check(fs.Args(), logFormat, logLevel)
	}
	if problem != nil {
		fmt.Fprintf(stderr, "worker: %v; run 'worker --help' for usage\n", problem)
		return options{}, errUsage
	}
	o.logJSON = logFormat == "json"
	if o.configPath == "" {
		o.configPath = simulatorConfig
	}
	if o.deployment.buildID == "" {
		o.deployment.buildID = buildID()
	}
	return o, nil
}

// setFromEnv sets each flag the command line left out from its variable, when that is set.
func setFromEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		v := getenv(flagEnv(f.Name))
		if err != nil || f.Changed || v == "" || actions[f.Name] {
			return
		}
		if setErr := f.Value.Set(v); setErr != nil {
			err = fmt.Errorf("%s %q: %w", flagEnv(f.Name), v, setErr)
		}
	})
	return err
}

// check finds what the command line gets wrong beyond what pflag checks.
func (o *options) check(args []string, logFormat, logLevel string) error {
	switch {
	case len(args) > 0:
		return fmt.Errorf("unexpected arguments %q", args)
	case logFormat != "text" && logFormat != "json":
		return fmt.Errorf("--log-format %q: want text or json", logFormat)
	case o.logLevel.UnmarshalText([]byte(logLevel)) != nil:
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
	case o.configPath == "" && !o.simulator:
		return errors.New("--config (or PVEFLOW_CONFIG) is required unless --simulator")
	case o.sim.cloneTime < 0 || o.sim.agentDelay < 0:
		return errors.New("--simulator-clone-time and --simulator-agent-delay must not be negative")
	case o.deployment.promote && o.deployment.name == "":
		return errors.New("--promote needs --deployment-name (or PVEFLOW_DEPLOYMENT_NAME)")
	case o.deployment.name != "" && o.deployment.buildID == "" && buildID() == "":
		return errors.New("--deployment-name needs a --build-id: this binary's build info has none")
	case o.healthEvery < 0:
		return errors.New("--health-every must not be negative")
	}
	return nil
}

// logger is the worker's logger, writing to w.
func (o options) logger(w io.Writer) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	if o.logJSON {
		return slog.New(slog.NewJSONHandler(w, hopts))
	}
	return slog.New(slog.NewTextHandler(w, hopts))
}
