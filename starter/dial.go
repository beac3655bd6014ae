package starter

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// DefaultAddress is the Temporal frontend used when TEMPORAL_ADDRESS is not set: the dev
// server's.
const DefaultAddress = "127.0.0.1:7233"

// DialTimeout bounds how long Dial waits for the server to answer.
const DialTimeout = 10 * time.Second

// ClientOptions reads the connection to Temporal from the environment, as the Temporal CLI
// does; getenv is os.Getenv outside tests:
//
//   - TEMPORAL_ADDRESS: host:port of the frontend, default DefaultAddress;
//   - TEMPORAL_NAMESPACE: default "default";
//   - TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: files of a client certificate and its key, for
//     mTLS; both or neither;
//   - TEMPORAL_TLS_CA: a PEM file of the CAs that verify the server, instead of the system's;
//   - TEMPORAL_API_KEY: an API key, sent with every call.
//
// Any of the last three turns TLS on. The options have no Logger: that is the caller's.
func ClientOptions(getenv func(string) string) (client.Options, error) {
	opts := client.Options{
		HostPort:  cmp.Or(getenv("TEMPORAL_ADDRESS"), DefaultAddress),
		Namespace: cmp.Or(getenv("TEMPORAL_NAMESPACE"), "default"),
	}
	certFile, keyFile, caFile := getenv("TEMPORAL_TLS_CERT"), getenv("TEMPORAL_TLS_KEY"), getenv("TEMPORAL_TLS_CA")
	switch {
	case certFile != "" && keyFile == "":
		return client.Options{}, errors.New("TEMPORAL_TLS_CERT is set but TEMPORAL_TLS_KEY is not: mTLS needs both")
	case certFile == "" && keyFile != "":
		return client.Options{}, errors.New("TEMPORAL_TLS_KEY is set but TEMPORAL_TLS_CERT is not: mTLS needs both")
	}
	if certFile != "" || caFile != "" {
		opts.ConnectionOptions.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return client.Options{}, fmt.Errorf("TEMPORAL_TLS_CERT %s and TEMPORAL_TLS_KEY %s: %w", certFile, keyFile, err)
		}
		opts.ConnectionOptions.TLS.Certificates = []tls.Certificate{cert}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return client.Options{}, fmt.Errorf("TEMPORAL_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return client.Options{}, fmt.Errorf("TEMPORAL_TLS_CA %s: no PEM certificate in it", caFile)
		}
		opts.ConnectionOptions.TLS.RootCAs = pool
	}
	if key := getenv("TEMPORAL_API_KEY"); key != "" {
		// The SDK turns TLS on with the system's roots when nothing above did.
		opts.Credentials = client.NewAPIKeyStaticCredentials(key)
	}
	return opts, nil
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
	opts, err := ClientOptions(os.Getenv)
	if err != nil {
		return nil, err
	}
	opts.Logger = tlog.NewStructuredLogger(slog.Default())
	return Dial(ctx, opts)
}
