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

// repeatable is a flag that may be given many times, each value added to the list.
type repeatable []string

func (r *repeatable) String() string     { return strings.Join(*r, ",") }
func (r *repeatable) Set(v string) error { *r = append(*r, v); return nil }

// codecServer serves the codec's /encode and /decode, with the Web UI's CORS, until ctx is done.
func (c *cli) codecServer(ctx context.Context, args []string) error {
	fs := c.flagSet("codec-server")
	listen := fs.String("listen", defaultCodecListen, "")
	// Its values are checked by codec.NewHTTPHandler, after parsing.
	var uiOrigins repeatable
	fs.Var(&uiOrigins, "ui-origin", "")
	if err := parse(fs, args); err != nil {
		return err
	}
	path := c.getenv(starter.CodecKeyFileEnv)
	if path == "" {
		return usageError{fmt.Errorf("codec-server: %s is not set: it names the key file to decode with", starter.CodecKeyFileEnv)}
	}
	if len(uiOrigins) == 0 {
		uiOrigins = repeatable{defaultUIOrigin}
	}
	keys, err := codec.LoadKeyFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", starter.CodecKeyFileEnv, err)
	}
	handler, err := codec.NewHTTPHandler(keys, uiOrigins...)
	if err != nil {
		return usageError{fmt.Errorf("codec-server: --ui-origin: %w", err)}
	}

	ln, err := net.Listen("tcp", *listen)
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

// codecKeygen writes a new key file of one random key, refusing to replace a file.
func (c *cli) codecKeygen(_ context.Context, args []string) error {
	fs := c.flagSet("codec-keygen")
	out := fs.String("out", "", "")
	id := fs.String("id", "", "")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usageError{errors.New("codec-keygen: --out is required")}
	}
	if *id == "" {
		*id = newKeyID(time.Now())
	} else if !codec.ValidKeyID(*id) {
		return usageError{fmt.Errorf("codec-keygen: --id %q: want 1 to 64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", *id)}
	}
	if err := codec.WriteNewKeyFile(*out, *id); err != nil {
		return fmt.Errorf("codec-keygen: %w", err)
	}
	c.say("wrote key %s to %s (mode 0600)", *id, *out)
	return nil
}

// newKeyID is a key ID that says when the key was made and differs from another made the same
// day: "pveflow-20260501-3fa2".
func newKeyID(now time.Time) string {
	var b [2]byte
	rand.Read(b[:])
	return fmt.Sprintf("pveflow-%s-%x", now.UTC().Format("20060102"), b)
}
