package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/spf13/pflag"

	"github.com/pveflow/pveflow/internal/cliflag"
	"github.com/pveflow/pveflow/workflows/core"
)

// simulatorConfig is the configuration --simulator uses when none is given: the simulator's
// default cluster, relative to the repository root where `go run ./worker` runs.
const simulatorConfig = "testdata/config/simulator.yaml"

// options are the worker's settings, one field a flag. Each is set by its flag, else by the
// variable of its env tag, else it is the flag's default: flagSet binds the flags, and
// parseFlags reads the variables with github.com/caarlos0/env. A tag is the flag's name as
// flagEnv spells it (TestFlags_eachReadsTheVariableItsHelpNames).
type options struct {
	ConfigPath string `env:"PVEFLOW_CONFIG"`
	TaskQueue  string `env:"PVEFLOW_TASK_QUEUE"`
	// MetricsListen is the address of the metrics endpoint; empty turns it off.
	MetricsListen string `env:"PVEFLOW_METRICS_LISTEN"`
	LogFormat     string `env:"PVEFLOW_LOG_FORMAT"`
	LogLevel      string `env:"PVEFLOW_LOG_LEVEL"`
	// HealthEvery is the interval of the health schedule the worker applies at start; 0
	// leaves the schedule alone.
	HealthEvery time.Duration `env:"PVEFLOW_HEALTH_EVERY"`
	// The worker deployment the worker joins (see workflows.DeploymentOptions): no
	// DeploymentName leaves the worker unversioned.
	DeploymentName string `env:"PVEFLOW_DEPLOYMENT_NAME"`
	BuildID        string `env:"PVEFLOW_BUILD_ID"`
	Promote        bool   `env:"PVEFLOW_PROMOTE"`
	// Simulator serves the in-process simulator that the other Simulator fields shape.
	Simulator            bool          `env:"PVEFLOW_SIMULATOR"`
	SimulatorDir         string        `env:"PVEFLOW_SIMULATOR_DIR"`
	SimulatorCloneTime   time.Duration `env:"PVEFLOW_SIMULATOR_CLONE_TIME"`
	SimulatorAgentDelay  time.Duration `env:"PVEFLOW_SIMULATOR_AGENT_DELAY"`
	SimulatorStallClones bool          `env:"PVEFLOW_SIMULATOR_STALL_CLONES"`

	// logLevel is LogLevel, read by check.
	logLevel slog.Level
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
for '-': --log-level by PVEFLOW_LOG_LEVEL. A flag given wins over its variable, whose value must
still be valid.

Flags:
`

// errUsage is the error of a command line the worker cannot run, once it is reported.
var errUsage = errors.New("usage error")

// flagEnv is the variable of the flag name, which its usage names: the env tag of its options
// field.
func flagEnv(name string) string {
	return "PVEFLOW_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagSet is the worker's flags, which parse into o. Each usage names the flag's variable.
func flagSet(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&o.ConfigPath, "config", "", "configuration `FILE`; required unless --simulator, which defaults to "+simulatorConfig)
	fs.StringVar(&o.TaskQueue, "task-queue", core.DefaultTaskQueue, "task `QUEUE` to poll")
	fs.StringVar(&o.MetricsListen, "metrics-listen", "", "`ADDR` to serve Prometheus metrics (/metrics) and health checks (/healthz, /readyz) on, such as 127.0.0.1:9464; off when empty")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log `FORMAT`, text or json")
	fs.StringVar(&o.LogLevel, "log-level", "info", "least `LEVEL` logged: debug, info, warn or error")
	fs.DurationVar(&o.HealthEvery, "health-every", 5*time.Minute, "run the CheckHealth workflow this often, on a Temporal Schedule the worker creates or updates at start; 0 leaves the schedule alone")
	fs.StringVar(&o.DeploymentName, "deployment-name", "", "worker deployment `NAME` to join as a versioned worker; unset, the worker is unversioned")
	fs.StringVar(&o.BuildID, "build-id", "", "`ID` of this build in its deployment; unset, it comes from the binary's build info")
	fs.BoolVar(&o.Promote, "promote", false, "make this build the deployment's current version once it polls, moving running workflows to it")
	fs.BoolVar(&o.Simulator, "simulator", false, "serve the Proxmox simulator in this process and use it instead of the configured cluster")
	fs.StringVar(&o.SimulatorDir, "simulator-dir", ".run/pvesim", "`DIR` receiving the simulator's url, ca.pem and token files")
	fs.DurationVar(&o.SimulatorCloneTime, "simulator-clone-time", 5*time.Second, "how long a simulated clone takes")
	fs.DurationVar(&o.SimulatorAgentDelay, "simulator-agent-delay", 3*time.Second, "how long a simulated VM runs before its guest agent answers")
	fs.BoolVar(&o.SimulatorStallClones, "simulator-stall-clones", false, "let every simulated clone run forever, as a clone stuck on its storage does")
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

// parseFlags reads the command line, and each flag's PVEFLOW_* variable from environ, the flag
// winning. A usage error has been reported on stderr, in one line, when it returns errUsage; -h
// has written the help there when it returns pflag.ErrHelp; --version returns errVersion.
func parseFlags(args []string, environ map[string]string, stderr io.Writer) (options, error) {
	var o options
	fs := flagSet(&o)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	// The variables go over the flags' defaults before the command line goes over them, so a
	// flag given wins; a bad variable is an error even then, once help and version are ruled
	// out.
	envErr := env.ParseWithOptions(&o, env.Options{Environment: environ})
	problem := cliflag.Explain(fs, fs.Parse(args))
	if help, _ := fs.GetBool("help"); help && problem == nil {
		fs.Usage()
		return options{}, pflag.ErrHelp
	}
	if version, _ := fs.GetBool("version"); version && problem == nil {
		return options{}, errVersion
	}
	if problem == nil && envErr != nil {
		problem = variableError(envErr)
	}
	if problem == nil {
		problem = o.check(fs.Args())
	}
	if problem != nil {
		fmt.Fprintf(stderr, "worker: %v; run 'worker --help' for usage\n", problem)
		return options{}, errUsage
	}
	if o.ConfigPath == "" {
		o.ConfigPath = simulatorConfig
	}
	if o.BuildID == "" {
		o.BuildID = buildID()
	}
	return o, nil
}

// variableError names the variable of a value env could not parse, whose error names the
// options field instead.
func variableError(err error) error {
	var bad env.ParseError
	if !errors.As(err, &bad) {
		return err
	}
	field, _ := reflect.TypeFor[options]().FieldByName(bad.Name)
	return fmt.Errorf("%s: %w", field.Tag.Get("env"), bad.Err)
}

// check finds what the command line gets wrong beyond what pflag checks, and reads the log
// level.
func (o *options) check(args []string) error {
	switch {
	case len(args) > 0:
		return fmt.Errorf("unexpected arguments %q", args)
	case o.LogFormat != "text" && o.LogFormat != "json":
		return fmt.Errorf("--log-format %q: want text or json", o.LogFormat)
	case o.logLevel.UnmarshalText([]byte(o.LogLevel)) != nil:
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.LogLevel)
	case o.ConfigPath == "" && !o.Simulator:
		return errors.New("--config (or PVEFLOW_CONFIG) is required unless --simulator")
	case o.SimulatorCloneTime < 0 || o.SimulatorAgentDelay < 0:
		return errors.New("--simulator-clone-time and --simulator-agent-delay must not be negative")
	case o.Promote && o.DeploymentName == "":
		return errors.New("--promote needs --deployment-name (or PVEFLOW_DEPLOYMENT_NAME)")
	case o.DeploymentName != "" && o.BuildID == "" && buildID() == "":
		return errors.New("--deployment-name needs a --build-id: this binary's build info has none")
	case o.HealthEvery < 0:
		return errors.New("--health-every must not be negative")
	}
	return nil
}

// logger is the worker's logger, writing to w.
func (o options) logger(w io.Writer) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	if o.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, hopts))
	}
	return slog.New(slog.NewTextHandler(w, hopts))
}
