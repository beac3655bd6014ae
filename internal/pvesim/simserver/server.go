// Package simserver serves any pve.API as the Proxmox VE 9.x REST API on loopback, so pveflow's
// real HTTP client, worker and demo run end to end against the simulator's in-memory model.
//
// It behaves like pveproxy wherever a client can tell the difference: TLS with a CA file, API
// token authentication, a 401 with an empty body after a fixed delay, the first line of an
// error as the HTTP reason phrase, errors that close the connection, parameter verification
// against the official API schema before any method runs, {"data": ...} envelopes with
// booleans as 0/1, and pveproxy's order-sensitive multipart upload parser.
package simserver

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pveschema"
)

// Options configure a Server.
type Options struct {
	// API is what the server serves.
	API pve.API
	// Addr is the address to listen on; it must be a loopback IP (or localhost) with a port.
	// Default "127.0.0.1:0", a free port.
	Addr string
	// Dir receives ca.pem and the token file, both mode 0600. It is created if needed.
	Dir string
	// TokenUser is the API token id (user@realm!tokenid) the token file holds a secret for.
	// Default DefaultTokenUser.
	TokenUser string
	// AuthDelay is how long a 401 is held back. PVE waits 3 s; the default 0 suits tests.
	AuthDelay time.Duration
	// Logger receives one Debug record per request; nil discards them.
	Logger *slog.Logger
	// KeepRequests keeps a log of every request the server receives, for Requests. It grows
	// without bound: for tests, not for a long-running simulator.
	KeepRequests bool
}

// A Request is one entry of the server's request log.
type Request struct {
	Method string
	// Path is the request's path, /api2/json included, as it came.
	Path string
	// Arrived is when the server began to serve the request, its header read.
	Arrived time.Time
	// InFlight is how many requests the server was serving when this one arrived, this one
	// included. A request is served until the server begins to write its answer (or drops
	// it), so a client that waits for each answer before its next request never sees more.
	InFlight int
}

// A Server serves a pve.API over HTTPS until Close.
type Server struct {
	api       pve.API
	creds     *credentials
	authDelay time.Duration
	log       *slog.Logger

	keepRequests bool
	inFlight     atomic.Int64
	mu           sync.Mutex
	requests     []Request

	url       string
	caFile    string
	tokenFile string

	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{} // closed when srv.ServeTLS has returned
}

// Start writes the CA and token files, then listens and serves; the server accepts requests
// when Start returns.
func Start(opts Options) (*Server, error) {
	if opts.API == nil {
		return nil, errors.New("simserver: Options.API is nil")
	}
	if opts.Dir == "" {
		return nil, errors.New("simserver: Options.Dir is empty; it receives the CA and token files")
	}
	addr, err := loopbackAddr(cmp.Or(opts.Addr, "127.0.0.1:0"))
	if err != nil {
		return nil, fmt.Errorf("simserver: %w", err)
	}
	creds, err := newCredentials(cmp.Or(opts.TokenUser, DefaultTokenUser))
	if err != nil {
		return nil, fmt.Errorf("simserver: %w", err)
	}
	caFile, tokenFile, err := creds.writeFiles(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("simserver: write credentials: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("simserver: %w", err)
	}

	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Cancelled by Close, so that held-back 401s and model calls waiting on the request's
	// context end with the server.
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		api:          opts.API,
		creds:        creds,
		authDelay:    opts.AuthDelay,
		log:          log,
		keepRequests: opts.KeepRequests,
		url:          "https://" + ln.Addr().String(),
		caFile:       caFile,
		tokenFile:    tokenFile,
		cancel:       cancel,
		done:         make(chan struct{}),
	}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(s.serveHTTP),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{creds.cert},
			NextProtos:   []string{"http/1.1"},
			MinVersion:   tls.VersionTLS12,
		},
		// A non-nil empty map keeps net/http from offering HTTP/2: pveproxy speaks HTTP/1.1 only.
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("pvesim server stopped", slog.Any("error", err))
		}
	}()
	return s, nil
}

// loopbackAddr checks that addr names a loopback IP and returns it with localhost resolved to
// 127.0.0.1: the simulator's token is printed and written in clear, so it never listens beyond
// this machine.
func loopbackAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("listen address %q is not a loopback address", addr)
	}
	return net.JoinHostPort(host, port), nil
}

// URL is the server's base URL, https://127.0.0.1:<port>, without /api2/json.
func (s *Server) URL() string { return s.url }

// CAFile is the path of the PEM file with the CA that signed the server's certificate.
func (s *Server) CAFile() string { return s.caFile }

// TokenFile is the path of the file holding "<token id>=<secret>", the format pve.Client reads.
func (s *Server) TokenFile() string { return s.tokenFile }

// Requests is the request log in the order the requests arrived; it is empty unless
// Options.KeepRequests was set.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Close stops the server, ends every request still in progress and closes its connections.
func (s *Server) Close() error {
	s.cancel()
	err := s.srv.Close()
	<-s.done
	return err
}

// apiBase is the prefix of every API path; the rest is what the schema and the routes see.
const apiBase = "/api2/json"

// storageContentRE is a path below a storage's content, where PVE's router takes the whole
// rest of the path as the volume: pve-storage API2/Storage/Status.pm mounts the content
// subclass with fragmentDelimiter set to the empty string ("IDs may contain a slash '/'"; the
// only such subclass in PVE's API), and pve-common RESTHandler.pm map_path_to_methods then
// joins the remaining path segments with '/'.
var storageContentRE = regexp.MustCompile(`^/nodes/([^/]+)/storage/([^/]+)/content/(.+)$`)

// routePath is the path below /api2/json that PVE routes u to, escaped the way the schema
// matches paths (one segment per path value). pveproxy unescapes the whole path before routing
// (pve-http-server AnyEvent.pm process_header: uri_unescape($request->uri->path())), so a
// volume ID's slash may come escaped (%2F) or not: both name the same volume. Empty segments
// are dropped, as PVE's router drops them.
func routePath(u *url.URL) (string, bool) {
	rel, ok := strings.CutPrefix(u.Path, apiBase)
	if !ok || (rel != "" && rel[0] != '/') {
		return "", false
	}
	segs := strings.FieldsFunc(rel, func(r rune) bool { return r == '/' })
	if m := storageContentRE.FindStringSubmatch("/" + strings.Join(segs, "/")); m != nil {
		segs = []string{"nodes", m[1], "storage", m[2], "content", m[3]}
	}
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return "/" + strings.Join(segs, "/"), true
}

// serveHTTP answers one request in pveproxy's order: method, URI, authentication, body,
// parameter verification, then the API method.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	tw := &answerWriter{ResponseWriter: w, answering: s.arrive(r, start)}
	defer tw.answer()
	status := s.answer(tw, r)
	// Never the Authorization header, the query or a body: they may hold the token or
	// cloud-init data.
	s.log.LogAttrs(r.Context(), slog.LevelDebug, "pvesim request",
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(start)))
}

// answer serves the request and returns the status it sent, 0 when it dropped the connection.
func (s *Server) answer(w http.ResponseWriter, r *http.Request) int {
	switch r.Method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete:
	default:
		// pve-http-server AnyEvent.pm process_header: HTTP::Response->new(501, "method '$method'
		// not available"), which has no content.
		return s.writeBare(w, r, http.StatusNotImplemented, fmt.Sprintf("method '%s' not available", r.Method))
	}
	// pveproxy refuses a chunked body in process_header, before it looks at the URI or the
	// token (pve-http-server AnyEvent.pm process_header: "chunked transfer encoding not
	// supported"). net/http answers any other transfer coding itself before this handler runs.
	if slices.Contains(r.TransferEncoding, "chunked") {
		return s.writePlain(w, r, http.StatusNotImplemented, "chunked transfer encoding not supported")
	}
	rel, ok := routePath(r.URL)
	if !ok {
		return s.writePlain(w, r, http.StatusNotImplemented, "no such uri")
	}
	if reason := s.creds.authenticate(r.Header.Get("Authorization")); reason != "" {
		return s.unauthorized(w, r, reason)
	}

	req, err := readRequest(r, rel)
	if err != nil {
		return s.writeFailure(w, r, err)
	}
	if e := pveschema.Validate(r.Method, rel, req.params); e != nil {
		if e.Status == http.StatusNotImplemented {
			e = notImplemented(r.Method, rel) // the schema names the path escaped
		}
		return s.writeAPIError(w, r, e)
	}
	serve, call, err := req.route(r.Method, rel)
	if err != nil {
		return s.writeFailure(w, r, err)
	}
	data, err := serve(r.Context(), s.api, call)
	if err != nil {
		return s.writeFailure(w, r, err)
	}
	return s.writeData(w, r, data)
}

// arrive counts r in flight and logs it if the server keeps a request log; the func it returns
// counts r out.
func (s *Server) arrive(r *http.Request, at time.Time) func() {
	n := s.inFlight.Add(1)
	if s.keepRequests {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Arrived: at, InFlight: int(n)})
		s.mu.Unlock()
	}
	return func() { s.inFlight.Add(-1) }
}

// answerWriter calls answering once, when the answer begins to be written, the connection is
// taken over to write or drop it, or the handler returns: from then on the client may have
// its answer, and the request no longer counts as in flight.
type answerWriter struct {
	http.ResponseWriter
	answering func()
	once      sync.Once
}

func (w *answerWriter) answer() { w.once.Do(w.answering) }

func (w *answerWriter) WriteHeader(status int) {
	w.answer()
	w.ResponseWriter.WriteHeader(status)
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.answer()
	return w.ResponseWriter.Write(b)
}

// Hijack is what writeRaw and drop take the connection with; http.ResponseController finds it.
func (w *answerWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.answer()
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the connection's other controls.
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
