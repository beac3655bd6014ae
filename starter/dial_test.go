package starter_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/server/temporaltest"

	"github.com/pveflow/pveflow/starter"
)

// writeCert writes a self-signed certificate and its key as PEM files into dir.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pveflow test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

func TestClientOptions_defaultsToTheLocalDevServer(t *testing.T) {
	opts, err := starter.ClientOptions(func(string) string { return "" })

	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:7233", opts.HostPort)
	assert.Equal(t, "default", opts.Namespace)
	assert.Nil(t, opts.ConnectionOptions.TLS)
	assert.Nil(t, opts.Credentials)
}

func TestClientOptions_readsTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	env := map[string]string{
		"TEMPORAL_ADDRESS":   "temporal.example.com:7233",
		"TEMPORAL_NAMESPACE": "proxies",
		"TEMPORAL_TLS_CERT":  cert,
		"TEMPORAL_TLS_KEY":   key,
		"TEMPORAL_TLS_CA":    cert,
		"TEMPORAL_API_KEY":   "secret-key",
	}

	opts, err := starter.ClientOptions(func(k string) string { return env[k] })

	require.NoError(t, err)
	assert.Equal(t, "temporal.example.com:7233", opts.HostPort)
	assert.Equal(t, "proxies", opts.Namespace)
	require.NotNil(t, opts.ConnectionOptions.TLS)
	assert.Len(t, opts.ConnectionOptions.TLS.Certificates, 1)
	assert.NotNil(t, opts.ConnectionOptions.TLS.RootCAs)
	assert.NotNil(t, opts.Credentials)
}

func TestClientOptions_badTLSSettingsNameTheVariable(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"cert without key", map[string]string{"TEMPORAL_TLS_CERT": cert}, "TEMPORAL_TLS_KEY is not"},
		{"key without cert", map[string]string{"TEMPORAL_TLS_KEY": key}, "TEMPORAL_TLS_CERT is not"},
		{"key that is not the cert's", map[string]string{"TEMPORAL_TLS_CERT": cert, "TEMPORAL_TLS_KEY": notPEM}, "TEMPORAL_TLS_KEY " + notPEM},
		{"missing CA file", map[string]string{"TEMPORAL_TLS_CA": missing}, "TEMPORAL_TLS_CA: open " + missing},
		{"CA file without certificate", map[string]string{"TEMPORAL_TLS_CA": notPEM}, "TEMPORAL_TLS_CA " + notPEM + ": no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := starter.ClientOptions(func(k string) string { return tt.env[k] })

			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestDial_unreachableServerNamesTheAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	opts, err := starter.ClientOptions(func(k string) string { return map[string]string{"TEMPORAL_ADDRESS": addr}[k] })
	require.NoError(t, err)

	_, err = starter.Dial(ctx, opts)

	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot reach Temporal at "+addr+": ")
}

func TestDialFromEnv_connectsToTheNamedServer(t *testing.T) {
	server := temporaltest.NewServer(temporaltest.WithT(t))
	t.Setenv("TEMPORAL_ADDRESS", server.GetFrontendHostPort())
	t.Setenv("TEMPORAL_NAMESPACE", server.GetDefaultNamespace())

	c, err := starter.DialFromEnv(ctx(t))

	require.NoError(t, err)
	defer c.Close()
	_, err = c.CheckHealth(ctx(t), nil)
	assert.NoError(t, err)
}
