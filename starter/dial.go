package starter

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	tlog "go.temporal.io/sdk/log"

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

// ClientOptions reads the connection to Temporal from the environment as the temporal CLI does
// (with go.temporal.io/sdk/contrib/envconfig); getenv is os.Getenv outside tests, and a variable
// set to "" counts as unset:
//
//   - TEMPORAL_CONFIG_FILE: a TOML file of profiles; default the temporal CLI's,
//     temporalio/temporal.toml in the user's configuration directory (os.UserConfigDir, found
//     through getenv). A missing default file is no file; a missing TEMPORAL_CONFIG_FILE is an
//     error.
//   - TEMPORAL_PROFILE: the profile of that file to use, default "default".
//   - TEMPORAL_ADDRESS: host:port of the frontend; default the profile's, else DefaultAddress;
//   - TEMPORAL_NAMESPACE: default the profile's, else "default";
//   - TEMPORAL_API_KEY: an API key, sent with every call; it turns TLS on unless TEMPORAL_TLS
//     is false;
//   - TEMPORAL_TLS: true turns TLS on with the system's roots, false turns it off;
//   - TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH: files of a client
//     certificate and its key, for mTLS; both or neither;
//   - TEMPORAL_TLS_SERVER_CA_CERT_PATH: a PEM file of the CAs that verify the server, instead
//     of the system's;
//   - TEMPORAL_TLS_SERVER_NAME: the server name the certificate is checked against (SNI),
//     when it is not the address's host.
//
// Each of the last three turns TLS on, and each variable wins over the profile's setting.
// envconfig's other variables (TEMPORAL_TLS_*_DATA, TEMPORAL_TLS_DISABLE_HOST_VERIFICATION,
// TEMPORAL_CLIENT_AUTHORITY) are honoured too; TEMPORAL_GRPC_META_* and TEMPORAL_CODEC_* are not.
//
// PVEFLOW_CODEC_KEY_FILE (CodecKeyFileEnv), when set, names a key file of AES-256 keys: it is
// read once, here, and the options get the data converter and the failure converter that
// encrypt every payload (workflow and activity inputs and results, among them cloud-init
// user-data) and every failure message and stack trace the client writes, and decrypt what it
// reads. The worker and every client of pveflow's workflows must then share the file. A file
// that cannot be read, has a bad line or a mode looser than 0640 is an error naming the variable
// and the file, never a key. Unset, the options have codec.KeylessConverters: plain payloads.
//
// The names the starter read before, TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY and TEMPORAL_TLS_CA,
// are deprecated: each still stands in for the variable that replaces it when that one is
// unset, with a warning through slog.Default naming the variable to use. The options have no
// Logger: that is the caller's (see ClientOptionsWithLogger).
//
// The options trace through OpenTelemetry's global tracer provider (otel.GetTracerProvider),
// with Temporal's tracing interceptor (telemetry.TracingInterceptor): StartWorkflow, and the
// queries and signals the client sends, are spans once the program sets a provider, and the
// workflow's spans are their children. Without a provider they cost next to nothing.
func ClientOptions(getenv func(string) string) (client.Options, error) {
	return clientOptions(getenv, slog.Default())
}

// ClientOptionsWithLogger is ClientOptions with its warnings, and then the client's own logs,
// going to logger.
func ClientOptionsWithLogger(getenv func(string) string, logger *slog.Logger) (client.Options, error) {
	opts, err := clientOptions(getenv, logger)
	if err != nil {
		return client.Options{}, err
	}
	opts.Logger = tlog.NewStructuredLogger(logger)
	return opts, nil
}

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

// A fileSetting is a file of the TLS settings: its variable, the deprecated variable that
// stands in for it, and its key in a profile.
type fileSetting struct{ env, deprecated, key string }

var (
	clientCert = fileSetting{"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CERT", "tls.client_cert_path"}
	clientKey  = fileSetting{"TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_KEY", "tls.client_key_path"}
	serverCA   = fileSetting{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_CA", "tls.server_ca_cert_path"}
	tlsFiles   = []fileSetting{clientCert, clientKey, serverCA}
)

// boolVars are the variables envconfig reads as booleans; it ignores any other value, which
// would leave TLS as it was without a word.
var boolVars = []string{"TEMPORAL_TLS", "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"}

// settings is where the settings of a profile came from: the environment or the profile.
type settings struct {
	getenv        func(string) string
	file, profile string
}

// LookupEnv is getenv as envconfig looks variables up: "" is unset, and a deprecated variable
// stands in for the one that replaces it.
func (s settings) LookupEnv(name string) (string, bool) {
	v := s.getenv(name)
	for _, f := range tlsFiles {
		if name == f.env && v == "" {
			v = s.getenv(f.deprecated)
		}
	}
	return v, v != ""
}

// Environ lists no variable: envconfig crawls it for TEMPORAL_GRPC_META_*, which getenv
// cannot list.
func (settings) Environ() []string { return nil }

// where names what set f: its variable, the deprecated one, or the profile's key.
func (s settings) where(f fileSetting) string {
	switch {
	case s.getenv(f.env) != "":
		return f.env
	case s.getenv(f.deprecated) != "":
		return f.deprecated
	}
	return fmt.Sprintf("%s of profile %q in %s", f.key, s.profile, s.file)
}

// unset names f, which is not set, in the words that set its partner.
func (s settings) unset(f, partner fileSetting) string {
	switch s.where(partner) {
	case partner.env:
		return f.env
	case partner.deprecated:
		return f.deprecated
	}
	return f.key
}

// clientOptions is ClientOptions warning through logger.
func clientOptions(getenv func(string) string, logger *slog.Logger) (client.Options, error) {
	for _, f := range tlsFiles {
		switch {
		case getenv(f.deprecated) == "":
		case getenv(f.env) != "":
			logger.Warn(fmt.Sprintf("%s is deprecated and ignored: %s is set", f.deprecated, f.env))
		default:
			logger.Warn(fmt.Sprintf("%s is deprecated: set %s instead", f.deprecated, f.env))
		}
	}
	for _, name := range boolVars {
		if v := strings.ToLower(getenv(name)); v != "" && v != "true" && v != "false" && v != "1" && v != "0" {
			return client.Options{}, fmt.Errorf("%s %q: want true or false", name, getenv(name))
		}
	}
	s, prof, err := loadProfile(getenv)
	if err != nil {
		return client.Options{}, err
	}
	if t := prof.TLS; t != nil {
		if t.Disabled {
			for _, f := range tlsFiles {
				if w := s.where(f); w == f.env || w == f.deprecated {
					logger.Warn(fmt.Sprintf("%s is ignored: TLS is off", w))
				}
			}
		} else if err := s.checkFiles(t); err != nil {
			return client.Options{}, err
		}
	}
	opts, err := prof.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return client.Options{}, fmt.Errorf("connection to Temporal: %w", err)
	}
	opts.HostPort = cmp.Or(opts.HostPort, DefaultAddress)
	opts.Namespace = cmp.Or(opts.Namespace, "default")
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

// loadProfile reads the profile TEMPORAL_CONFIG_FILE and TEMPORAL_PROFILE choose, if any, and
// applies the environment over it.
func loadProfile(getenv func(string) string) (settings, envconfig.ClientConfigProfile, error) {
	s := settings{getenv: getenv, file: getenv("TEMPORAL_CONFIG_FILE"), profile: getenv("TEMPORAL_PROFILE")}
	if s.file != "" {
		// envconfig takes a missing file for an empty one: a file named on purpose must exist.
		if _, err := os.Stat(s.file); err != nil {
			return s, envconfig.ClientConfigProfile{}, fmt.Errorf("TEMPORAL_CONFIG_FILE: %w", err)
		}
	} else {
		s.file = userConfigFile(getenv)
	}
	var prof envconfig.ClientConfigProfile
	switch {
	case s.file != "":
		conf, err := envconfig.LoadClientConfig(envconfig.LoadClientConfigOptions{ConfigFilePath: s.file})
		if err != nil {
			return s, prof, fmt.Errorf("config file %s: %w", s.file, err)
		}
		if p := conf.Profiles[cmp.Or(s.profile, envconfig.DefaultConfigFileProfile)]; p != nil {
			prof = *p
		} else if s.profile != "" {
			return s, prof, fmt.Errorf("TEMPORAL_PROFILE %s: no such profile in %s", s.profile, s.file)
		}
	case s.profile != "":
		return s, prof, fmt.Errorf("TEMPORAL_PROFILE %s: no profiles file: set TEMPORAL_CONFIG_FILE", s.profile)
	}
	s.profile = cmp.Or(s.profile, envconfig.DefaultConfigFileProfile)
	if err := prof.ApplyEnvVars(s); err != nil {
		return s, prof, fmt.Errorf("connection to Temporal: %w", err)
	}
	return s, prof, nil
}

// checkFiles reads the TLS files t names, for errors that name the setting: envconfig's do not.
// The PEM data settings are left to envconfig.
func (s settings) checkFiles(t *envconfig.ClientConfigTLS) error {
	certFile, keyFile, caFile := t.ClientCertPath, t.ClientKeyPath, t.ServerCACertPath
	if len(t.ClientCertData) == 0 && len(t.ClientKeyData) == 0 {
		switch {
		case certFile != "" && keyFile == "":
			return fmt.Errorf("%s is set but %s is not: mTLS needs both", s.where(clientCert), s.unset(clientKey, clientCert))
		case certFile == "" && keyFile != "":
			return fmt.Errorf("%s is set but %s is not: mTLS needs both", s.where(clientKey), s.unset(clientCert, clientKey))
		case certFile != "":
			if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
				return fmt.Errorf("%s %s and %s %s: %w", s.where(clientCert), certFile, s.where(clientKey), keyFile, err)
			}
		}
	}
	if caFile != "" && len(t.ServerCACertData) == 0 {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("%s: %w", s.where(serverCA), err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s %s: no PEM certificate in it", s.where(serverCA), caFile)
		}
	}
	return nil
}

// userConfigFile is envconfig.DefaultConfigFilePath, the temporal CLI's file of profiles, with
// the user's configuration directory found as os.UserConfigDir finds it but through getenv; ""
// when getenv names no such directory.
func userConfigFile(getenv func(string) string) string {
	var dir string
	switch runtime.GOOS {
	case "windows":
		dir = getenv("AppData")
	case "darwin", "ios":
		if home := getenv("HOME"); home != "" {
			dir = filepath.Join(home, "Library", "Application Support")
		}
	default:
		dir = getenv("XDG_CONFIG_HOME")
		if dir == "" {
			if home := getenv("HOME"); home != "" {
				dir = filepath.Join(home, ".config")
			}
		} else if !filepath.IsAbs(dir) {
			dir = ""
		}
	}
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "temporalio", "temporal.toml")
}
