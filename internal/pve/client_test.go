package pve_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pve/pvefixture"
)

const (
	testSecret = "0d7c3a4e-5b6f-4a8d-9e1c-2f3a4b5c6d7e"
	testToken  = "pveflow@pve!worker=" + testSecret
)

// newServer starts a TLS test server on loopback that the test's client trusts.
func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	ts := httptest.NewTLSServer(h)
	t.Cleanup(ts.Close)
	return ts
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func certPEM(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// newClient builds a client for ts that trusts ts's certificate and reads testToken.
func newClient(t *testing.T, ts *httptest.Server, edit ...func(*pve.ClientConfig)) *pve.Client {
	t.Helper()
	cfg := pve.ClientConfig{
		URL:       ts.URL,
		TokenFile: writeFile(t, "token", testToken+"\n"),
		CAFile:    writeFile(t, "ca.pem", certPEM(ts.Certificate().Raw)),
	}
	for _, e := range edit {
		e(&cfg)
	}
	c, err := pve.NewClient(cfg)
	require.NoError(t, err)
	return c
}

// writeRaw answers with its own status line: net/http's server only writes standard reason
// phrases, and PVE puts its message there.
func writeRaw(t *testing.T, w http.ResponseWriter, status int, reason, body string) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Type: application/json;charset=UTF-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, reason, len(body), body)
	if err := buf.Flush(); err != nil {
		t.Errorf("write answer: %v", err)
	}
}

// serveFixture answers every request with a recorded PVE answer, byte for byte.
func serveFixture(t *testing.T, name string) http.HandlerFunc {
	f := pvefixture.Load(t, name)
	return func(w http.ResponseWriter, r *http.Request) {
		writeRaw(t, w, f.Status, f.Reason, f.Body)
	}
}

func serveJSON(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		io.WriteString(w, body)
	}
}

func TestClient_sendsTokenHeaderFromFileOnEveryRequest(t *testing.T) {
	var (
		mu      sync.Mutex
		headers []string
	)
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers = append(headers, r.Header.Get("Authorization"))
		mu.Unlock()
		serveJSON(`{"data":{"version":"9.2.11"}}`)(w, r)
	})
	tokenFile := writeFile(t, "token", "pveflow@pve!worker=first\n")
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.TokenFile = tokenFile })

	_, err := c.Version(t.Context())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(tokenFile, []byte("  pveflow@pve!rotated=second  \n"), 0o600))
	_, err = c.Version(t.Context())
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"PVEAPIToken=pveflow@pve!worker=first", "PVEAPIToken=pveflow@pve!rotated=second"}, headers)
}

func TestClient_missingTokenFileIsTransient(t *testing.T) {
	var called atomic.Bool
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) { called.Store(true) })
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.TokenFile = filepath.Join(t.TempDir(), "absent") })

	_, err := c.Version(t.Context())

	require.Error(t, err)
	assert.Equal(t, pve.Transient, pve.Classify(err))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.False(t, called.Load(), "no request without a token")
}

func TestClient_tokenFileOpenToOthersIsRefused(t *testing.T) {
	for _, tt := range []struct {
		mode   os.FileMode
		refuse bool
	}{
		{0o600, false},
		{0o400, false},
		{0o640, false},
		{0o440, false},
		{0o644, true},
		{0o604, true},
		{0o660, true},
		{0o666, true},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			var called atomic.Bool
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				called.Store(true)
				serveJSON(`{"data":{"version":"9.2.11"}}`)(w, r)
			})
			tokenFile := writeFile(t, "token", testToken+"\n")
			require.NoError(t, os.Chmod(tokenFile, tt.mode))
			c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.TokenFile = tokenFile })

			_, err := c.Version(t.Context())
			checkErr := pve.CheckTokenFile(tokenFile)

			if !tt.refuse {
				assert.NoError(t, err)
				assert.NoError(t, checkErr)
				return
			}
			require.Error(t, err)
			assert.Equal(t, pve.Transient, pve.Classify(err), "fixed by a chmod, without a new start")
			assert.Contains(t, err.Error(), fmt.Sprintf("proxmox api token file %s: mode %04o gives others access", tokenFile, tt.mode))
			assert.Contains(t, err.Error(), "chmod 600 "+tokenFile)
			assert.NotContains(t, err.Error(), testSecret)
			assert.False(t, called.Load(), "no request with a token others may read")
			require.Error(t, checkErr)
			assert.True(t, strings.HasPrefix(checkErr.Error(), fmt.Sprintf("mode %04o", tt.mode)), "the caller names the file: %v", checkErr)
		})
	}
}

func TestCheckTokenFile_errorsLeaveNamingTheFileToTheCaller(t *testing.T) {
	for name, tt := range map[string]struct{ content, want string }{
		"missing":     {"", "no such file or directory"},
		"unparsable":  {"s3cr3t-value", "want one line <user>@<realm>!<tokenid>=<secret>"},
		"a good file": {testToken + "\n", ""},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "absent")
			if tt.content != "" {
				path = writeFile(t, "token", tt.content)
			}

			err := pve.CheckTokenFile(path)

			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.EqualError(t, err, tt.want)
		})
	}
}

func TestClient_unparsableTokenFileIsPermanent(t *testing.T) {
	for name, content := range map[string]string{
		"no separators":    "s3cr3t-value",
		"no token id":      "pveflow@pve=s3cr3t-value",
		"no secret":        "pveflow@pve!worker",
		"empty secret":     "pveflow@pve!worker=",
		"no realm":         "pveflow!worker=s3cr3t-value",
		"two lines":        "pveflow@pve!worker=s3cr3t-value\nsecond@pve!x=y",
		"blank in between": "pveflow@pve!worker=s3cr3t value",
	} {
		t.Run(name, func(t *testing.T) {
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
			c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.TokenFile = writeFile(t, "token", content) })

			_, err := c.Version(t.Context())

			require.Error(t, err)
			assert.Equal(t, pve.Permanent, pve.Classify(err))
			assert.NotContains(t, err.Error(), "s3cr3t")
		})
	}
}

func TestClient_apiErrorFromStatusReasonAndBody(t *testing.T) {
	for _, name := range []string{
		"err_vm_missing",
		"err_vm_missing_pve82",
		"err_locked",
		"err_newid_in_use",
		"err_agent_not_running",
		"err_unauthorized",
		"err_forbidden",
		"err_bad_param",
		"err_not_implemented",
	} {
		t.Run(name, func(t *testing.T) {
			ts := newServer(t, serveFixture(t, name))
			c := newClient(t, ts)

			_, err := c.Clone(t.Context(), "pve1", 9000, pve.CloneParams{NewID: 123456})

			var apiErr *pve.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, pvefixture.Load(t, name).APIError(), apiErr)
			assert.Equal(t, "clone of VM 9000 on node pve1: "+apiErr.Error(), err.Error())
		})
	}
}

func TestClient_decodesDataEnvelope(t *testing.T) {
	ts := newServer(t, serveFixture(t, "node_status"))
	c := newClient(t, ts)

	got, err := c.NodeStatus(t.Context(), "pve1")

	require.NoError(t, err)
	assert.Equal(t, pve.NodeStatus{
		Uptime:     1728345,
		CPU:        0.0213,
		KVersion:   "Linux 6.17.2-1-pve #1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2026-10-14T09:12Z)",
		PVEVersion: "pve-manager/9.2.11/5d9b2f1c8a3e4076",
		Memory:     pve.MemoryStatus{Total: 67108864000, Used: 12884901888, Free: 54223962112},
		CPUInfo:    pve.NodeCPUInfo{Model: "Intel(R) Core(TM) i5-12500", CPUs: 12, Cores: 6, Sockets: 1},
		RootFS:     pve.StorageAmount{Total: 100861726720, Used: 9663676416, Avail: 86017880064},
	}, got)
}

func TestClient_decodesNumbersAndBooleansSentAsStrings(t *testing.T) {
	ts := newServer(t, serveJSON(`{"data":[{"id":"qemu/100","vmid":"100","node":"pve1","type":"qemu",
		"template":"1","maxmem":"2147483648","maxcpu":"2","uptime":"97"},
		{"id":"lxc/200","vmid":200,"type":"lxc","template":0,"maxcpu":0.5}]}`))
	c := newClient(t, ts)

	got, err := c.ClusterResources(t.Context())

	require.NoError(t, err)
	assert.Equal(t, []pve.VMResource{
		{ID: "qemu/100", VMID: 100, Node: "pve1", Type: "qemu", Template: true, MaxMem: 2147483648, MaxCPU: 2, Uptime: 97},
		{ID: "lxc/200", VMID: 200, Type: "lxc"},
	}, got)
}

func TestClient_decodesVMConfigScalarsAsStrings(t *testing.T) {
	ts := newServer(t, serveJSON(`{"data":{"cores":2,"memory":"2048","agent":1,"cpulimit":1.5,
		"balloon":1e3,"onboot":true,"protection":false,"name":"proxy-1","lock":null}}`))
	c := newClient(t, ts)

	got, err := c.VMConfig(t.Context(), "pve1", 123456)

	require.NoError(t, err)
	assert.Equal(t, pve.VMConfig{
		"cores":      "2",
		"memory":     "2048",
		"agent":      "1",
		"cpulimit":   "1.5",
		"balloon":    "1000",
		"onboot":     "1",
		"protection": "0",
		"name":       "proxy-1",
	}, got)
}

func TestClient_agentInterfacesAreTheResult(t *testing.T) {
	ts := newServer(t, serveFixture(t, "agent_network_get_interfaces"))
	c := newClient(t, ts)

	got, err := c.AgentNetworkInterfaces(t.Context(), "pve1", 123456)

	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, pve.AgentInterface{
		Name:            "ens18",
		HardwareAddress: "bc:24:11:2e:c5:4a",
		IPAddresses: []pve.AgentIPAddress{
			{Address: "192.168.2.57", Type: "ipv4", Prefix: 24},
			{Address: "2001:db8:2:0:be24:11ff:fe2e:c54a", Type: "ipv6", Prefix: 64},
			{Address: "fe80::be24:11ff:fe2e:c54a", Type: "ipv6", Prefix: 64},
		},
	}, got[1])
}

func TestClient_agentFileReadAsksForTheFileAndReturnsItsContent(t *testing.T) {
	var query url.Values
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.Query()
		serveFixture(t, "agent_file_read_result")(w, r)
	})
	c := newClient(t, ts)

	got, err := c.AgentFileRead(t.Context(), "pve1", 123456, "/run/cloud-init/result.json")

	require.NoError(t, err)
	assert.Equal(t, url.Values{"file": {"/run/cloud-init/result.json"}}, query)
	assert.JSONEq(t, `{"v1": {"datasource": "DataSourceNoCloud [seed=/dev/sr0]", "errors": []}}`, got)
}

func TestClient_agentFileReadOfAMissingFileIsPVEsAgentError(t *testing.T) {
	ts := newServer(t, serveFixture(t, "err_agent_file_missing"))
	c := newClient(t, ts)

	_, err := c.AgentFileRead(t.Context(), "pve1", 123456, "/run/cloud-init/result.json")

	var apiErr *pve.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, pvefixture.Load(t, "err_agent_file_missing").APIError(), apiErr)
	assert.Equal(t, "read of /run/cloud-init/result.json through the guest agent of VM 123456 on node pve1: "+apiErr.Error(), err.Error())
}

func TestClient_formEncodesWritesWithBooleansAsDigits(t *testing.T) {
	type request struct {
		method, contentType string
		form, query         map[string][]string
	}
	got := make(chan request, 1)
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		query := r.URL.Query()
		if err := r.ParseForm(); err != nil {
			t.Errorf("parse form: %v", err)
		}
		got <- request{r.Method, r.Header.Get("Content-Type"), r.PostForm, query}
		serveJSON(`{"data":"UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:pveflow@pve!worker:"}`)(w, r)
	})
	c := newClient(t, ts)

	upid, err := c.Clone(t.Context(), "pve1", 9000, pve.CloneParams{NewID: 123456, Name: "proxy-1", Full: true, Storage: "local-lvm"})

	require.NoError(t, err)
	assert.Equal(t, pve.UPID("UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:pveflow@pve!worker:"), upid)
	assert.Equal(t, request{
		method:      http.MethodPost,
		contentType: "application/x-www-form-urlencoded",
		form:        map[string][]string{"newid": {"123456"}, "name": {"proxy-1"}, "full": {"1"}, "storage": {"local-lvm"}},
		query:       map[string][]string{},
	}, <-got)
}

func TestClient_http1Only(t *testing.T) {
	protos := make(chan string, 1)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos <- r.Proto
		serveJSON(`{"data":{}}`)(w, r)
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	require.Contains(t, ts.TLS.NextProtos, "h2", "the server must offer HTTP/2 for the test to mean anything")
	c := newClient(t, ts)

	_, err := c.Version(t.Context())

	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1", <-protos)
}

// blockingServer holds every request until the client gives up on it.
func blockingServer(t *testing.T, arrived chan<- struct{}) *httptest.Server {
	release := make(chan struct{})
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	return ts
}

func TestClient_requestTimeoutIsTransient(t *testing.T) {
	ts := blockingServer(t, make(chan struct{}, 1))
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.RequestTimeout = 100 * time.Millisecond })

	_, err := c.VMStatus(t.Context(), "pve1", 123456)

	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, pve.Transient, pve.Classify(err))
	// Where the deadline meets the request (waiting for the answer, or reading a body the
	// server cut short as the connection went) decides the middle of the text, not its sense.
	assert.Regexp(t, `^status of VM 123456 on node pve1: (read answer: )?no answer within 100ms: context deadline exceeded`, err.Error())
}

func TestClient_cancelledContextReturnsPromptly(t *testing.T) {
	arrived := make(chan struct{}, 1)
	ts := blockingServer(t, arrived)
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.RequestTimeout = time.Hour })
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)

	go func() {
		_, err := c.Start(ctx, "pve1", 123456)
		errc <- err
	}()
	<-arrived
	cancel()

	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, pve.Transient, pve.Classify(err))
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not return after its context was cancelled")
	}
}

func TestClient_tokenNeverInErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		reason string
		body   string
	}{
		{"401 echoing the header", 401, "invalid token PVEAPIToken=" + testToken, "PVEAPIToken=" + testToken},
		{"500 echoing the secret", 500, "token " + testSecret + " refused", `{"data":null,"message":"token ` + testSecret + ` refused\n"}`},
		{"400 naming the secret", 400, "Parameter verification failed.",
			`{"data":null,"errors":{"` + testSecret + `":"bad value ` + testSecret + `"},"message":"Parameter verification failed.\n"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) { writeRaw(t, w, tt.status, tt.reason, tt.body) })
			c := newClient(t, ts)

			_, err := c.Destroy(t.Context(), "pve1", 123456)

			var apiErr *pve.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, tt.status, apiErr.Status)
			assert.Contains(t, err.Error(), "[redacted]")
			assert.NotContains(t, err.Error(), testSecret)
			assert.NotContains(t, err.Error(), "purge")
		})
	}
}

func TestClient_caFileTrustsPrivateCA(t *testing.T) {
	ts := newServer(t, serveFixture(t, "version"))
	c := newClient(t, ts)

	got, err := c.Version(t.Context())

	require.NoError(t, err)
	assert.Equal(t, pve.Version{Version: "9.2.11", Release: "9.2", RepoID: "5d9b2f1c8a3e4076"}, got)
}

// otherCA is a self-signed CA certificate that signed nothing the test servers use.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "some other CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return certPEM(der)
}

func TestClient_unknownCAIsRejected(t *testing.T) {
	var called atomic.Bool
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called.Store(true) }))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	ts.StartTLS()
	t.Cleanup(ts.Close)
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.CAFile = writeFile(t, "other.pem", otherCA(t)) })

	_, err := c.Version(t.Context())

	var unknown x509.UnknownAuthorityError
	assert.ErrorAs(t, err, &unknown)
	assert.False(t, called.Load())
}

func TestClient_insecureSkipsVerificationAndWarns(t *testing.T) {
	ts := newServer(t, serveFixture(t, "version"))
	var logs bytes.Buffer
	c := newClient(t, ts, func(cfg *pve.ClientConfig) {
		cfg.CAFile = ""
		cfg.InsecureSkipTLSVerify = true
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})

	_, err := c.Version(t.Context())

	require.NoError(t, err)
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "insecureSkipTLSVerify")
}

func TestNewClient_rejectsBadConfig(t *testing.T) {
	token := writeFile(t, "token", testToken)
	tests := []struct {
		name string
		cfg  pve.ClientConfig
		want string
	}{
		{"unparsable URL", pve.ClientConfig{URL: "https://pve1:8006/%zz", TokenFile: token}, "proxmox api url"},
		{"URL without scheme", pve.ClientConfig{URL: "pve1:8006", TokenFile: token}, "want https://host[:port]"},
		{"URL with a query", pve.ClientConfig{URL: "https://pve1:8006/?x=1", TokenFile: token}, "want https://host[:port]"},
		{"no token file", pve.ClientConfig{URL: "https://pve1:8006"}, "token file not set"},
		{"unreadable CA file", pve.ClientConfig{URL: "https://pve1:8006", TokenFile: token, CAFile: filepath.Join(t.TempDir(), "absent.pem")}, "CA file"},
		{"CA file without PEM", pve.ClientConfig{URL: "https://pve1:8006", TokenFile: token, CAFile: token}, "no PEM certificate"},
		{"negative timeout", pve.ClientConfig{URL: "https://pve1:8006", TokenFile: token, RequestTimeout: -time.Second}, "negative"},
		{"negative call rate", pve.ClientConfig{URL: "https://pve1:8006", TokenFile: token, Limits: pve.CallLimits{PerSecond: -1}}, "calls per second"},
		{"negative call concurrency", pve.ClientConfig{URL: "https://pve1:8006", TokenFile: token, Limits: pve.CallLimits{Concurrency: -1}}, "concurrent calls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pve.NewClient(tt.cfg)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestNewClient_doesNotDial(t *testing.T) {
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close()

	_, err := pve.NewClient(pve.ClientConfig{URL: url, TokenFile: filepath.Join(t.TempDir(), "not-yet")})

	assert.NoError(t, err)
}

// Every request goes through the call limits, an upload included, and each one they hold back
// is reported with the API method that sent it.
func TestClient_callLimitsHoldEveryKindOfRequest(t *testing.T) {
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		writeRaw(t, w, http.StatusOK, "OK", `{"data":"UPID:pve1:00001A2B:0001E240:6B005320:imgcopy::pveflow@pve!worker:"}`)
	})
	var held []string
	c := newClient(t, ts, func(cfg *pve.ClientConfig) {
		cfg.Limits = pve.CallLimits{PerSecond: 2} // a burst of two, then 500 ms apart: far longer than a call here
		cfg.ObserveHeld = func(method string, d time.Duration) {
			assert.Positive(t, d)
			held = append(held, method)
		}
	})

	_, err := c.Start(t.Context(), "pve1", 123456)
	require.NoError(t, err)
	_, err = c.Start(t.Context(), "pve1", 123456)
	require.NoError(t, err)
	_, err = c.UploadISO(t.Context(), "pve1", "local", "seed.iso", strings.NewReader("CD001"), 5)
	require.NoError(t, err)
	_, err = c.Stop(t.Context(), "pve1", 123456)
	require.NoError(t, err)

	assert.Equal(t, []string{"UploadISO", "Stop"}, held)
}

func TestClient_wrapTransportSeesEveryRequest(t *testing.T) {
	ts := newServer(t, serveFixture(t, "version"))
	var wrapped []string
	c := newClient(t, ts, func(cfg *pve.ClientConfig) {
		cfg.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				wrapped = append(wrapped, r.Method+" "+r.URL.Path)
				return next.RoundTrip(r)
			})
		}
	})

	_, err := c.Version(t.Context())

	require.NoError(t, err)
	assert.Equal(t, []string{"GET /api2/json/version"}, wrapped)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestClient_uploadIsMultipartWithContentFirstAndContentLength(t *testing.T) {
	type part struct{ formName, fileName, data string }
	type upload struct {
		contentLength int64
		bodyLength    int
		chunked       bool
		parts         []part
	}
	got := make(chan upload, 1)
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read upload: %v", err)
		}
		u := upload{contentLength: r.ContentLength, bodyLength: len(body), chunked: len(r.TransferEncoding) > 0}
		_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil {
			t.Errorf("content type: %v", err)
		}
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("next part: %v", err)
				}
				break
			}
			data, _ := io.ReadAll(p)
			u.parts = append(u.parts, part{p.FormName(), p.FileName(), string(data)})
		}
		got <- u
		writeRaw(t, w, 200, "OK", pvefixture.Load(t, "upload_response").Body)
	})
	c := newClient(t, ts)
	iso := strings.Repeat("CD001\x00seed", 20000)

	// A reader that is neither a bytes.Reader nor seekable, as the ISO builder's output may be.
	upid, err := c.UploadISO(t.Context(), "pve1", "local", "proxy-1-seed.iso", io.MultiReader(strings.NewReader(iso)), int64(len(iso)))

	require.NoError(t, err)
	assert.Equal(t, pve.UPID("UPID:pve1:000B4391:0A4D4B24:6B005360:imgcopy::pveflow@pve!worker:"), upid)
	u := <-got
	assert.False(t, u.chunked)
	assert.Equal(t, int64(u.bodyLength), u.contentLength)
	assert.Equal(t, []part{
		{formName: "content", data: "iso"},
		{formName: "filename", fileName: "proxy-1-seed.iso", data: iso},
	}, u.parts)
}

func TestClient_uploadSizeMismatchFails(t *testing.T) {
	const iso = "0123456789abcdef"
	tests := []struct {
		name string
		size int64
		want string
	}{
		{"reader shorter than size", int64(len(iso)) + 4, "ISO reader ended after 16 of the declared 20 bytes"},
		{"reader longer than size", int64(len(iso)) - 4, "ISO reader yields more than the declared 12 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
			})
			c := newClient(t, ts)

			_, err := c.UploadISO(t.Context(), "pve1", "local", "a.iso", strings.NewReader(iso), tt.size)

			assert.EqualError(t, err, "upload of ISO a.iso to storage local on node pve1: "+tt.want)
		})
	}
}

func TestClient_destroyQueryFlags(t *testing.T) {
	type request struct {
		method, path string
		query        map[string][]string
		bodyLength   int64
	}
	got := make(chan request, 1)
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got <- request{r.Method, r.URL.Path, r.URL.Query(), r.ContentLength}
		serveJSON(`{"data":"UPID:pve1:000B4401:0A4D4B24:6B005400:qmdestroy:123456:pveflow@pve!worker:"}`)(w, r)
	})
	c := newClient(t, ts)

	_, err := c.Destroy(t.Context(), "pve1", 123456)

	require.NoError(t, err)
	assert.Equal(t, request{
		method: http.MethodDelete,
		path:   "/api2/json/nodes/pve1/qemu/123456",
		query:  map[string][]string{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}},
	}, <-got)
}

func TestClient_rebootPostsAndAnswersTheTask(t *testing.T) {
	path := make(chan string, 1)
	f := pvefixture.Load(t, "reboot_response")
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		path <- r.Method + " " + r.URL.Path
		writeRaw(t, w, f.Status, f.Reason, f.Body)
	})
	c := newClient(t, ts)

	upid, err := c.Reboot(t.Context(), "pve1", 123456)

	require.NoError(t, err)
	assert.Equal(t, "POST /api2/json/nodes/pve1/qemu/123456/status/reboot", <-path)
	info, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	assert.Equal(t, "qmreboot", info.Type)
	assert.Equal(t, "123456", info.ID)
}

func TestClient_rebootOfAStoppedVMIsNotRunning(t *testing.T) {
	ts := newServer(t, serveFixture(t, "err_reboot_not_running"))
	c := newClient(t, ts)

	_, err := c.Reboot(t.Context(), "pve1", 123456)

	assert.Equal(t, pve.NotRunning, pve.Classify(err))
	assert.ErrorContains(t, err, "reboot of VM 123456 on node pve1")
	assert.ErrorContains(t, err, "VM 123456 not running")
}

func TestClient_deleteVolumeNullDataIsEmptyUPID(t *testing.T) {
	ts := newServer(t, serveFixture(t, "content_delete_null"))
	c := newClient(t, ts)

	upid, err := c.DeleteVolume(t.Context(), "pve1", "local", "local:iso/proxy-1-seed.iso")

	require.NoError(t, err)
	assert.Empty(t, upid)
}

func TestClient_storageContentDecodesPerlScalarsAndFiltersByContent(t *testing.T) {
	query := make(chan url.Values, 1)
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		query <- r.URL.Query()
		// PVE 9's answer for a directory storage: ctime and size as numbers or strings.
		serveJSON(`{"data":[{"volid":"local:iso/proxy-1-seed.iso","content":"iso","format":"iso","size":"382976","ctime":1796212800}]}`)(w, r)
	})
	c := newClient(t, ts)

	vols, err := c.StorageContent(t.Context(), "pve1", "local", "iso")

	require.NoError(t, err)
	assert.Equal(t, url.Values{"content": {"iso"}}, <-query)
	assert.Equal(t, []pve.StorageVolume{{VolID: "local:iso/proxy-1-seed.iso", Content: "iso", Format: "iso", Size: 382976, CTime: 1796212800}}, vols)
}

func TestClient_pathSegmentsEscaped(t *testing.T) {
	const upid = "UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:pveflow@pve!worker:"
	tests := []struct {
		name string
		call func(context.Context, *pve.Client) error
		want string
	}{
		{
			name: "volume ID",
			call: func(ctx context.Context, c *pve.Client) error {
				_, err := c.DeleteVolume(ctx, "pve1", "local", "local:iso/x-seed.iso")
				return err
			},
			want: "/api2/json/nodes/pve1/storage/local/content/local:iso%2Fx-seed.iso",
		},
		{
			name: "UPID",
			call: func(ctx context.Context, c *pve.Client) error {
				_, err := c.TaskStatus(ctx, "pve1", upid)
				return err
			},
			want: "/api2/json/nodes/pve1/tasks/UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:pveflow@pve%21worker:/status",
		},
		{
			name: "node name",
			call: func(ctx context.Context, c *pve.Client) error {
				_, err := c.NodeStatus(ctx, "pve1/../cluster?x")
				return err
			},
			want: "/api2/json/nodes/pve1%2F..%2Fcluster%3Fx/status",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths := make(chan string, 1)
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				paths <- r.URL.EscapedPath()
				serveJSON(`{"data":null}`)(w, r)
			})
			c := newClient(t, ts)

			require.NoError(t, tt.call(t.Context(), c))
			assert.Equal(t, tt.want, <-paths)
		})
	}
}

// observed is one request as ClientConfig.ObserveRequest was told of it.
type observed struct {
	method, class string
	took          time.Duration
}

// observer records what ObserveRequest is told, which happens on the calling goroutine.
type observer struct{ requests []observed }

func (o *observer) observe(method, class string, took time.Duration) {
	o.requests = append(o.requests, observed{method, class, took})
}

func TestClient_observesEachRequestByAPIMethodAndStatusClass(t *testing.T) {
	clone := func(ctx context.Context, c *pve.Client) error {
		_, err := c.Clone(ctx, "pve1", 9000, pve.CloneParams{NewID: 123456})
		return err
	}
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		call       func(context.Context, *pve.Client) error
		wantMethod string
		wantClass  string
	}{
		{
			name:       "answered",
			handler:    serveJSON(`{"data":"UPID:pve1:00001234:00005678:6650A1B2:qmclone:9000:pveflow@pve!worker:"}`),
			call:       clone,
			wantMethod: "Clone",
			wantClass:  "2xx",
		},
		{
			name:       "refused",
			handler:    serveFixture(t, "err_forbidden"),
			call:       clone,
			wantMethod: "Clone",
			wantClass:  "4xx",
		},
		{
			name:    "failed",
			handler: serveFixture(t, "err_vm_missing"),
			call: func(ctx context.Context, c *pve.Client) error {
				_, err := c.VMConfig(ctx, "pve1", 123456)
				return err
			},
			wantMethod: "VMConfig",
			wantClass:  "5xx",
		},
		{
			name: "connection cut before an answer",
			handler: func(w http.ResponseWriter, r *http.Request) {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
			},
			call: func(ctx context.Context, c *pve.Client) error {
				_, err := c.TaskStatus(ctx, "pve1", "UPID:pve1:00001234:00005678:6650A1B2:qmclone:9000:pveflow@pve!worker:")
				return err
			},
			wantMethod: "TaskStatus",
			wantClass:  "error",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o observer
			c := newClient(t, newServer(t, tt.handler), func(cfg *pve.ClientConfig) { cfg.ObserveRequest = o.observe })

			_ = tt.call(t.Context(), c)

			require.Len(t, o.requests, 1)
			assert.Equal(t, tt.wantClass, o.requests[0].class)
			assert.Equal(t, tt.wantMethod, o.requests[0].method)
			assert.Positive(t, o.requests[0].took)
		})
	}
}

func TestClient_observesUploads(t *testing.T) {
	var o observer
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		serveJSON(`{"data":"UPID:pve1:00001234:00005678:6650A1B2:imgcopy::pveflow@pve!worker:"}`)(w, r)
	})
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.ObserveRequest = o.observe })

	_, err := c.UploadISO(t.Context(), "pve1", "local", "seed.iso", strings.NewReader("iso"), 3)
	require.NoError(t, err)

	require.Len(t, o.requests, 1)
	assert.Equal(t, "UploadISO", o.requests[0].method)
	assert.Equal(t, "2xx", o.requests[0].class)
}

func TestClient_requestWithoutTokenIsNotObserved(t *testing.T) {
	var o observer
	c := newClient(t, newServer(t, serveJSON(`{"data":{}}`)), func(cfg *pve.ClientConfig) {
		cfg.ObserveRequest = o.observe
		cfg.TokenFile = filepath.Join(t.TempDir(), "absent")
	})

	_, err := c.Version(t.Context())

	require.Error(t, err)
	assert.Empty(t, o.requests, "no request was sent")
}

func TestStatusClass(t *testing.T) {
	tests := []struct {
		status int
		want   string
	}{
		{0, "error"},
		{200, "2xx"},
		{299, "2xx"},
		{302, "3xx"},
		{401, "4xx"},
		{500, "5xx"},
		{596, "5xx"},
		{600, "error"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, pve.StatusClass(tt.status), "status %d", tt.status)
	}
}

// debugLogger logs everything, debug included, to w as JSON lines.
func debugLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// logLines decodes the JSON lines logged to logs so far, without their time and duration, and
// empties logs.
func logLines(t *testing.T, logs *bytes.Buffer) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		assert.Positive(t, m["duration"], "duration")
		delete(m, "time")
		delete(m, "duration")
		lines = append(lines, m)
	}
	logs.Reset()
	return lines
}

func TestClient_logsOneDebugLinePerRequestWithoutSecrets(t *testing.T) {
	const (
		sentinel = "user-data-sentinel-5e1f"
		upid     = "UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:pveflow@pve!worker:"
	)
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/clone"):
			serveJSON(`{"data":"`+upid+`"}`)(w, r)
		case strings.HasSuffix(r.URL.Path, "/status/current"):
			writeRaw(t, w, 500, "VM 4242 not running", `{"data":null}`)
		default:
			serveJSON(`{"data":null}`)(w, r)
		}
	})
	var logs bytes.Buffer
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.Logger = debugLogger(&logs) })
	ctx := t.Context()

	_, err := c.Clone(ctx, "pve1", 9000, pve.CloneParams{NewID: 4242, Name: "proxy-1", Description: sentinel})
	require.NoError(t, err)
	_, err = c.TaskStatus(ctx, "pve1", upid)
	require.NoError(t, err)
	require.NoError(t, c.SetVMConfig(ctx, "pve1", 4242, pve.VMConfig{"description": sentinel}))
	_, err = c.UploadISO(ctx, "pve1", "local", "proxy-1-seed.iso", strings.NewReader(sentinel), int64(len(sentinel)))
	require.NoError(t, err)
	_, err = c.VMStatus(ctx, "pve1", 4242)
	require.Error(t, err)

	text := logs.String()
	assert.Equal(t, []map[string]any{
		{"level": "DEBUG", "msg": "proxmox request", "method": "POST", "path": "/nodes/{node}/qemu/{vmid}/clone",
			"node": "pve1", "vmid": 9000.0, "upid": upid, "status": 200.0},
		{"level": "DEBUG", "msg": "proxmox request", "method": "GET", "path": "/nodes/{node}/tasks/{upid}/status",
			"node": "pve1", "upid": upid, "status": 200.0},
		{"level": "DEBUG", "msg": "proxmox request", "method": "PUT", "path": "/nodes/{node}/qemu/{vmid}/config",
			"node": "pve1", "vmid": 4242.0, "status": 200.0},
		{"level": "DEBUG", "msg": "proxmox request", "method": "POST", "path": "/nodes/{node}/storage/{storage}/upload",
			"node": "pve1", "status": 200.0},
		{"level": "DEBUG", "msg": "proxmox request", "method": "GET", "path": "/nodes/{node}/qemu/{vmid}/status/current",
			"node": "pve1", "vmid": 4242.0, "status": 500.0, "error": err.Error()},
	}, logLines(t, &logs))
	assert.NotContains(t, text, sentinel)
	assert.NotContains(t, text, testSecret)
	assert.NotContains(t, text, "PVEAPIToken")
}

func TestClient_logsARequestWithNoAnswerWithItsError(t *testing.T) {
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	url := ts.URL
	ts.Close() // nothing answers there now
	var logs bytes.Buffer
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.URL, cfg.Logger = url, debugLogger(&logs) })

	_, err := c.VMConfig(t.Context(), "pve1", 4242)

	require.Error(t, err)
	assert.Equal(t, []map[string]any{
		{"level": "DEBUG", "msg": "proxmox request", "method": "GET", "path": "/nodes/{node}/qemu/{vmid}/config",
			"node": "pve1", "vmid": 4242.0, "status": 0.0, "error": err.Error()},
	}, logLines(t, &logs))
}

func TestClient_logsNothingPerRequestAtInfo(t *testing.T) {
	ts := newServer(t, serveJSON(`{"data":{"version":"9.2.11"}}`))
	var logs bytes.Buffer
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })

	_, err := c.Version(t.Context())

	require.NoError(t, err)
	assert.Empty(t, logs.String())
}
