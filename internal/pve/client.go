package pve

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/pveflow/pveflow/internal/secretfile"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// URL is the cluster's address, such as https://pve1.example.com:8006; the client appends
	// /api2/json.
	URL string
	// TokenFile holds one line, <user>@<realm>!<tokenid>=<secret>. It is read on every request,
	// so a rotated token is used at once, and refused when its mode gives others access to it
	// (see CheckTokenFile).
	TokenFile string
	// CAFile is a PEM bundle trusted instead of the system's roots.
	CAFile string
	// InsecureSkipTLSVerify turns certificate verification off; NewClient logs a warning.
	InsecureSkipTLSVerify bool
	// RequestTimeout bounds each request, from sending it to reading the whole answer; zero
	// means 30 s.
	RequestTimeout time.Duration
	// Logger receives the InsecureSkipTLSVerify warning and, at debug level, one line per
	// request: its method and the schema's path template, the node, VMID and UPID, the HTTP
	// status, the duration and the error; never a body, a query or a header. nil means
	// slog.Default().
	Logger *slog.Logger
	// WrapTransport, when set, wraps the HTTP transport, e.g. to trace requests.
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// ObserveRequest, when set, is told of every request sent, once its answer is read or has
	// failed: the API method that sent it (Clone, TaskStatus, ...), its StatusClass and how
	// long it took. The worker counts requests with it in its metrics.
	ObserveRequest func(method, statusClass string, took time.Duration)
	// Limits cap the rate and concurrency of the requests this client sends; the zero value
	// sends every request at once. They hold for this client, that is one worker process.
	Limits CallLimits
	// SharedLimits makes this client's cap a share of one that other clients share, given by
	// SetCallShare, in place of Limits: until its first share comes, and from when a share
	// lapses until the next, the client sends nothing.
	SharedLimits bool
	// ObserveHeld, when set, is told of every request the limits held back before it was sent:
	// the API method that sent it and how long it waited.
	ObserveHeld func(method string, held time.Duration)
}

// Client implements API with Proxmox VE's REST interface, authenticated by an API token. It is
// safe for concurrent use.
type Client struct {
	base      string // the escaped URL of /api2/json
	tokenFile string
	timeout   time.Duration
	http      *http.Client
	observe   func(method, statusClass string, took time.Duration)
	limit     *limiter
	held      func(method string, held time.Duration)
	logger    *slog.Logger
}

var _ API = (*Client)(nil)

const (
	defaultRequestTimeout = 30 * time.Second
	dialTimeout           = 10 * time.Second
	tlsHandshakeTimeout   = 10 * time.Second
	// pveproxy gives up on pvedaemon after 30 s and answers then, so a status line that takes
	// longer than this means a hung connection, whatever RequestTimeout allows.
	responseHeaderTimeout = time.Minute
	// maxAnswer caps a successful answer: the largest, cluster resources, stays far below it.
	maxAnswer = 32 << 20
	// maxTokenFile caps what is read of the token file: a token is about 80 bytes.
	maxTokenFile    = 4 << 10
	formContentType = "application/x-www-form-urlencoded"
)

// NewClient checks cfg and builds a Client. It does not dial: the first request does.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("proxmox api url: %w", err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("proxmox api url %q: want https://host[:port]", u.Redacted())
	}
	if cfg.TokenFile == "" {
		return nil, errors.New("proxmox api token file not set")
	}
	timeout := cfg.RequestTimeout
	switch {
	case timeout == 0:
		timeout = defaultRequestTimeout
	case timeout < 0:
		return nil, fmt.Errorf("proxmox api request timeout %s is negative", timeout)
	}

	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("proxmox api %w", err)
	}
	limit := newLimiter(cfg.Limits)
	if cfg.SharedLimits {
		if cfg.Limits != (CallLimits{}) {
			return nil, errors.New("proxmox api: limits and shared limits both set: a shared client's cap is its share")
		}
		limit = newSharedLimiter()
	}

	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipTLSVerify}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("proxmox api CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("proxmox api CA file %s: no PEM certificate in it", cfg.CAFile)
		}
		tlsConf.RootCAs = pool
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.InsecureSkipTLSVerify {
		logger.Warn("proxmox api: TLS certificate verification is off (insecureSkipTLSVerify)", "url", u.Redacted())
	}

	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   tlsHandshakeTimeout,
		ResponseHeaderTimeout: responseHeaderTimeout,
		// pveproxy speaks HTTP/1.1 only; a non-nil empty TLSNextProto keeps HTTP/2 out of ALPN.
		ForceAttemptHTTP2: false,
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
		// pveflow talks to a handful of nodes with a few calls in flight each.
		MaxIdleConns:        16,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	var rt http.RoundTripper = transport
	if cfg.WrapTransport != nil {
		rt = cfg.WrapTransport(transport)
	}
	return &Client{
		base:      strings.TrimSuffix(u.String(), "/") + "/api2/json",
		tokenFile: cfg.TokenFile,
		timeout:   timeout,
		observe:   cfg.ObserveRequest,
		limit:     limit,
		held:      cfg.ObserveHeld,
		logger:    logger,
		http: &http.Client{
			Transport: rt,
			// PVE never redirects; an answer that does is reported, not followed with the token.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// SetCallShare applies s, this client's share of a shared cap (ClientConfig.SharedLimits), until
// until: from then on the client sends nothing until a new share comes.
func (c *Client) SetCallShare(s CallShare, until time.Time) { c.limit.setShare(s, until) }

// RequestTimeout bounds each request from its sending to its whole answer.
func (c *Client) RequestTimeout() time.Duration { return c.timeout }

// TellCallsInFlight has f told how many requests are in flight whenever that changes: before a
// request is sent and once its answer is read, so that what f last heard holds even if the
// process dies. f runs under the client's limiter lock and must be quick. Only a client with a
// cap or a shared cap counts its requests.
func (c *Client) TellCallsInFlight(f func(int)) {
	c.limit.mu.Lock()
	defer c.limit.mu.Unlock()
	c.limit.onCalls = f
}

// CallsInFlight is how many requests the client has sent whose answers it has not read yet.
func (c *Client) CallsInFlight() int { return c.limit.calls() }

// Version reads GET /version.
func (c *Client) Version(ctx context.Context) (Version, error) {
	var v Version
	err := c.call(ctx, "Version", "version query", http.MethodGet, endpoint{template: "/version"}, nil, &v)
	return v, err
}

// NodeStatus reads GET /nodes/{node}/status.
func (c *Client) NodeStatus(ctx context.Context, node string) (NodeStatus, error) {
	var s NodeStatus
	err := c.call(ctx, "NodeStatus", "status of node "+node, http.MethodGet, endpoint{template: "/nodes/{node}/status", node: node}, nil, &s)
	return s, err
}

// StorageStatus reads GET /nodes/{node}/storage/{storage}/status.
func (c *Client) StorageStatus(ctx context.Context, node, storage string) (StorageStatus, error) {
	var s StorageStatus
	op := fmt.Sprintf("status of storage %s on node %s", storage, node)
	err := c.call(ctx, "StorageStatus", op, http.MethodGet,
		endpoint{template: "/nodes/{node}/storage/{storage}/status", node: node, storage: storage}, nil, &s)
	return s, err
}

// ClusterResources reads GET /cluster/resources?type=vm.
func (c *Client) ClusterResources(ctx context.Context) ([]VMResource, error) {
	var rs []VMResource
	err := c.call(ctx, "ClusterResources", "cluster resources", http.MethodGet, endpoint{template: "/cluster/resources"}, url.Values{"type": {"vm"}}, &rs)
	return rs, err
}

// VMConfig reads GET /nodes/{node}/qemu/{vmid}/config.
func (c *Client) VMConfig(ctx context.Context, node string, vmid int) (VMConfig, error) {
	var cfg VMConfig
	err := c.call(ctx, "VMConfig", vmOp("config", node, vmid), http.MethodGet, vmEndpoint("config", node, vmid), nil, &cfg)
	return cfg, err
}

// SetVMConfig writes PUT /nodes/{node}/qemu/{vmid}/config with params as its form.
func (c *Client) SetVMConfig(ctx context.Context, node string, vmid int, params VMConfig) error {
	form := make(url.Values, len(params))
	for k, v := range params {
		form.Set(k, v)
	}
	return c.call(ctx, "SetVMConfig", vmOp("config update", node, vmid), http.MethodPut, vmEndpoint("config", node, vmid), form, nil)
}

// Clone starts POST /nodes/{node}/qemu/{vmid}/clone. It always sends full, as 0 or 1, so that
// CloneParams.Full means the same for a template and a plain VM; the other fields only when set.
func (c *Client) Clone(ctx context.Context, node string, vmid int, p CloneParams) (UPID, error) {
	form := url.Values{"newid": {strconv.Itoa(p.NewID)}, "full": {formBool(p.Full)}}
	for k, v := range map[string]string{
		"name":        p.Name,
		"description": p.Description,
		"target":      p.Target,
		"storage":     p.Storage,
		"pool":        p.Pool,
	} {
		if v != "" {
			form.Set(k, v)
		}
	}
	return c.task(ctx, "Clone", vmOp("clone", node, vmid), http.MethodPost, vmEndpoint("clone", node, vmid), form)
}

// Resize starts PUT /nodes/{node}/qemu/{vmid}/resize.
func (c *Client) Resize(ctx context.Context, node string, vmid int, disk, size string) (UPID, error) {
	form := url.Values{"disk": {disk}, "size": {size}}
	return c.task(ctx, "Resize", vmOp("resize of disk "+disk, node, vmid), http.MethodPut, vmEndpoint("resize", node, vmid), form)
}

// Start starts POST /nodes/{node}/qemu/{vmid}/status/start.
func (c *Client) Start(ctx context.Context, node string, vmid int) (UPID, error) {
	return c.task(ctx, "Start", vmOp("start", node, vmid), http.MethodPost, vmEndpoint("status/start", node, vmid), nil)
}

// Stop starts POST /nodes/{node}/qemu/{vmid}/status/stop.
func (c *Client) Stop(ctx context.Context, node string, vmid int) (UPID, error) {
	return c.task(ctx, "Stop", vmOp("stop", node, vmid), http.MethodPost, vmEndpoint("status/stop", node, vmid), nil)
}

// Reboot starts POST /nodes/{node}/qemu/{vmid}/status/reboot.
func (c *Client) Reboot(ctx context.Context, node string, vmid int) (UPID, error) {
	return c.task(ctx, "Reboot", vmOp("reboot", node, vmid), http.MethodPost, vmEndpoint("status/reboot", node, vmid), nil)
}

// VMStatus reads GET /nodes/{node}/qemu/{vmid}/status/current.
func (c *Client) VMStatus(ctx context.Context, node string, vmid int) (VMStatus, error) {
	var s VMStatus
	err := c.call(ctx, "VMStatus", vmOp("status", node, vmid), http.MethodGet, vmEndpoint("status/current", node, vmid), nil, &s)
	return s, err
}

// Destroy starts DELETE /nodes/{node}/qemu/{vmid}?purge=1&destroy-unreferenced-disks=1.
func (c *Client) Destroy(ctx context.Context, node string, vmid int) (UPID, error) {
	query := url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}}
	return c.task(ctx, "Destroy", vmOp("destroy", node, vmid), http.MethodDelete, vmEndpoint("", node, vmid), query)
}

// TaskStatus reads GET /nodes/{node}/tasks/{upid}/status.
func (c *Client) TaskStatus(ctx context.Context, node string, upid UPID) (TaskStatus, error) {
	var s TaskStatus
	op := fmt.Sprintf("status of task %s on node %s", upid, node)
	err := c.call(ctx, "TaskStatus", op, http.MethodGet,
		endpoint{template: "/nodes/{node}/tasks/{upid}/status", node: node, upid: upid}, nil, &s)
	return s, err
}

// AgentNetworkInterfaces reads GET /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces.
func (c *Client) AgentNetworkInterfaces(ctx context.Context, node string, vmid int) ([]AgentInterface, error) {
	var answer struct {
		Result []AgentInterface `json:"result"`
	}
	op := vmOp("guest agent network interfaces", node, vmid)
	err := c.call(ctx, "AgentNetworkInterfaces", op, http.MethodGet, vmEndpoint("agent/network-get-interfaces", node, vmid), nil, &answer)
	return answer.Result, err
}

// AgentFileRead reads GET /nodes/{node}/qemu/{vmid}/agent/file-read?file=<file>. Only file is
// sent: PVE's defaults read the whole file (up to 16 MiB) from its start, decoded.
func (c *Client) AgentFileRead(ctx context.Context, node string, vmid int, file string) (string, error) {
	var answer struct {
		Content string `json:"content"`
	}
	op := vmOp("read of "+file+" through the guest agent", node, vmid)
	err := c.call(ctx, "AgentFileRead", op, http.MethodGet, vmEndpoint("agent/file-read", node, vmid), url.Values{"file": {file}}, &answer)
	return answer.Content, err
}

// UploadISO starts POST /nodes/{node}/storage/{storage}/upload. The body streams r between the
// multipart head and tail, so the ISO is not buffered, under the exact Content-Length PVE
// requires; r must yield exactly size bytes.
func (c *Client) UploadISO(ctx context.Context, node, storage, filename string, r io.Reader, size int64) (UPID, error) {
	op := fmt.Sprintf("upload of ISO %s to storage %s on node %s", filename, storage, node)
	if size < 0 {
		return "", callError(op, fmt.Errorf("negative size %d", size))
	}
	// PVE parses the upload as a stream: the content field must precede the file, whose part
	// must be named "filename"; its file name is the stored name.
	var frame bytes.Buffer
	mw := multipart.NewWriter(&frame)
	if err := mw.WriteField("content", "iso"); err != nil {
		return "", callError(op, err)
	}
	if _, err := mw.CreateFormFile("filename", filename); err != nil {
		return "", callError(op, err)
	}
	headLen := frame.Len()
	if err := mw.Close(); err != nil {
		return "", callError(op, err)
	}
	head, tail := frame.Bytes()[:headLen], frame.Bytes()[headLen:]

	body := io.MultiReader(bytes.NewReader(head), &exactReader{r: r, size: size}, bytes.NewReader(tail))
	ep := endpoint{template: "/nodes/{node}/storage/{storage}/upload", node: node, storage: storage}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+ep.path(), body)
	if err != nil {
		return "", callError(op, err)
	}
	req.ContentLength = int64(len(head)) + size + int64(len(tail))
	req.Header.Set("Content-Type", mw.FormDataContentType())
	var upid UPID
	err = c.do("UploadISO", op, ep, req, &upid)
	return upid, err
}

// DeleteVolume starts DELETE /nodes/{node}/storage/{storage}/content/{volid}.
func (c *Client) DeleteVolume(ctx context.Context, node, storage, volid string) (UPID, error) {
	op := fmt.Sprintf("deletion of volume %s on storage %s on node %s", volid, storage, node)
	return c.task(ctx, "DeleteVolume", op, http.MethodDelete,
		endpoint{template: "/nodes/{node}/storage/{storage}/content/{volume}", node: node, storage: storage, volume: volid}, nil)
}

// StorageContent reads GET /nodes/{node}/storage/{storage}/content.
func (c *Client) StorageContent(ctx context.Context, node, storage, content string) ([]StorageVolume, error) {
	var vs []StorageVolume
	op := fmt.Sprintf("content of storage %s on node %s", storage, node)
	var params url.Values
	if content != "" {
		params = url.Values{"content": {content}}
	}
	err := c.call(ctx, "StorageContent", op, http.MethodGet,
		endpoint{template: "/nodes/{node}/storage/{storage}/content", node: node, storage: storage}, params, &vs)
	return vs, err
}

// NodeTasks reads GET /nodes/{node}/tasks.
func (c *Client) NodeTasks(ctx context.Context, node string, p TaskListParams) ([]TaskListEntry, error) {
	var ts []TaskListEntry
	op := "task list of node " + node
	params := url.Values{}
	if p.Source != "" {
		params.Set("source", p.Source)
	}
	if p.TypeFilter != "" {
		params.Set("typefilter", p.TypeFilter)
	}
	if p.VMID != 0 {
		params.Set("vmid", strconv.Itoa(p.VMID))
	}
	if p.Limit != 0 {
		params.Set("limit", strconv.Itoa(p.Limit))
	}
	err := c.call(ctx, "NodeTasks", op, http.MethodGet, endpoint{template: "/nodes/{node}/tasks", node: node}, params, &ts)
	return ts, err
}

// task makes a call whose answer is a task's UPID.
func (c *Client) task(ctx context.Context, apiMethod, op, method string, ep endpoint, params url.Values) (UPID, error) {
	var upid UPID
	err := c.call(ctx, apiMethod, op, method, ep, params, &upid)
	return upid, err
}

// call sends params form-encoded, in the body of a POST or PUT and in the query otherwise, to the
// path of ep, and decodes the answer's data into out unless out is nil. apiMethod is the API
// method making the call, op says which call failed in its errors.
func (c *Client) call(ctx context.Context, apiMethod, op, method string, ep endpoint, params url.Values, out any) error {
	target := c.base + ep.path()
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut {
		body = strings.NewReader(params.Encode())
	} else if len(params) > 0 {
		target += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return callError(op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", formContentType)
	}
	return c.do(apiMethod, op, ep, req, out)
}

// do waits until the call limits let req go, authenticates and sends req, the call of ep, within
// the request timeout, turns a non-2xx answer into an *APIError, and decodes the data of a 2xx
// answer into out unless out is nil. The request is observed as apiMethod's, and logged at debug
// level (logCall). The request timeout and the observed duration start once the limits let the
// request go; the wait ends with req's context.
func (c *Client) do(apiMethod, op string, ep endpoint, req *http.Request, out any) (err error) {
	release, held, err := c.limit.acquire(req.Context())
	if held > 0 && c.held != nil {
		c.held(apiMethod, held)
	}
	if err != nil {
		return callError(op, err)
	}
	defer release()
	sent := time.Now()
	status := 0 // until an answer has been read whole
	answered := 0
	defer func() { c.logCall(req, ep, out, answered, time.Since(sent), err) }()
	header, secret, err := c.token()
	if err != nil {
		return callError(op, err)
	}
	req.Header.Set("Authorization", header)
	ctx, cancel := context.WithTimeout(req.Context(), c.timeout)
	defer cancel()

	if c.observe != nil {
		defer func() { c.observe(apiMethod, statusClass(status), time.Since(sent)) }()
	}
	resp, err := c.http.Do(req.WithContext(ctx))
	if err != nil {
		return callError(op, c.transportError(req.Context(), ctx, err))
	}
	defer resp.Body.Close()
	answered = resp.StatusCode

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A body cut short still leaves the status and reason to report.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		status = resp.StatusCode
		reason := strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode))
		apiErr := ErrorFromResponse(resp.StatusCode, reason, body)
		redact(apiErr, secret)
		return callError(op, apiErr)
	}
	var answer struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(&answer); err != nil {
		return callError(op, fmt.Errorf("read answer: %w", c.transportError(req.Context(), ctx, err)))
	}
	status = resp.StatusCode
	if out == nil || len(answer.Data) == 0 {
		return nil
	}
	if err := decodeData(answer.Data, out); err != nil {
		return callError(op, fmt.Errorf("decode answer: %w", err))
	}
	return nil
}

// logCall writes the debug line of a call of ep: its method and path template, the node, VMID
// and UPID it names or answered, the HTTP status (0: no answer), how long it took and its error.
// Nothing else of the request goes there: not its query or body (the seed ISO's user-data, a
// config's values), not its headers (the token).
func (c *Client) logCall(req *http.Request, ep endpoint, out any, status int, took time.Duration, err error) {
	ctx := req.Context()
	if !c.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("method", req.Method), slog.String("path", ep.template))
	if ep.node != "" {
		attrs = append(attrs, slog.String("node", ep.node))
	}
	if ep.vmid != 0 {
		attrs = append(attrs, slog.Int("vmid", ep.vmid))
	}
	upid := ep.upid
	if answer, ok := out.(*UPID); ok && *answer != "" {
		upid = *answer
	}
	if upid != "" {
		attrs = append(attrs, slog.String("upid", string(upid)))
	}
	attrs = append(attrs, slog.Int("status", status), slog.Duration("duration", took))
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	c.logger.LogAttrs(ctx, slog.LevelDebug, "proxmox request", attrs...)
}

// statusClass is how metrics group an HTTP status: "2xx", "4xx", "5xx" and so on, or "error"
// for a request that got no complete answer (status 0): refused, timed out, cut short.
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "error"
	}
	return strconv.Itoa(status/100) + "xx"
}

// token reads the token file and returns the Authorization header and the secret, which must
// never reach an error or a log.
func (c *Client) token() (header, secret string, err error) {
	header, secret, err = readToken(c.tokenFile)
	if err != nil {
		return "", "", fmt.Errorf("proxmox api token file %s: %w", c.tokenFile, err)
	}
	return header, secret, nil
}

// CheckTokenFile reads the token file at path as every request does, for a program to refuse a
// bad one when it starts rather than at its first request: one that cannot be read, whose mode
// gives others access to it or its group write access (secretfile.CheckMode), or that is not one
// line <user>@<realm>!<tokenid>=<secret>. Its errors do not name the file, which the caller does,
// and never hold the secret.
func CheckTokenFile(path string) error {
	_, _, err := readToken(path)
	return err
}

// readToken is CheckTokenFile returning the Authorization header and the secret. A file that
// cannot be read, or is open to others, is Transient: the next attempt reads it again, once it is
// fixed or its rotation is done. One that does not parse is Permanent.
func readToken(path string) (header, secret string, err error) {
	data, err := readSecretFile(path)
	if err != nil {
		return "", "", Classified(Transient, err)
	}
	token := strings.TrimSpace(string(data))
	id, secret, hasSecret := strings.Cut(token, "=")
	user, tokenID, hasTokenID := strings.Cut(id, "!")
	if !hasSecret || !hasTokenID || secret == "" || tokenID == "" || !strings.Contains(user, "@") ||
		strings.ContainsFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "", "", Classified(Permanent, errors.New("want one line <user>@<realm>!<tokenid>=<secret>"))
	}
	return "PVEAPIToken=" + token, secret, nil
}

// readSecretFile reads the file at path once secretfile.CheckMode accepts its mode. Its errors
// do not name the file but in the chmod that fixes its mode.
func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, unwrapPath(err)
	}
	if err := secretfile.CheckMode(path, info.Mode()); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile))
	if err != nil {
		return nil, unwrapPath(err)
	}
	return data, nil
}

// unwrapPath drops the *fs.PathError around err, whose text repeats the path the caller names.
func unwrapPath(err error) error {
	if pe, ok := errorsAs[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// transportError drops the *url.Error around err, whose text repeats the URL and its query,
// and says so when the client's own timeout (requestCtx) rather than the caller's context ended
// the request.
func (c *Client) transportError(callerCtx, requestCtx context.Context, err error) error {
	if ue, ok := errorsAs[*url.Error](err); ok {
		err = ue.Err
	}
	for _, ctx := range []context.Context{callerCtx, requestCtx} {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			// The request ended while the answer was on its way (the server may even have
			// answered with an empty body as the connection went): its end is what failed.
			err = fmt.Errorf("%w (%v)", ctxErr, err)
			break
		}
	}
	if errors.Is(err, context.DeadlineExceeded) && callerCtx.Err() == nil {
		return fmt.Errorf("no answer within %s: %w", c.timeout, err)
	}
	return err
}

// redact removes the token secret from an answer's texts: a proxy or an older PVE may echo the
// credentials it refused.
func redact(e *APIError, secret string) {
	hide := func(s string) string { return strings.ReplaceAll(s, secret, "[redacted]") }
	e.Reason = hide(e.Reason)
	e.Message = hide(e.Message)
	if e.Errors == nil {
		return
	}
	errs := make(map[string]string, len(e.Errors))
	for k, v := range e.Errors {
		errs[hide(k)] = hide(v)
	}
	e.Errors = errs
}

// An endpoint is the path of a call as the API schema writes it, such as
// /nodes/{node}/qemu/{vmid}/config, with the values of its variables: the request's path is made
// from it, and the call's debug log line names the template and the values it knows to be no
// secret.
type endpoint struct {
	template string
	node     string
	vmid     int
	storage  string
	volume   string
	upid     UPID
	sid      string
}

// path fills the template in, escaping each value, so that a volume ID or a UPID stays one
// segment.
func (e endpoint) path() string {
	return strings.NewReplacer(
		"{node}", url.PathEscape(e.node),
		"{vmid}", strconv.Itoa(e.vmid),
		"{storage}", url.PathEscape(e.storage),
		"{volume}", url.PathEscape(e.volume),
		"{upid}", url.PathEscape(string(e.upid)),
		"{sid}", url.PathEscape(e.sid),
	).Replace(e.template)
}

// vmEndpoint is the endpoint /nodes/{node}/qemu/{vmid}/<rest> of a VM, or the VM itself when rest
// is empty.
func vmEndpoint(rest, node string, vmid int) endpoint {
	template := "/nodes/{node}/qemu/{vmid}"
	if rest != "" {
		template += "/" + rest
	}
	return endpoint{template: template, node: node, vmid: vmid}
}

func vmOp(what, node string, vmid int) string {
	return fmt.Sprintf("%s of VM %d on node %s", what, vmid, node)
}

// formBool is PVE's boolean in form encoding, where only 0 and 1 pass its type check.
func formBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// exactReader passes on exactly size bytes of r and fails when r has fewer or more: an upload's
// Content-Length is promised before its body is read.
type exactReader struct {
	r       io.Reader
	size, n int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.n == e.size {
		var extra [1]byte
		k, err := io.ReadFull(e.r, extra[:])
		if k > 0 {
			return 0, fmt.Errorf("ISO reader yields more than the declared %d bytes", e.size)
		}
		return 0, err
	}
	if rest := e.size - e.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	k, err := e.r.Read(p)
	e.n += int64(k)
	if err == io.EOF && e.n < e.size {
		return k, fmt.Errorf("ISO reader ended after %d of the declared %d bytes", e.n, e.size)
	}
	return k, err
}

// TaskLog reads GET /nodes/{node}/tasks/{upid}/log with limit=0, which PVE reads as "to the
// end" (pve-common src/PVE/Tools.pm dump_logfile_by_filehandle: read_until_end when the limit
// is 0); the default limit is 50 lines.
func (c *Client) TaskLog(ctx context.Context, node string, upid UPID) ([]TaskLogLine, error) {
	var lines []TaskLogLine
	op := fmt.Sprintf("log of task %s on node %s", upid, node)
	err := c.call(ctx, "TaskLog", op, http.MethodGet,
		endpoint{template: "/nodes/{node}/tasks/{upid}/log", node: node, upid: upid}, url.Values{"limit": {"0"}}, &lines)
	return lines, err
}

// Permissions reads GET /access/permissions?path=<path>. PVE answers {path: {privilege:
// propagate}}, or {} when the token holds nothing there.
func (c *Client) Permissions(ctx context.Context, path string) (Privileges, error) {
	var answer map[string]Privileges
	op := "permissions on " + path
	err := c.call(ctx, "Permissions", op, http.MethodGet, endpoint{template: "/access/permissions"}, url.Values{"path": {path}}, &answer)
	if err != nil {
		return nil, err
	}
	privs := answer[path]
	if privs == nil {
		privs = Privileges{}
	}
	return privs, nil
}

// Migrate starts POST /nodes/{node}/qemu/{vmid}/migrate.
func (c *Client) Migrate(ctx context.Context, node string, vmid int, p MigrateParams) (UPID, error) {
	form := url.Values{"target": {p.Target}}
	if p.Online {
		form.Set("online", formBool(true))
	}
	if p.WithLocalDisks {
		form.Set("with-local-disks", formBool(true))
	}
	return c.task(ctx, "Migrate", vmOp("migration to "+p.Target, node, vmid), http.MethodPost, vmEndpoint("migrate", node, vmid), form)
}

// HAManagerStatus reads GET /cluster/ha/status/manager_status.
func (c *Client) HAManagerStatus(ctx context.Context) (HAManagerStatus, error) {
	var s HAManagerStatus
	err := c.call(ctx, "HAManagerStatus", "HA manager status", http.MethodGet, endpoint{template: "/cluster/ha/status/manager_status"}, nil, &s)
	return s, err
}

// SDNVnets reads GET /cluster/sdn/vnets.
func (c *Client) SDNVnets(ctx context.Context) ([]SDNVnet, error) {
	var vnets []SDNVnet
	err := c.call(ctx, "SDNVnets", "SDN vnets", http.MethodGet, endpoint{template: "/cluster/sdn/vnets"}, nil, &vnets)
	return vnets, err
}

// AddHAResource writes POST /cluster/ha/resources.
func (c *Client) AddHAResource(ctx context.Context, p HAResourceParams) error {
	form := url.Values{"sid": {p.SID}}
	for k, v := range map[string]string{"state": p.State, "comment": p.Comment} {
		if v != "" {
			form.Set(k, v)
		}
	}
	return c.call(ctx, "AddHAResource", "registration of HA resource "+p.SID, http.MethodPost, endpoint{template: "/cluster/ha/resources"}, form, nil)
}

// DeleteHAResource writes DELETE /cluster/ha/resources/{sid}.
func (c *Client) DeleteHAResource(ctx context.Context, sid string) error {
	return c.call(ctx, "DeleteHAResource", "removal of HA resource "+sid, http.MethodDelete, endpoint{template: "/cluster/ha/resources/{sid}", sid: sid}, nil, nil)
}
