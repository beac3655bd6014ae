package starter_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
)

// writeCert writes a self-signed certificate for name and its key as PEM files into dir.
func writeCert(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

// writeFile writes content to a file named name in a new directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// profiles is a file of profiles as the temporal CLI writes them.
const profiles = `
[profile.default]
address = "temporal.example.com:7233"
namespace = "proxies"

[profile.staging]
address = "staging.example.com:7233"
namespace = "proxies-staging"
`

// clientOptions is starter.ClientOptions on env alone: isolate keeps the settings of whoever
// runs the test out.
func clientOptions(t *testing.T, env map[string]string) (client.Options, error) {
	t.Helper()
	isolate(t)
	return starter.ClientOptions(func(k string) string { return env[k] })
}

// subject is the common name of the client certificate of opts.
func subject(t *testing.T, opts client.Options) string {
	t.Helper()
	require.NotNil(t, opts.ConnectionOptions.TLS)
	require.Len(t, opts.ConnectionOptions.TLS.Certificates, 1)
	return opts.ConnectionOptions.TLS.Certificates[0].Leaf.Subject.CommonName
}

// connectionEnv are the variables DialFromEnv reads besides the TEMPORAL_GRPC_META_* ones.
var connectionEnv = []string{
	"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_TLS",
	"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
	"TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "TEMPORAL_TLS_CLIENT_CERT_DATA",
	"TEMPORAL_TLS_CLIENT_KEY_DATA", "TEMPORAL_TLS_SERVER_CA_CERT_DATA", "TEMPORAL_CLIENT_AUTHORITY",
	"TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE", "PVEFLOW_CODEC_KEY_FILE",
}

// isolate keeps the tests that read the process environment from the Temporal settings of
// whoever runs them: no TEMPORAL_* variable, and a configuration directory of their own.
func isolate(t *testing.T) {
	t.Helper()
	for _, name := range connectionEnv {
		t.Setenv(name, "")
	}
	home := t.TempDir()
	for _, name := range []string{"HOME", "XDG_CONFIG_HOME", "AppData"} {
		t.Setenv(name, home)
	}
}

func TestClientOptions_defaultsToTheLocalDevServer(t *testing.T) {
	opts, err := clientOptions(t, nil)

	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:7233", opts.HostPort)
	assert.Equal(t, "default", opts.Namespace)
	assert.Nil(t, opts.ConnectionOptions.TLS)
	assert.Nil(t, opts.Credentials)
}

func TestClientOptions_readsTheVariablesOfTheTemporalCLI(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir, "client")
	ca, _ := writeCert(t, dir, "ca")

	opts, err := clientOptions(t, map[string]string{
		"TEMPORAL_ADDRESS":                 "temporal.example.com:7233",
		"TEMPORAL_NAMESPACE":               "proxies",
		"TEMPORAL_TLS_CLIENT_CERT_PATH":    cert,
		"TEMPORAL_TLS_CLIENT_KEY_PATH":     key,
		"TEMPORAL_TLS_SERVER_CA_CERT_PATH": ca,
		"TEMPORAL_TLS_SERVER_NAME":         "frontend.temporal.internal",
		"TEMPORAL_API_KEY":                 "secret-key",
	})

	require.NoError(t, err)
	assert.Equal(t, "temporal.example.com:7233", opts.HostPort)
	assert.Equal(t, "proxies", opts.Namespace)
	assert.Equal(t, "client", subject(t, opts))
	assert.NotNil(t, opts.ConnectionOptions.TLS.RootCAs)
	assert.Equal(t, "frontend.temporal.internal", opts.ConnectionOptions.TLS.ServerName)
	assert.NotNil(t, opts.Credentials)
}

func TestClientOptions_TEMPORAL_TLSTurnsTLSOnOrOff(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantTLS bool
	}{
		{"true", map[string]string{"TEMPORAL_TLS": "true"}, true},
		{"1", map[string]string{"TEMPORAL_TLS": "1"}, true},
		{"an API key alone", map[string]string{"TEMPORAL_API_KEY": "secret-key"}, true},
		{"false despite an API key", map[string]string{"TEMPORAL_API_KEY": "secret-key", "TEMPORAL_TLS": "false"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := clientOptions(t, tt.env)

			require.NoError(t, err)
			assert.Equal(t, tt.wantTLS, opts.ConnectionOptions.TLS != nil, "TLS")
			assert.Equal(t, !tt.wantTLS, opts.ConnectionOptions.TLSDisabled, "TLSDisabled")
		})
	}
}

func TestClientOptions_TEMPORAL_PROFILEChoosesAProfileOfTEMPORAL_CONFIG_FILE(t *testing.T) {
	opts, err := clientOptions(t, map[string]string{
		"TEMPORAL_CONFIG_FILE": writeFile(t, "temporal.toml", profiles),
		"TEMPORAL_PROFILE":     "staging",
	})

	require.NoError(t, err)
	assert.Equal(t, "staging.example.com:7233", opts.HostPort)
	assert.Equal(t, "proxies-staging", opts.Namespace)
}

func TestClientOptions_variablesWinOverTheProfile(t *testing.T) {
	opts, err := clientOptions(t, map[string]string{
		"TEMPORAL_CONFIG_FILE": writeFile(t, "temporal.toml", profiles),
		"TEMPORAL_ADDRESS":     "127.0.0.1:7233",
	})

	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:7233", opts.HostPort)
	assert.Equal(t, "proxies", opts.Namespace, "from the default profile")
}

func TestClientOptions_readsTheProfilesFileOfTheTemporalCLIByDefault(t *testing.T) {
	isolate(t)
	file := envconfig.DefaultConfigFilePath() // where `temporal config set` writes
	require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o700))
	require.NoError(t, os.WriteFile(file, []byte(profiles), 0o600))
	t.Setenv("TEMPORAL_PROFILE", "staging")

	opts, err := starter.ClientOptions(os.Getenv)

	require.NoError(t, err)
	assert.Equal(t, "staging.example.com:7233", opts.HostPort)
}

func TestClientOptions_badSettingsAreOneLineNamingTheSetting(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir, "client")
	notPEM := writeFile(t, "not.pem", "hello")
	missing := filepath.Join(dir, "missing.pem")
	file := writeFile(t, "temporal.toml", profiles)
	badAddress := writeFile(t, "bad.toml", "[profile.default]\naddress = \"localhost\"\n")
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"cert without key", map[string]string{"TEMPORAL_TLS_CLIENT_CERT_PATH": cert},
			"if either client cert or key path is present, other must be present too"},
		{"missing cert file", map[string]string{"TEMPORAL_TLS_CLIENT_CERT_PATH": missing, "TEMPORAL_TLS_CLIENT_KEY_PATH": key},
			"open " + missing + ": no such file"},
		{"key that is not the cert's", map[string]string{"TEMPORAL_TLS_CLIENT_CERT_PATH": cert, "TEMPORAL_TLS_CLIENT_KEY_PATH": notPEM},
			"failed loading client cert/key path"},
		{"missing CA file", map[string]string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH": missing},
			"open " + missing + ": no such file"},
		{"missing config file", map[string]string{"TEMPORAL_CONFIG_FILE": missing},
			"TEMPORAL_CONFIG_FILE: stat " + missing + ": no such file"},
		{"config file that is not TOML", map[string]string{"TEMPORAL_CONFIG_FILE": notPEM},
			"failed parsing config"},
		{"no such profile", map[string]string{"TEMPORAL_CONFIG_FILE": file, "TEMPORAL_PROFILE": "prod"},
			"unable to find profile prod"},
		{"TEMPORAL_TLS neither true nor false", map[string]string{"TEMPORAL_TLS": "yes"},
			`TEMPORAL_TLS "yes": want true or false`},
		{"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION neither true nor false", map[string]string{"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "on"},
			`TEMPORAL_TLS_DISABLE_HOST_VERIFICATION "on": want true or false`},
		{"profile address without port", map[string]string{"TEMPORAL_CONFIG_FILE": badAddress},
			`address "localhost" of profile "default" in ` + badAddress + ": want host:port, such as 127.0.0.1:7233"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := clientOptions(t, tt.env)

			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestClientOptions_TEMPORAL_ADDRESSThatIsNotHostPortIsOneLineNamingIt(t *testing.T) {
	for _, addr := range []string{"localhost", "localhost:", "http://temporal:7233", ":::", "temporal:port", "temporal:70000", "127.0.0.1:7233,localhost", "127.0.0.1:7233,"} {
		t.Run(addr, func(t *testing.T) {
			_, err := clientOptions(t, map[string]string{"TEMPORAL_ADDRESS": addr})

			require.Error(t, err)
			assert.Equal(t, fmt.Sprintf("TEMPORAL_ADDRESS %q: want host:port, such as 127.0.0.1:7233, or several, comma-separated", addr), err.Error())
		})
	}
}

func TestClientOptions_TEMPORAL_ADDRESSMayBeHostPortOrAResolversTarget(t *testing.T) {
	for _, addr := range []string{"temporal.example.com:7233", "10.0.0.5:7233", "[::1]:7233", ":7233", "dns:///temporal.example.com:7233"} {
		t.Run(addr, func(t *testing.T) {
			opts, err := clientOptions(t, map[string]string{"TEMPORAL_ADDRESS": addr})

			require.NoError(t, err)
			assert.Equal(t, addr, opts.HostPort)
		})
	}
}

func TestDial_severalFrontendsReachTheClusterWhileOneIsDown(t *testing.T) {
	server := testserver.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	opts, err := clientOptions(t, map[string]string{"TEMPORAL_ADDRESS": down + "," + server.Address(), "TEMPORAL_NAMESPACE": server.Namespace()})
	require.NoError(t, err)

	c, err := starter.Dial(t.Context(), opts)

	require.NoError(t, err)
	defer c.Close()
	for range 5 { // round robin would send some of them to the frontend that is down
		_, err := c.WorkflowService().GetSystemInfo(t.Context(), &workflowservice.GetSystemInfoRequest{})
		require.NoError(t, err)
	}
}

func TestIdentity_namesTheProgramTheHostAndTheProcess(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)

	id := starter.Identity("pveflow-worker")

	assert.Equal(t, fmt.Sprintf("pveflow-worker@%s:%d", host, os.Getpid()), id)
}

func TestDial_unreachableServerNamesTheAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	opts, err := clientOptions(t, map[string]string{"TEMPORAL_ADDRESS": addr})
	require.NoError(t, err)

	_, err = starter.Dial(ctx, opts)

	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot reach Temporal at "+addr+": ")
}

func TestDialFromEnv_missingClientCertificateFailsBeforeConnecting(t *testing.T) {
	isolate(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	connected := make(chan bool, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			conn.Close()
		}
		connected <- err == nil
	}()
	_, key := writeCert(t, t.TempDir(), "client")
	missing := filepath.Join(t.TempDir(), "client.pem")
	t.Setenv("TEMPORAL_ADDRESS", ln.Addr().String())
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", missing)
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", key)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	c, err := starter.DialFromEnv(ctx)
	require.NoError(t, ln.Close())

	if c != nil {
		c.Close()
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "open "+missing+": no such file or directory")
	assert.False(t, <-connected, "dialled the server without the client certificate")
}

func TestDialFromEnv_connectsToTheNamedServer(t *testing.T) {
	// The server first: isolate moves HOME, and with it the module cache a server build uses.
	server := testserver.New(t)
	isolate(t)
	t.Setenv("TEMPORAL_ADDRESS", server.Address())
	t.Setenv("TEMPORAL_NAMESPACE", server.Namespace())

	c, err := starter.DialFromEnv(ctx(t))

	require.NoError(t, err)
	defer c.Close()
	_, err = c.CheckHealth(ctx(t), nil)
	assert.NoError(t, err)
}

// systemInfoServer answers the one call Dial makes, GetSystemInfo.
type systemInfoServer struct {
	workflowservice.UnimplementedWorkflowServiceServer
}

func (systemInfoServer) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

func TestDialFromEnv_sendsTEMPORAL_GRPC_META_AsGRPCMetadata(t *testing.T) {
	isolate(t)
	calls := make(chan metadata.MD, 16)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		calls <- md
		return handler(ctx, req)
	}))
	workflowservice.RegisterWorkflowServiceServer(srv, systemInfoServer{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	t.Setenv("TEMPORAL_ADDRESS", ln.Addr().String())
	t.Setenv("TEMPORAL_GRPC_META_X_TENANT", "acme")

	c, err := starter.DialFromEnv(ctx(t))

	require.NoError(t, err)
	defer c.Close()
	md := <-calls
	assert.Equal(t, []string{"acme"}, md.Get("x-tenant"))
}

// writeKeyFile writes a key file of one random key, as `pveflow codec-keygen` does, and returns
// its path and the base64 key.
func writeKeyFile(t *testing.T) (path, key string) {
	t.Helper()
	b := make([]byte, codec.KeySize)
	_, err := rand.Read(b)
	require.NoError(t, err)
	key = base64.StdEncoding.EncodeToString(b)
	return writeFile(t, "codec.key", "# pveflow payload keys\nk1 "+key+"\n"), key
}

// sentinel stands for a secret in cloud-init user-data.
const sentinel = "hunter2-sentinel-7f3a9c"

func TestClientOptions_codecKeyFileGivesConvertersThatEncrypt(t *testing.T) {
	path, _ := writeKeyFile(t)

	opts, err := clientOptions(t, map[string]string{"PVEFLOW_CODEC_KEY_FILE": path})

	require.NoError(t, err)
	require.NotNil(t, opts.DataConverter)
	require.NotNil(t, opts.FailureConverter)
	p, err := opts.DataConverter.ToPayload("password: " + sentinel)
	require.NoError(t, err)
	assert.Equal(t, "binary/encrypted", string(p.GetMetadata()["encoding"]))
	assert.Equal(t, "k1", string(p.GetMetadata()["encryption-key-id"]))
	assert.NotContains(t, string(p.GetData()), sentinel)
	var back string
	require.NoError(t, opts.DataConverter.FromPayload(p, &back))
	assert.Equal(t, "password: "+sentinel, back)
}

func TestClientOptions_codecKeyFileLeavesFailureMessagesPlainAndEncryptsDetails(t *testing.T) {
	path, _ := writeKeyFile(t)
	opts, err := clientOptions(t, map[string]string{"PVEFLOW_CODEC_KEY_FILE": path})
	require.NoError(t, err)

	f := opts.FailureConverter.ErrorToFailure(temporal.NewApplicationError("clone task still running", "TaskRunning", "password: "+sentinel))

	assert.Equal(t, "clone task still running", f.GetMessage())
	details := f.GetApplicationFailureInfo().GetDetails().GetPayloads()
	require.Len(t, details, 1)
	assert.Equal(t, "binary/encrypted", string(details[0].GetMetadata()["encoding"]))
	assert.NotContains(t, string(details[0].GetData()), sentinel)
}

func TestClientOptions_withoutCodecKeyFilePayloadsArePlainAndEncryptedOnesSaySo(t *testing.T) {
	path, _ := writeKeyFile(t)
	keyed, err := clientOptions(t, map[string]string{"PVEFLOW_CODEC_KEY_FILE": path})
	require.NoError(t, err)
	sealed, err := keyed.DataConverter.ToPayload("password: " + sentinel)
	require.NoError(t, err)

	opts, err := clientOptions(t, map[string]string{"PVEFLOW_CODEC_KEY_FILE": ""})

	require.NoError(t, err)
	p, err := opts.DataConverter.ToPayload("x")
	require.NoError(t, err)
	assert.Equal(t, "json/plain", string(p.GetMetadata()["encoding"]))
	var back string
	assert.ErrorContains(t, opts.DataConverter.FromPayload(sealed, &back), "PVEFLOW_CODEC_KEY_FILE is not set")
}

func TestClientOptions_badCodecKeyFileIsOneLineNamingTheVariableAndFile(t *testing.T) {
	dir := t.TempDir()
	readable, key := writeKeyFile(t)
	require.NoError(t, os.Chmod(readable, 0o644))
	short := writeFile(t, "short.key", "k1 "+key[:len(key)-4]+"\n")
	swapped := writeFile(t, "swapped.key", key+" k1\n")
	missing := filepath.Join(dir, "missing.key")
	tests := []struct {
		name, path, want string
	}{
		{"missing", missing, "open " + missing + ": no such file or directory"},
		{"others may read it", readable, "mode 0644"},
		{"short key", short, `line 1: key "k1" is 30 bytes, want 32`},
		{"key and ID swapped", swapped, "line 1: the key ID is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := clientOptions(t, map[string]string{"PVEFLOW_CODEC_KEY_FILE": tt.path})

			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "PVEFLOW_CODEC_KEY_FILE: "), err.Error())
			assert.Contains(t, err.Error(), tt.path)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "\n")
			assert.NotContains(t, err.Error(), key)
			assert.NotContains(t, err.Error(), key[:len(key)-4])
		})
	}
}
