//go:build integration

package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/telemetry"
	"github.com/pveflow/pveflow/internal/telemetry/export"
	"github.com/pveflow/pveflow/internal/telemetry/spantest"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

// The variables that name the host and what the test may use on it (docs/proxmox.md).
const (
	envURL          = "PROXMOX_TEST_URL"
	envTokenFile    = "PROXMOX_TEST_TOKEN_FILE"
	envNode         = "PROXMOX_TEST_NODE"
	envTemplateVMID = "PROXMOX_TEST_TEMPLATE_VMID"
	envISOStorage   = "PROXMOX_TEST_ISO_STORAGE"
	envCAFile       = "PROXMOX_TEST_CA_FILE"
	envInsecure     = "PROXMOX_TEST_INSECURE"
	envBridge       = "PROXMOX_TEST_BRIDGE"
	envStorage      = "PROXMOX_TEST_STORAGE"
	envVMIDMin      = "PROXMOX_TEST_VMID_MIN"
	envVMIDMax      = "PROXMOX_TEST_VMID_MAX"
	envTimeout      = "PROXMOX_TEST_TIMEOUT"
	envKeep         = "PROXMOX_TEST_KEEP"
	envLogLevel     = "PROXMOX_TEST_LOG_LEVEL"
)

var (
	requiredVars = []string{envURL, envTokenFile, envNode, envTemplateVMID, envISOStorage}
	optionalVars = []string{envCAFile, envInsecure, envBridge, envStorage, envVMIDMin, envVMIDMax, envTimeout, envKeep, envLogLevel}
)

// defaultTimeout bounds a test when PROXMOX_TEST_TIMEOUT is unset: a clone, a boot and a
// cloud-init run that installs the guest agent, on a small host.
const defaultTimeout = 15 * time.Minute

// teardownTimeout bounds the delete of a test that failed before its own delete ran. It is
// apart from PROXMOX_TEST_TIMEOUT, which may be what ran out.
const teardownTimeout = 10 * time.Minute

// The catalogue entries of the configuration the test makes.
const (
	image       = "integration"
	machineType = "integration"
)

// guestPort is the port the test tries on the guest: sshd's, which most templates run.
const guestPort = "22"

// hostEnv is the host the PROXMOX_TEST_* variables describe.
type hostEnv struct {
	URL, TokenFile, CAFile string
	Insecure               bool
	Node, ISOStorage       string
	TemplateVMID           int
	Bridge, Storage        string
	VMIDRange              config.VMIDRange
	Timeout                time.Duration
	// Keep leaves the proxy on the host and prints the commands that remove it.
	Keep bool
	// LogLevel is the worker's: debug shows every activity attempt, each poll of a task among
	// them.
	LogLevel slog.Level
}

// loadHostEnv reads the PROXMOX_TEST_* variables. The test is opt-in: without PROXMOX_TEST_URL
// it skips. With it, a missing required variable or an unreadable value fails the test, naming
// every variable.
func loadHostEnv(t *testing.T) hostEnv {
	t.Helper()
	if os.Getenv(envURL) == "" {
		t.Skipf("%s is unset: the real-host test runs only when asked (make test-integration-proxmox, see docs/proxmox.md)", envURL)
	}
	var missing []string
	for _, name := range requiredVars {
		if os.Getenv(name) == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the real-host test needs %s. Required: %s. Optional: %s. See docs/proxmox.md.",
			strings.Join(missing, ", "), strings.Join(requiredVars, ", "), strings.Join(optionalVars, ", "))
	}
	var p envParser
	defaults := config.Default().Proxmox.VMIDRange
	e := hostEnv{
		URL:          os.Getenv(envURL),
		TokenFile:    os.Getenv(envTokenFile),
		CAFile:       os.Getenv(envCAFile),
		Insecure:     p.bool(envInsecure),
		Node:         os.Getenv(envNode),
		ISOStorage:   os.Getenv(envISOStorage),
		TemplateVMID: p.int(envTemplateVMID, 0),
		Bridge:       os.Getenv(envBridge),
		Storage:      os.Getenv(envStorage),
		VMIDRange:    config.VMIDRange{Min: p.int(envVMIDMin, defaults.Min), Max: p.int(envVMIDMax, defaults.Max)},
		Timeout:      p.duration(envTimeout, defaultTimeout),
		Keep:         p.bool(envKeep),
		LogLevel:     p.level(envLogLevel),
	}
	if err := errors.Join(p.errs...); err != nil {
		t.Fatalf("PROXMOX_TEST_* variables:\n%v", err)
	}
	return e
}

// envParser reads typed variables, collecting every bad value.
type envParser struct{ errs []error }

func (p *envParser) int(name string, unset int) int {
	s := os.Getenv(name)
	if s == "" {
		return unset
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q is not a whole number", name, s))
	}
	return n
}

func (p *envParser) bool(name string) bool {
	s := os.Getenv(name)
	if s == "" {
		return false
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q is not a boolean (1, true, 0, false)", name, s))
	}
	return b
}

func (p *envParser) level(name string) slog.Level {
	var l slog.Level
	if s := os.Getenv(name); s != "" {
		if err := l.UnmarshalText([]byte(s)); err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s=%q is not a log level (debug, info, warn, error)", name, s))
		}
	}
	return l
}

func (p *envParser) duration(name string, unset time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return unset
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.errs = append(p.errs, fmt.Errorf("%s=%q is not a positive duration such as 20m", name, s))
	}
	return d
}

// config is pveflow's configuration for the host: one node, one template, a small machine type,
// the production budgets and poll policy.
func (e hostEnv) config(t *testing.T) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Proxmox.URL, cfg.Proxmox.TokenFile = e.URL, e.TokenFile
	cfg.Proxmox.CAFile, cfg.Proxmox.InsecureSkipTLSVerify = e.CAFile, e.Insecure
	cfg.Proxmox.Nodes = []string{e.Node}
	cfg.Proxmox.ISOStorage, cfg.Proxmox.Storage, cfg.Proxmox.Bridge = e.ISOStorage, e.Storage, e.Bridge
	cfg.Proxmox.VMIDRange = e.VMIDRange
	cfg.Proxmox.Templates = map[string]config.Template{image: {VMID: e.TemplateVMID}}
	cfg.Proxmox.MachineTypes = map[string]config.MachineType{machineType: {Cores: 1, MemoryMiB: 1024}}
	require.NoError(t, cfg.Validate(), "the configuration the PROXMOX_TEST_* variables make")
	return cfg
}

// client is a Proxmox API client of the host, its transport wrapped by wrap when it is not nil.
func (e hostEnv) client(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper) pve.API {
	t.Helper()
	api, err := pve.NewClient(pve.ClientConfig{
		URL: e.URL, TokenFile: e.TokenFile, CAFile: e.CAFile, InsecureSkipTLSVerify: e.Insecure, WrapTransport: wrap,
	})
	require.NoError(t, err)
	return api
}

// onLoopback reports whether the API is on this machine: a simulator (pvesim), whose guests'
// addresses are made up and belong to no one.
func (e hostEnv) onLoopback() bool {
	u, err := url.Parse(e.URL)
	if err != nil {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	addr, err := netip.ParseAddr(u.Hostname())
	return err == nil && addr.IsLoopback()
}

// harness is pveflow as a worker runs it, against the host: a Temporal dev server
// (bin/pveflow-temporal as a child process, internal/testserver), a worker with the workflows and
// the activities on the real client, traced into a span recorder, and the starter an operator
// uses. The test reads the host directly, for what it asserts, through observer.
type harness struct {
	env      hostEnv
	starter  *starter.Client
	spans    *tracetest.SpanRecorder
	observer pve.API
}

func startHarness(t *testing.T, e hostEnv) *harness {
	t.Helper()
	cfg := e.config(t)
	spans := tracetest.NewSpanRecorder()
	tp := export.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tracing, err := telemetry.TracingInterceptor(tp)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: e.LogLevel}))
	server := testserver.New(t, testserver.WithBaseClientOptions(client.Options{
		Interceptors: []interceptor.ClientInterceptor{tracing},
		Logger:       tlog.NewStructuredLogger(logger),
	}))
	api := e.client(t, export.PVETransport(tp))
	server.NewWorker(core.DefaultTaskQueue, func(r worker.Registry) {
		(&workflows.Workflows{Config: cfg}).Register(r)
		entities := starter.EntityProxies{Client: starter.New(server.Client(), core.DefaultTaskQueue, starter.WithNamespace(server.Namespace()))}
		r.RegisterActivity(&activities.Activities{API: api, Proxmox: cfg.Proxmox, Runs: &activities.TemporalRuns{Client: server.Client()}, Proxies: entities})
	})
	t.Logf("pveflow on a Temporal dev server at %s, against %s node %s", server.Address(), e.URL, e.Node)
	return &harness{
		env:      e,
		starter:  starter.New(server.Client(), core.DefaultTaskQueue, starter.WithNamespace(server.Namespace())),
		spans:    spans,
		observer: e.client(t, nil),
	}
}

// requireHealthy runs CheckHealth and requires the node healthy, with what the check read.
func (h *harness) requireHealthy(ctx context.Context, t *testing.T) {
	t.Helper()
	res, err := h.starter.CheckHealth(ctx)
	require.NoError(t, err)
	require.Len(t, res.Nodes, 1)
	node := res.Nodes[0]
	t.Logf("CheckHealth: %s healthy=%t %v", node.Name, node.Healthy, node.Details)
	assert.Equal(t, h.env.Node, node.Name)
	require.True(t, node.Healthy, "%s: %s", node.Reason, node.Message)
	assert.NotEmpty(t, node.Details["pveVersion"])
	_, err = strconv.ParseUint(node.Details["isoStorageAvailGiB"], 10, 64)
	assert.NoError(t, err, "isoStorageAvailGiB")
	assert.Equal(t, "1/1", node.Details["templates"])
}

// vmsInRange are the VMs in cluster resources whose VMIDs are in the test's range.
func (h *harness) vmsInRange(ctx context.Context, t *testing.T) []pve.VMResource {
	t.Helper()
	all, err := h.observer.ClusterResources(ctx)
	require.NoError(t, err)
	var in []pve.VMResource
	for _, r := range all {
		if r.VMID >= h.env.VMIDRange.Min && r.VMID <= h.env.VMIDRange.Max {
			in = append(in, r)
		}
	}
	return in
}

// create asks the proxy of in.UID to be created and waits for its result.
func (h *harness) create(ctx context.Context, t *testing.T, in proxyvm.ProxySpec) proxyvm.CreateProxyResult {
	t.Helper()
	req, err := h.starter.Create(ctx, in)
	require.NoError(t, err)
	var res proxyvm.CreateProxyResult
	require.NoError(t, req.Get(ctx, &res), "create of proxy %s", in.UID)
	return res
}

// delete asks the proxy of uid to be deleted and waits for its result.
func (h *harness) delete(ctx context.Context, uid string) (proxyvm.DeleteProxyResult, error) {
	req, err := h.starter.Delete(ctx, proxyvm.DeleteProxyInput{UID: uid})
	if err != nil {
		return proxyvm.DeleteProxyResult{}, err
	}
	var res proxyvm.DeleteProxyResult
	return res, req.Get(ctx, &res)
}

// awaitRunning asks GetProxy until the proxy is Running. Cluster resources, which GetProxy reads
// the status from, lag by seconds: until it has seen the VM, GetProxy fails Transient.
func (h *harness) awaitRunning(ctx context.Context, t *testing.T, uid string) proxyvm.GetProxyResult {
	t.Helper()
	for {
		got, err := h.starter.GetProxy(ctx, uid)
		switch {
		case err == nil && got.State == proxy.Running:
			return got
		case err != nil && !errors.Is(err, starter.ErrTransient):
			require.NoError(t, err)
		}
		t.Logf("GetProxy: %s %v; asking again", got.State, err)
		select {
		case <-ctx.Done():
			require.FailNow(t, "the proxy did not reach Running", "%s: %v", envTimeout, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// probeGuest tries a TCP connection to the guest's guestPort and logs how it went. It asserts
// nothing: whether the template runs sshd, and whether this machine routes to the guest's
// network, are the host's business. The guests of a simulator are not dialled: their addresses
// are made up.
func (h *harness) probeGuest(ctx context.Context, t *testing.T, ipv4 string) {
	t.Helper()
	if h.env.onLoopback() {
		t.Logf("guest probe skipped: %s is on loopback, a simulator whose guest address %s belongs to no one", h.env.URL, ipv4)
		return
	}
	target := net.JoinHostPort(ipv4, guestPort)
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dialCtx, "tcp", target)
	if err != nil {
		t.Logf("guest probe: %s: %v (not a failure)", target, err)
		return
	}
	_ = conn.Close()
	t.Logf("guest probe: %s accepts connections", target)
}

// printKeepCommands says how to remove what a kept run left on the host: the VM (found by
// vmid, or by name in cluster resources when the create did not say) and the seed ISO.
func (h *harness) printKeepCommands(t *testing.T, vmid int, name string) {
	t.Helper()
	if vmid == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		all, err := h.observer.ClusterResources(ctx)
		if err != nil {
			t.Logf("%s: cannot look for VM %s: %v", envKeep, name, err)
		}
		for _, r := range all {
			if r.Name == name {
				vmid = r.VMID
			}
		}
	}
	commands := []string{"pvesm free " + proxy.SeedVolID(h.env.ISOStorage, name)}
	if vmid != 0 {
		commands = append([]string{
			fmt.Sprintf("qm stop %d", vmid),
			fmt.Sprintf("qm destroy %d --purge 1 --destroy-unreferenced-disks 1", vmid),
		}, commands...)
	} else {
		t.Logf("%s: no VM named %s found", envKeep, name)
	}
	t.Logf("%s is set: the proxy stays. To remove it, on node %s:\n  %s", envKeep, h.env.Node, strings.Join(commands, "\n  "))
}

// createTraces are the trace IDs of the CreateProxy runs the harness started.
func (h *harness) createTraces() map[string]bool {
	traces := map[string]bool{}
	for _, s := range h.spans.Ended() {
		if s.Name() == "StartWorkflow:"+core.CreateProxyName {
			traces[s.SpanContext().TraceID().String()] = true
		}
	}
	return traces
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestProxmox_lifecycle creates a proxy on the host, reads it, and deletes it, through the
// workflows, asserting each step in order; a step that fails stops the test, and the teardown
// deletes whatever the create left unless PROXMOX_TEST_KEEP is set.
func TestProxmox_lifecycle(t *testing.T) {
	e := loadHostEnv(t)
	h := startHarness(t, e)
	ctx, cancel := context.WithTimeout(t.Context(), e.Timeout)
	defer cancel()

	// A UID of its own for each run, and a sentinel in the user-data that no span may carry.
	uid := "pveflow-it-" + randomHex(8)
	name := proxy.NameFromUID(uid)
	sentinel := "pveflow-integration-sentinel-" + randomHex(8)
	in := proxyvm.ProxySpec{
		UID: uid, Image: image, MachineType: machineType,
		UserData: "#cloud-config\n# " + sentinel + "\n",
	}
	t.Logf("proxy UID %s, VM name %s", uid, name)

	var created proxyvm.CreateProxyResult
	deleted := false
	t.Cleanup(func() {
		switch {
		case e.Keep:
			h.printKeepCommands(t, created.VMID, name)
		case !deleted:
			teardownCtx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
			defer cancel()
			res, err := h.delete(teardownCtx, uid)
			assert.NoError(t, err, "teardown: DeleteProxy %s", uid)
			t.Logf("teardown: DeleteProxy %s destroyed %v", uid, res.Destroyed)
		}
	})

	// 1. The node is healthy.
	h.requireHealthy(ctx, t)

	// 2. CreateProxy returns vms/<vmid>/<name>, the VMID in the range, on the node.
	before := h.vmsInRange(ctx, t)
	created = h.create(ctx, t, in)
	t.Logf("CreateProxy: %+v", created)
	vmid, gotName, err := proxy.ParseProviderID(created.ProviderID)
	require.NoError(t, err)
	assert.Equal(t, created.VMID, vmid)
	assert.Equal(t, name, gotName)
	assert.GreaterOrEqual(t, vmid, e.VMIDRange.Min)
	assert.LessOrEqual(t, vmid, e.VMIDRange.Max)
	assert.Equal(t, e.Node, created.Node)
	ip, err := netip.ParseAddr(created.IPv4)
	require.NoError(t, err, "the create's IPv4")
	assert.True(t, ip.Is4(), "%s is an IPv4 address", ip)
	afterCreate := h.vmsInRange(ctx, t)
	assert.Len(t, afterCreate, len(before)+1, "VMs in the range after the create")

	// 3. A second CreateProxy of the UID returns the same proxy and clones nothing.
	again := h.create(ctx, t, in)
	assert.Equal(t, created.ProviderID, again.ProviderID)
	assert.Len(t, h.vmsInRange(ctx, t), len(afterCreate), "VMs in the range after the second create")

	// 4. GetProxy reaches Running, with an IPv4 and the UID and creation time of the mark.
	got := h.awaitRunning(ctx, t, uid)
	t.Logf("GetProxy: %+v", got)
	assert.Equal(t, created.ProviderID, got.ProviderID)
	assert.NotEmpty(t, got.IPv4)
	assert.Equal(t, uid, got.UID)
	assert.True(t, created.CreatedAt.Equal(got.CreatedAt), "CreatedAt %s in the mark, %s from the create", got.CreatedAt, created.CreatedAt)

	// 5. ListProxies lists it.
	list, err := h.starter.ListProxies(ctx)
	require.NoError(t, err)
	var listed []reads.ListedProxy
	for _, p := range list.Proxies {
		if p.ProviderID == created.ProviderID {
			listed = append(listed, p)
		}
	}
	require.Len(t, listed, 1, "ListProxies has %s", created.ProviderID)
	assert.Equal(t, uid, listed[0].UID)

	// 6. The guest answers on its port, or not: logged only.
	h.probeGuest(ctx, t, got.IPv4)

	// 7. The create's HTTP spans nest under its activities' spans, and no span holds the
	// user-data or the API token. The workers end a workflow's span as it returns.
	require.Eventually(t, func() bool {
		var runs int
		for _, s := range h.spans.Ended() {
			if s.Name() == "RunWorkflow:"+core.CreateProxyName {
				runs++
			}
		}
		return runs == 2
	}, 30*time.Second, 100*time.Millisecond, "both creates' workflow spans end")
	spans := h.spans.Ended()
	byID := make(map[string]sdktrace.ReadOnlySpan, len(spans))
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
	}
	traces := h.createTraces()
	var uploads int
	for _, s := range spans {
		if s.Name() != "PVE POST /nodes/{node}/storage/{storage}/upload" {
			continue
		}
		uploads++
		assert.True(t, traces[s.SpanContext().TraceID().String()], "the upload in a create's trace")
		parent, ok := byID[s.Parent().SpanID().String()]
		require.True(t, ok, "the upload's parent span was recorded")
		assert.Equal(t, "RunActivity:UploadISO", parent.Name())
	}
	assert.Positive(t, uploads, "the seed ISO's upload is traced")
	token, err := os.ReadFile(e.TokenFile)
	require.NoError(t, err)
	_, tokenSecret, ok := strings.Cut(strings.TrimSpace(string(token)), "=")
	require.True(t, ok, "%s holds user@realm!tokenid=secret", envTokenFile)
	for _, s := range spans {
		for _, text := range spantest.Texts(s) {
			assert.NotContains(t, text, sentinel, "span %s holds the user-data", s.Name())
			assert.NotContains(t, text, tokenSecret, "span %s holds the API token", s.Name())
		}
	}

	if e.Keep {
		return
	}

	// 8. DeleteProxy destroys the VM.
	res, err := h.delete(ctx, uid)
	require.NoError(t, err)
	deleted = true
	t.Logf("DeleteProxy: %+v", res)
	assert.Equal(t, []activities.VMRef{{Node: created.Node, VMID: created.VMID}}, res.Destroyed)

	// 9. GetProxy finds nothing.
	_, err = h.starter.GetProxy(ctx, uid)
	assert.ErrorIs(t, err, starter.ErrNotFound)

	// 10. DeleteProxy again succeeds, with nothing to destroy.
	res, err = h.delete(ctx, uid)
	require.NoError(t, err)
	assert.Empty(t, res.Destroyed)

	// 11. No VM of the proxy remains, and no seed ISO.
	all, err := h.observer.ClusterResources(ctx)
	require.NoError(t, err)
	for _, r := range all {
		assert.NotEqual(t, name, r.Name, "VM %d has the proxy's name", r.VMID)
		assert.NotEqual(t, created.VMID, r.VMID, "the proxy's VMID is taken")
	}
	isos, err := h.observer.StorageContent(ctx, created.Node, h.env.ISOStorage, "iso")
	require.NoError(t, err)
	seed := proxy.SeedVolID(h.env.ISOStorage, proxy.NameFromUID(uid))
	for _, v := range isos {
		assert.NotEqual(t, seed, v.VolID, "the seed ISO is left on %s", h.env.ISOStorage)
	}
}

// TestProxmoxCheck_realHost checks the host's health through the CheckHealth workflow; it
// creates nothing.
func TestProxmoxCheck_realHost(t *testing.T) {
	e := loadHostEnv(t)
	h := startHarness(t, e)
	ctx, cancel := context.WithTimeout(t.Context(), e.Timeout)
	defer cancel()
	h.requireHealthy(ctx, t)
}
