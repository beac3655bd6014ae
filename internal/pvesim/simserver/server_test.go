package simserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/syncbuf"
)

// startServer serves api on a free loopback port until the test ends.
func startServer(t *testing.T, api pve.API, opts ...func(*Options)) *Server {
	t.Helper()
	o := Options{API: api, Dir: t.TempDir()}
	for _, f := range opts {
		f(&o)
	}
	s, err := Start(o)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

// httpClient is a plain net/http client that trusts the server's CA.
func httpClient(t *testing.T, s *Server) *http.Client {
	t.Helper()
	caPEM, err := os.ReadFile(s.CAFile())
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// newRequest builds a request for path below /api2/json carrying the server's token.
func newRequest(t *testing.T, s *Server, method, path string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, s.URL()+"/api2/json"+path, body)
	require.NoError(t, err)
	token, err := os.ReadFile(s.TokenFile())
	require.NoError(t, err)
	req.Header.Set("Authorization", "PVEAPIToken="+string(token))
	return req
}

// formRequest builds a POST or PUT with form-encoded parameters.
func formRequest(t *testing.T, s *Server, method, path string, form url.Values) *http.Request {
	t.Helper()
	req := newRequest(t, s, method, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

// send sends req with a fresh client and returns the answer with its body read.
func send(t *testing.T, s *Server, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := httpClient(t, s).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// pveError is the JSON body of a PVE error.
type pveError struct {
	Data    any               `json:"data"`
	Message *string           `json:"message"`
	Errors  map[string]string `json:"errors"`
}

func decodeError(t *testing.T, body string) pveError {
	t.Helper()
	var e pveError
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e
}

// The test doubles embed pve.API, so a method a test does not expect panics if called.

// failingAPI fails VMConfig with err.
type failingAPI struct {
	pve.API
	err error
}

func (f failingAPI) VMConfig(context.Context, string, int) (pve.VMConfig, error) {
	return nil, f.err
}

// fixedAPI answers reads with fixed values.
type fixedAPI struct{ pve.API }

func (fixedAPI) StorageStatus(context.Context, string, string) (pve.StorageStatus, error) {
	return pve.StorageStatus{Type: "dir", Content: "iso,vztmpl", Enabled: true, Active: true, Total: 100, Used: 40, Avail: 60}, nil
}

func (fixedAPI) ClusterResources(context.Context) ([]pve.VMResource, error) {
	return []pve.VMResource{
		{ID: "qemu/9000", VMID: 9000, Name: "debian-13-template", Node: "pve1", Type: "qemu", Status: "stopped", Template: true},
		{ID: "qemu/123456", VMID: 123456, Node: "pve1", Type: "qemu", Status: "unknown", Lock: "clone"},
	}, nil
}

func (fixedAPI) VMConfig(context.Context, string, int) (pve.VMConfig, error) {
	return pve.VMConfig{"cores": "2", "memory": "2048", "onboot": "1", "agent": "1", "name": "proxy-1", "description": "42"}, nil
}

func (fixedAPI) AgentNetworkInterfaces(context.Context, string, int) ([]pve.AgentInterface, error) {
	return []pve.AgentInterface{
		{Name: "lo", HardwareAddress: "00:00:00:00:00:00", IPAddresses: []pve.AgentIPAddress{{Address: "127.0.0.1", Type: "ipv4", Prefix: 8}}},
		{Name: "ens19"},
	}, nil
}

func (fixedAPI) AgentFileRead(context.Context, string, int, string) (string, error) {
	return `{"v1": {"errors": []}}`, nil
}

func (fixedAPI) DeleteVolume(context.Context, string, string, string) (pve.UPID, error) {
	return "", nil
}

func TestServer_refusesRequestTheSchemaDoesNotAllow(t *testing.T) {
	s := startServer(t, fixedAPI{})
	tests := []struct {
		name       string
		req        func() *http.Request
		wantStatus string
		wantErrors map[string]string
		wantText   string
	}{
		{
			name: "unknown parameter",
			req: func() *http.Request {
				return newRequest(t, s, http.MethodGet, "/nodes/pve1/storage/local/status?bogus=1", nil)
			},
			wantStatus: "400 Parameter verification failed.",
			wantErrors: map[string]string{"bogus": "property is not defined in schema and the schema does not allow additional properties"},
		},
		{
			name: "parameter of the wrong type",
			req: func() *http.Request {
				return formRequest(t, s, http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"abc"}})
			},
			wantStatus: "400 Parameter verification failed.",
			wantErrors: map[string]string{"newid": "type check ('integer') failed - got 'abc'"},
		},
		{
			name: "unknown path",
			req: func() *http.Request {
				return newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/123456/agent/get-network-interfaces", nil)
			},
			wantStatus: "501 Method 'GET /nodes/pve1/qemu/123456/agent/get-network-interfaces' not implemented",
			wantText:   "Method 'GET /nodes/pve1/qemu/123456/agent/get-network-interfaces' not implemented",
		},
		{
			name: "path the schema has but the seam does not serve",
			req: func() *http.Request {
				return newRequest(t, s, http.MethodGet, "/cluster/nextid", nil)
			},
			wantStatus: "501 Method 'GET /cluster/nextid' not implemented",
			wantText:   "Method 'GET /cluster/nextid' not implemented",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := send(t, s, tt.req())

			assert.Equal(t, tt.wantStatus, resp.Status)
			assert.True(t, resp.Close, "an error closes the connection")
			if tt.wantErrors != nil {
				e := decodeError(t, body)
				assert.Equal(t, tt.wantErrors, e.Errors)
				require.NotNil(t, e.Message)
				assert.Equal(t, "Parameter verification failed.\n", *e.Message)
				return
			}
			// rest_handler's 501 goes through the json formatter: {"data":null,"message":...}
			// with the message as written, without a trailing newline.
			assert.JSONEq(t, fmt.Sprintf(`{"data":null,"message":%q}`, tt.wantText), body)
			assert.Equal(t, jsonContentType, resp.Header.Get("Content-Type"))
		})
	}
}

func TestServer_missingOrWrongTokenIs401WithEmptyBody(t *testing.T) {
	s := startServer(t, fixedAPI{})
	token, err := os.ReadFile(s.TokenFile())
	require.NoError(t, err)
	user, _, ok := strings.Cut(string(token), "=")
	require.True(t, ok)
	tests := []struct {
		name          string
		authorization string
		wantStatus    string
	}{
		{"no header", "", "401 No ticket"},
		{"empty token", "PVEAPIToken=", "401 No ticket"},
		{"other scheme", "Bearer " + string(token), "401 No ticket"},
		{"wrong secret", "PVEAPIToken=" + user + "=00000000-0000-4000-8000-000000000000", "401 Authentication failed!"},
		{"wrong token id", "PVEAPIToken=root@pam!other=" + strings.TrimPrefix(string(token), user+"="), "401 Authentication failed!"},
		{"no secret", "PVEAPIToken=" + user, "401 Authentication failed!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := newRequest(t, s, http.MethodGet, "/nodes/pve1/storage/local/status", nil)
			req.Header.Set("Authorization", tt.authorization)

			resp, body := send(t, s, req)

			assert.Equal(t, tt.wantStatus, resp.Status)
			assert.Empty(t, body)
			assert.Empty(t, resp.Header.Get("Content-Length"))
			assert.True(t, resp.Close, "a 401 closes the connection")
		})
	}
}

func TestServer_unauthorizedWaitsAuthDelay(t *testing.T) {
	const delay = 200 * time.Millisecond
	s := startServer(t, fixedAPI{}, func(o *Options) { o.AuthDelay = delay })
	req := newRequest(t, s, http.MethodGet, "/version", nil)
	req.Header.Del("Authorization")

	start := time.Now()
	resp, _ := send(t, s, req)

	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.GreaterOrEqual(t, time.Since(start), delay)
}

func TestServer_acceptsBothTokenHeaderForms(t *testing.T) {
	s := startServer(t, fixedAPI{})
	token, err := os.ReadFile(s.TokenFile())
	require.NoError(t, err)
	for _, header := range []string{"PVEAPIToken=" + string(token), "PVEAPIToken " + string(token)} {
		req := newRequest(t, s, http.MethodGet, "/nodes/pve1/storage/local/status", nil)
		req.Header.Set("Authorization", header)

		resp, _ := send(t, s, req)

		assert.Equal(t, http.StatusOK, resp.StatusCode, strings.Fields(header)[0])
	}
}

func TestServer_errorHasPVEReasonPhraseAndJSONMessage(t *testing.T) {
	const msg = "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist"
	s := startServer(t, pvesim.New(pvesim.Default()))

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/999/config", nil))

	assert.Equal(t, "500 "+msg, resp.Status)
	assert.Equal(t, "application/json;charset=UTF-8", resp.Header.Get("Content-Type"))
	assert.Equal(t, "pve-api-daemon/3.0", resp.Header.Get("Server"))
	assert.True(t, resp.Close, "an error closes the connection")
	e := decodeError(t, body)
	assert.Nil(t, e.Data)
	require.NotNil(t, e.Message)
	assert.Equal(t, msg+"\n", *e.Message)
	assert.Nil(t, e.Errors)
}

func TestServer_pve82ErrorHasNoMessage(t *testing.T) {
	opts := pvesim.Default()
	opts.PVE82 = true
	s := startServer(t, pvesim.New(opts))

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/999/config", nil))

	assert.Equal(t, "500 Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist", resp.Status)
	assert.JSONEq(t, `{"data":null}`, body)
}

func TestServer_otherErrorIs500WithItsFirstLine(t *testing.T) {
	s := startServer(t, failingAPI{err: errors.New("model broke\nsecond line")})

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/100/config", nil))

	assert.Equal(t, "500 model broke", resp.Status)
	e := decodeError(t, body)
	require.NotNil(t, e.Message)
	assert.Equal(t, "model broke\nsecond line\n", *e.Message)
}

func TestServer_reasonWithCarriageReturnBecomes400(t *testing.T) {
	s := startServer(t, failingAPI{err: &pve.APIError{Status: 500, Reason: "bad\rline", Message: "bad\rline"}})

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/100/config", nil))

	assert.Equal(t, "400 Bad Request", resp.Status)
	assert.Empty(t, body)
}

func TestServer_dropConnectionFault(t *testing.T) {
	cluster := pvesim.New(pvesim.Default())
	cluster.FailNext("VMStatus", pvesim.ErrDropConnection)
	s := startServer(t, cluster)

	resp, err := httpClient(t, s).Do(newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/9000/status/current", nil))
	if resp != nil {
		resp.Body.Close()
	}

	require.ErrorIs(t, err, io.EOF, "the connection is closed without an answer")
	assert.Equal(t, 1, cluster.CallCount("VMStatus"))
}

func TestServer_booleansAreIntegers(t *testing.T) {
	s := startServer(t, fixedAPI{})
	tests := []struct {
		path string
		want string
	}{
		{
			"/nodes/pve1/storage/local/status",
			`{"data":{"type":"dir","content":"iso,vztmpl","enabled":1,"active":1,"shared":0,"total":100,"used":40,"avail":60}}`,
		},
		{
			"/cluster/resources?type=vm",
			`{"data":[
				{"id":"qemu/9000","vmid":9000,"name":"debian-13-template","node":"pve1","type":"qemu","status":"stopped","template":1,"maxdisk":0,"maxmem":0,"maxcpu":0,"uptime":0},
				{"id":"qemu/123456","vmid":123456,"node":"pve1","type":"qemu","status":"unknown","template":0,"lock":"clone","maxdisk":0,"maxmem":0,"maxcpu":0,"uptime":0}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, body := send(t, s, newRequest(t, s, http.MethodGet, tt.path, nil))

			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.JSONEq(t, tt.want, body)
		})
	}
}

func TestServer_vmConfigNumbersFollowTheSchema(t *testing.T) {
	s := startServer(t, fixedAPI{})

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/123456/config", nil))

	require.Equal(t, http.StatusOK, resp.StatusCode)
	// cores and onboot are an integer and a boolean in the schema; memory and agent are
	// property strings, and a description that looks like a number is still a string.
	assert.JSONEq(t, `{"data":{"cores":2,"onboot":1,"memory":"2048","agent":"1","name":"proxy-1","description":"42"}}`, body)
}

func TestServer_agentInterfacesAreWrappedInResult(t *testing.T) {
	s := startServer(t, fixedAPI{})

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/123456/agent/network-get-interfaces", nil))

	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"data":{"result":[
		{"name":"lo","hardware-address":"00:00:00:00:00:00","ip-addresses":[{"ip-address":"127.0.0.1","ip-address-type":"ipv4","prefix":8}]},
		{"name":"ens19"}]}}`, body)
}

func TestServer_agentFileReadAnswersContentAndBytesRead(t *testing.T) {
	s := startServer(t, fixedAPI{})

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/123456/agent/file-read?file=%2Frun%2Fcloud-init%2Fresult.json", nil))

	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"data":{"content":"{\"v1\": {\"errors\": []}}","bytes-read":22}}`, body)
}

func TestServer_agentFileReadOfFewerBytesIsTruncatedAndBase64WithoutDecode(t *testing.T) {
	s := startServer(t, fixedAPI{})

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/123456/agent/file-read?file=%2Fx&count=4&decode=0", nil))

	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"data":{"content":"eyJ2MQ==","bytes-read":4,"truncated":1}}`, body)
}

func TestServer_deleteVolumeFinishedWithinRequestAnswersNull(t *testing.T) {
	s := startServer(t, fixedAPI{})

	resp, body := send(t, s, newRequest(t, s, http.MethodDelete, "/nodes/pve1/storage/local/content/"+url.PathEscape("local:iso/seed.iso"), nil))

	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"data":null}`, body)
	assert.False(t, resp.Close, "a success keeps the connection")
}

func TestServer_bodyOverLimitRefused(t *testing.T) {
	s := startServer(t, fixedAPI{})
	form := url.Values{"description": {strings.Repeat("x", maxPostSize)}}

	resp, body := send(t, s, formRequest(t, s, http.MethodPut, "/nodes/pve1/qemu/123456/config", form))

	assert.Equal(t, "501 for data too large", resp.Status)
	assert.Equal(t, "for data too large", body)
}

func TestServer_getWithBodyRefused(t *testing.T) {
	s := startServer(t, fixedAPI{})

	resp, _ := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/storage/local/status", strings.NewReader("a=b")))

	assert.Equal(t, "501 Unexpected content for method 'GET'", resp.Status)
}

func TestServer_refusesNonLoopbackAddr(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:0", "example.com:0", "127.0.0.1"} {
		t.Run(addr, func(t *testing.T) {
			s, err := Start(Options{API: fixedAPI{}, Dir: t.TempDir(), Addr: addr})

			require.Error(t, err)
			assert.Nil(t, s)
		})
	}
}

func TestServer_listensOnIPv6Loopback(t *testing.T) {
	s, err := Start(Options{API: fixedAPI{}, Dir: t.TempDir(), Addr: "[::1]:0"})
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	t.Cleanup(func() { assert.NoError(t, s.Close()) })

	resp, _ := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/storage/local/status", nil))

	assert.True(t, strings.HasPrefix(s.URL(), "https://[::1]:"), s.URL())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestServer_http1Only(t *testing.T) {
	s := startServer(t, fixedAPI{})
	client := httpClient(t, s)
	tr := client.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = true
	tr.TLSClientConfig.NextProtos = []string{"h2", "http/1.1"}

	resp, err := client.Do(newRequest(t, s, http.MethodGet, "/nodes/pve1/storage/local/status", nil))
	require.NoError(t, err)
	resp.Body.Close()

	assert.Equal(t, "HTTP/1.1", resp.Proto)
	assert.Equal(t, "http/1.1", resp.TLS.NegotiatedProtocol)
}

func TestServer_writesCAAndTokenFilesForTheOwnerOnly(t *testing.T) {
	s := startServer(t, fixedAPI{}, func(o *Options) { o.TokenUser = "ops@pve!demo" })

	for _, name := range []string{s.CAFile(), s.TokenFile()} {
		info, err := os.Stat(name)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), name)
	}
	token, err := os.ReadFile(s.TokenFile())
	require.NoError(t, err)
	assert.Regexp(t, `^ops@pve!demo=[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, string(token))
}

func TestServer_refusesMalformedTokenUser(t *testing.T) {
	s, err := Start(Options{API: fixedAPI{}, Dir: t.TempDir(), TokenUser: "pveflow@pve"})

	require.ErrorContains(t, err, "user@realm!tokenid")
	assert.Nil(t, s)
}

func TestServer_logsRequestsWithoutCredentials(t *testing.T) {
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := startServer(t, fixedAPI{}, func(o *Options) { o.Logger = logger })
	token, err := os.ReadFile(s.TokenFile())
	require.NoError(t, err)

	send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/storage/local/status", nil))

	// The record is written after the answer, so wait for it.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "status=200") }, 10*time.Second, 10*time.Millisecond)
	line := logs.String()
	assert.Contains(t, line, "method=GET")
	assert.Contains(t, line, "path=/api2/json/nodes/pve1/storage/local/status")
	assert.Contains(t, line, "duration=")
	_, secret, _ := strings.Cut(string(token), "=")
	assert.NotContains(t, line, secret)
}

// writeRecorder records the writes it is given.
type writeRecorder struct {
	pve.API
	mu     sync.Mutex
	clones []pve.CloneParams
	config pve.VMConfig
}

func (w *writeRecorder) Clone(_ context.Context, node string, vmid int, p pve.CloneParams) (pve.UPID, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clones = append(w.clones, p)
	return pve.UPID(fmt.Sprintf("UPID:%s:00001A2B:0001E240:6B005320:qmclone:%d:pveflow@pve!sim:", node, vmid)), nil
}

func (w *writeRecorder) SetVMConfig(_ context.Context, _ string, _ int, cfg pve.VMConfig) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.config = cfg
	return nil
}

func TestServer_clonePassesParametersAndAnswersUPID(t *testing.T) {
	api := &writeRecorder{}
	s := startServer(t, api)
	form := url.Values{
		"newid":       {"123456"},
		"name":        {"proxy-3k7q2m9x4w8p1r5t"},
		"description": {"proxy-operator-managed=true\n"},
		"full":        {"1"},
		"target":      {"pve2"},
		"storage":     {"local-lvm"},
	}

	resp, body := send(t, s, formRequest(t, s, http.MethodPost, "/nodes/pve1/qemu/9000/clone", form))

	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.JSONEq(t, `{"data":"UPID:pve1:00001A2B:0001E240:6B005320:qmclone:9000:pveflow@pve!sim:"}`, body)
	api.mu.Lock()
	defer api.mu.Unlock()
	assert.Equal(t, []pve.CloneParams{{
		NewID:       123456,
		Name:        "proxy-3k7q2m9x4w8p1r5t",
		Description: "proxy-operator-managed=true\n",
		Full:        true,
		Target:      "pve2",
		Storage:     "local-lvm",
	}}, api.clones)
}

func TestServer_setVMConfigPassesParametersAndAnswersNull(t *testing.T) {
	api := &writeRecorder{}
	s := startServer(t, api)
	form := url.Values{"cores": {"4"}, "ide2": {"local:iso/seed-123456.iso,media=cdrom"}, "delete": {"tags"}}

	resp, body := send(t, s, formRequest(t, s, http.MethodPut, "/nodes/pve1/qemu/123456/config", form))

	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.JSONEq(t, `{"data":null}`, body)
	api.mu.Lock()
	defer api.mu.Unlock()
	assert.Equal(t, pve.VMConfig{"cores": "4", "ide2": "local:iso/seed-123456.iso,media=cdrom", "delete": "tags"}, api.config)
}

func TestServer_destroyPassesPurgeOn(t *testing.T) {
	cluster := pvesim.New(pvesim.Default())
	s := startServer(t, cluster)
	c := realClient(t, s)
	const vmid = 123456
	upid, err := c.Clone(t.Context(), "pve1", 9000, pve.CloneParams{NewID: vmid, Name: "proxy"})
	require.NoError(t, err)
	waitTask(t, t.Context(), c, upid)
	require.NoError(t, cluster.AddHAResource(t.Context(), pve.HAResourceParams{SID: "vm:123456", State: "stopped"}))

	resp, body := send(t, s, newRequest(t, s, http.MethodDelete, "/nodes/pve1/qemu/123456", nil))
	assert.Equal(t, "500 unable to remove VM 123456 - used in HA resources and purge parameter not set.", resp.Status, body)

	resp, body = send(t, s, newRequest(t, s, http.MethodDelete, "/nodes/pve1/qemu/123456?purge=1", nil))
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
}
