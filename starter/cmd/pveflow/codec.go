package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/starter"
)

// Defaults of codec-server: the codec server's port in Temporal's samples, on loopback, for the
// Web UI of `make run`.
const (
	defaultCodecListen = "127.0.0.1:8081"
	defaultUIOrigin    = "http://127.0.0.1:8233"
)

// codecShutdownTimeout bounds how long codec-server waits for the requests in flight when it is
// told to stop.
const codecShutdownTimeout = 5 * time.Second

func (c *cli) codecServerCommand() *cobra.Command {
	var listen string
	var uiOrigins []string
	cmd := &cobra.Command{
		Use:   "codec-server [--listen ADDR] [--ui-origin URL]...",
		Short: "Serve /encode and /decode with the keys of $PVEFLOW_CODEC_KEY_FILE, for the Web UI",
		Long: `Serves /encode and /decode with the keys of $PVEFLOW_CODEC_KEY_FILE (required), so the Temporal
Web UI (and temporal workflow show --codec-endpoint) shows payloads decrypted. Runs until
interrupted.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.codecServer(cmd.Context(), listen, uiOrigins) },
	}
	cmd.Flags().StringVar(&listen, "listen", defaultCodecListen, "the address `ADDR` to listen on")
	// Its values are checked by codec.NewHTTPHandler.
	cmd.Flags().StringArrayVar(&uiOrigins, "ui-origin", []string{defaultUIOrigin}, "the origin `URL` the Web UI is served from; repeats")
	return cmd
}

// codecServer serves the codec's /encode and /decode, with the Web UI's CORS, until ctx is done.
func (c *cli) codecServer(ctx context.Context, listen string, uiOrigins []string) error {
	path := c.getenv(starter.CodecKeyFileEnv)
	if path == "" {
		return usageError{fmt.Errorf("codec-server: %s is not set: it names the key file to decode with", starter.CodecKeyFileEnv)}
	}
	keys, err := codec.LoadKeyFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", starter.CodecKeyFileEnv, err)
	}
	handler, err := codec.NewHTTPHandler(keys, uiOrigins...)
	if err != nil {
		return usageError{fmt.Errorf("codec-server: --ui-origin: %w", err)}
	}

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("codec server: %w", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() {
		c.say("codec server: warning: %s is not a loopback address, and the codec server decrypts for anyone who reaches it", addr)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	c.say("codec server listening on http://%s (keys %s, encrypting with %s; Web UI origins %s)",
		addr, strings.Join(keys.KeyIDs(), ","), keys.EncryptKeyID(), strings.Join(uiOrigins, " "))

	select {
	case err := <-served:
		return fmt.Errorf("codec server: %w", err)
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), codecShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(stopCtx); err != nil {
		return fmt.Errorf("codec server: stopping: %w", err)
	}
	c.say("codec server stopped")
	return nil
}

func (c *cli) codecKeygenCommand() *cobra.Command {
	var out, id string
	cmd := &cobra.Command{
		Use:   "codec-keygen --out FILE [--id ID]",
		Short: "Write a new key file with one random key, mode 0600",
		Long:  `Writes a new key file with one random key, mode 0600. An existing FILE is never replaced.`,
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return c.codecKeygen(out, id) },
	}
	cmd.Flags().StringVar(&out, "out", "", "the key `FILE` to write (required)")
	cmd.Flags().StringVar(&id, "id", "", "the key's `ID`; the default says when it was made, such as pveflow-20260501-3fa2")
	return cmd
}

// codecKeygen writes a new key file of one random key, refusing to replace a file.
func (c *cli) codecKeygen(out, id string) error {
	if out == "" {
		return usageError{errors.New("codec-keygen: --out is required")}
	}
	if id == "" {
		id = newKeyID(time.Now())
	} else if !codec.ValidKeyID(id) {
		return usageError{fmt.Errorf("codec-keygen: --id %q: want 1 to 64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", id)}
	}
	if err := codec.WriteNewKeyFile(out, id); err != nil {
		return fmt.Errorf("codec-keygen: %w", err)
	}
	c.say("wrote key %s to %s (mode 0600)", id, out)
	return nil
}

// newKeyID is a key ID that says when the key was made and differs from another made the same
// day: "pveflow-20260501-3fa2".
func newKeyID(now time.Time) string {
	var b [2]byte
	rand.Read(b[:])
	return fmt.Sprintf("pveflow-%s-%x", now.UTC().Format("20060102"), b)
}
