package starter

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	tlog "go.temporal.io/sdk/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/internal/telemetry"
)

// DefaultAddress is the Temporal frontend used when neither TEMPORAL_ADDRESS nor a profile sets
// one: the dev server's.
const DefaultAddress = "127.0.0.1:7233"

// DialTimeout bounds how long Dial waits for the server to answer.
const DialTimeout = 10 * time.Second

// CodecKeyFileEnv names the variable that turns payload encryption on: the path of a key file
// (the format is in docs/operations.md, "Secrets in history").
const CodecKeyFileEnv = "PVEFLOW_CODEC_KEY_FILE"

// ClientOptions reads the connection to Temporal from the environment as the temporal CLI does,
// with go.temporal.io/sdk/contrib/envconfig: the variables TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_* and TEMPORAL_GRPC_META_* over the profile
// TEMPORAL_PROFILE chooses (default "default") in TEMPORAL_CONFIG_FILE (default the temporal
// CLI's file, temporalio/temporal.toml in os.UserConfigDir). getenv is os.Getenv outside tests,
// and a variable set to "" counts as unset; the names of the TEMPORAL_GRPC_META_* variables,
// which getenv cannot list, come from the process environment, their values through getenv (one
// that is "" removes the profile's header of that name, as in envconfig).
// TEMPORAL_CODEC_* (a remote codec) is not read: pveflow encrypts locally, see below.
//
// What envconfig leaves out, ClientOptions adds:
//
//   - the address defaults to DefaultAddress and the namespace to "default";
//   - the address may list several frontends of one cluster, comma-separated
//     (127.0.0.1:7233,127.0.0.1:7243, as make cluster runs them): the client spreads its calls
//     over them and goes on with the others while one is down, where the temporal CLI takes one
//     address (a load balancer in front of the frontends does it for one address). With TLS,
//     TEMPORAL_TLS_SERVER_NAME names the certificate's host;
//   - an address that is not host:port (or a gRPC resolver's target, such as dns:///host:port)
//     is an error naming where it came from, before any dial;
//   - a TEMPORAL_CONFIG_FILE that does not exist is an error, not an empty file;
//   - TEMPORAL_TLS or TEMPORAL_TLS_DISABLE_HOST_VERIFICATION set to anything but true, false,
//     1 or 0 is an error, not ignored.
//
// PVEFLOW_CODEC_KEY_FILE (CodecKeyFileEnv), when set, names a key file of AES-256 keys: it is
// read once, here, and the options get the data converter and the failure converter that
// encrypt every payload (workflow and activity inputs and results, among them cloud-init
// user-data) and every failure message and stack trace the client writes, and decrypt what it
// reads. The worker and every client of pveflow's workflows must then share the file. A file
// that cannot be read, has a bad line or a mode looser than 0640 is an error naming the variable
// and the file, never a key. Unset, the options have codec.KeylessConverters: plain payloads.
//
// The options trace through OpenTelemetry's global tracer provider (otel.GetTracerProvider),
// with Temporal's tracing interceptor (telemetry.TracingInterceptor): StartWorkflow, and the
// queries and signals the client sends, are spans once the program sets a provider, and the
// workflow's spans are their children. Without a provider they cost next to nothing. The
// options have no Logger: that is the caller's (see ClientOptionsWithLogger).
func ClientOptions(getenv func(string) string) (client.Options, error) {
	if err := checkEnv(getenv); err != nil {
		return client.Options{}, err
	}
	opts, err := envconfig.LoadClientOptions(envconfig.LoadClientOptionsRequest{EnvLookup: envLookup(getenv)})
	if err != nil {
		return client.Options{}, fmt.Errorf("connection to Temporal: %w", err)
	}
	opts.HostPort = cmp.Or(opts.HostPort, DefaultAddress)
	opts.Namespace = cmp.Or(opts.Namespace, "default")
	frontends := strings.Split(opts.HostPort, ",")
	for _, addr := range frontends {
		if !validAddress(addr) {
			return client.Options{}, fmt.Errorf("%s: want host:port, such as %s, or several, comma-separated", addressSource(getenv, opts.HostPort), DefaultAddress)
		}
	}
	if len(frontends) > 1 {
		spread(&opts, frontends)
	}
	opts.DataConverter, opts.FailureConverter = codec.KeylessConverters()
	if path := getenv(CodecKeyFileEnv); path != "" {
		c, err := codec.LoadKeyFile(path)
		if err != nil {
			// The codec's errors name the file and a line or key ID, never a key.
			return client.Options{}, fmt.Errorf("%s: %w", CodecKeyFileEnv, err)
		}
		opts.DataConverter, opts.FailureConverter = codec.Converters(c)
	}
	tracing, err := telemetry.TracingInterceptor(otel.GetTracerProvider())
	if err != nil {
		return client.Options{}, fmt.Errorf("tracing: %w", err)
	}
	opts.Interceptors = append(opts.Interceptors, tracing)
	return opts, nil
}

// ClientOptionsWithLogger is ClientOptions with the client's logs going to logger.
func ClientOptionsWithLogger(getenv func(string) string, logger *slog.Logger) (client.Options, error) {
	opts, err := ClientOptions(getenv)
	if err != nil {
		return client.Options{}, err
	}
	opts.Logger = tlog.NewStructuredLogger(logger)
	return opts, nil
}

// spread points opts at several frontends of one cluster: a resolver of its own lists them, and
// the client's connection spreads its calls over them (round robin, the SDK's default policy),
// and goes on with the others while one is down.
func spread(opts *client.Options, frontends []string) {
	r := manual.NewBuilderWithScheme(frontendsScheme)
	var state resolver.State
	for _, addr := range frontends {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: addr})
	}
	r.InitialState(state)
	opts.HostPort = frontendsScheme + ":///" + strings.Join(frontends, ",")
	opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, grpc.WithResolvers(r))
}

// frontendsScheme is the resolver scheme of a client of several frontends.
const frontendsScheme = "pveflow-frontends"

// Identity is a client identity naming program, the host and the process, as
// "pveflow-worker@host:4242": Temporal records it with every call, and the UI shows it beside
// each workflow task and activity attempt a worker took. The SDK's own, "4242@host@", does not
// say which program it was.
func Identity(program string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s@%s:%d", program, host, os.Getpid())
}

// Dial connects to the Temporal server of opts and checks that it answers within DialTimeout.
func Dial(ctx context.Context, opts client.Options) (client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Temporal at %s: %w", opts.HostPort, err)
	}
	return c, nil
}

// DialFromEnv connects to the Temporal server the environment names (see ClientOptions),
// logging through slog.Default.
func DialFromEnv(ctx context.Context) (client.Client, error) {
	opts, err := ClientOptionsWithLogger(os.Getenv, slog.Default())
	if err != nil {
		return nil, err
	}
	return Dial(ctx, opts)
}

// envLookup is getenv as envconfig looks variables up, "" being unset.
type envLookup func(string) string

func (getenv envLookup) LookupEnv(name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// Environ lists the process's TEMPORAL_GRPC_META_* variables, which envconfig crawls for and
// getenv cannot list, with their values as getenv has them.
func (getenv envLookup) Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, grpcMetaPrefix) {
			env = append(env, name+"="+getenv(name))
		}
	}
	return env
}

// grpcMetaPrefix starts the variables whose values envconfig sends as gRPC metadata.
const grpcMetaPrefix = "TEMPORAL_GRPC_META_"

// boolVars are the variables envconfig reads as booleans; it ignores any other value, which
// would leave TLS as it was without a word.
var boolVars = []string{"TEMPORAL_TLS", "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"}

// checkEnv refuses what envconfig would silently ignore: a boolean that is neither true nor
// false, and a TEMPORAL_CONFIG_FILE that does not exist (envconfig reads it as an empty file).
func checkEnv(getenv func(string) string) error {
	for _, name := range boolVars {
		if v := strings.ToLower(getenv(name)); v != "" && v != "true" && v != "false" && v != "1" && v != "0" {
			return fmt.Errorf("%s %q: want true or false", name, getenv(name))
		}
	}
	if file := getenv("TEMPORAL_CONFIG_FILE"); file != "" {
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("TEMPORAL_CONFIG_FILE: %w", err)
		}
	}
	return nil
}

// validAddress tells an address gRPC can dial from one it would only fail on later, and then with
// "no children to pick from": host:port (an empty host being this host's, as for net.Dial), or
// the target of a registered gRPC resolver (dns:///host:port).
func validAddress(addr string) bool {
	if u, err := url.Parse(addr); err == nil && u.Scheme != "" && resolver.Get(u.Scheme) != nil {
		return true
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || strings.Contains(host, "/") {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

// addressSource names the address addr and where it came from: TEMPORAL_ADDRESS or a profile.
func addressSource(getenv func(string) string, addr string) string {
	if getenv("TEMPORAL_ADDRESS") != "" {
		return fmt.Sprintf("TEMPORAL_ADDRESS %q", addr)
	}
	return fmt.Sprintf("address %q of profile %q in %s", addr,
		cmp.Or(getenv("TEMPORAL_PROFILE"), envconfig.DefaultConfigFileProfile),
		cmp.Or(getenv("TEMPORAL_CONFIG_FILE"), envconfig.DefaultConfigFilePath()))
}
