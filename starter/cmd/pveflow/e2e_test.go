package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/syncbuf"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// createdRE is the line `create --wait` prints, which `make run` looks for.
var createdRE = regexp.MustCompile(`(?m)^proxy created: (vms/(\d+)/(proxy-[a-z2-7]+)) on (pve1), IPv4 (\d+\.\d+\.\d+\.\d+)$`)

// cloneRunningRE is the last failure of a clone wait that polls a running clone.
var cloneRunningRE = regexp.MustCompile(`^clone task \S+ still running on node pve1`)

func decode[T any](t *testing.T, run cliRun) T {
	t.Helper()
	require.Equal(t, exitOK, run.code, run.stderr)
	var v T
	require.NoError(t, json.Unmarshal([]byte(run.stdout), &v), run.stdout)
	return v
}

func TestE2E_proxyLifecycleThroughTheCLI(t *testing.T) {
	s := newE2E(t, "e2e-lifecycle")
	// As make run does: the simulator, the worker and each command in processes of their own.
	simURL, simDir := s.startPVESim()
	w := s.startWorker("--config", s.writeConfig(simURL, filepath.Join(simDir, "ca.pem"), filepath.Join(simDir, "token")))
	const uid = "8e4f2a6c-1b3d-4c5e-9f70-a1b2c3d4e5f6"
	const secret = "s3cr3t-in-user-data"
	userData := filepath.Join(t.TempDir(), "user-data")
	require.NoError(t, os.WriteFile(userData, []byte("#cloud-config\npassword: "+secret+"\n"), 0o600))

	created := s.pveflow("create", "--uid", uid, "--image", "debian13", "--machine-type", "small", "--user-data-file", userData, "--wait")

	require.Equal(t, exitOK, created.code, created.stderr)
	m := createdRE.FindStringSubmatch(created.stdout)
	require.NotNil(t, m, created.stdout)
	providerID, name := m[1], m[3]
	assert.Equal(t, proxy.NameFromUID(uid), name)
	assert.Contains(t, created.stderr, "cloning · wait for clone of 9000 to "+m[2]+" on pve1 · ", "the progress shows the clone wait")
	assert.NotContains(t, created.stderr, "no worker polls", "a live worker polls")
	vms := proxyVMs(t, simURL, simDir)
	require.Len(t, vms, 1)
	assert.Equal(t, m[2], strconv.Itoa(vms[0].VMID))

	status := s.pveflow("status", "--uid", uid)
	require.Equal(t, exitOK, status.code, status.stderr)
	assert.Regexp(t, `(?m)^phase\s+present$`, status.stdout)
	assert.Regexp(t, `(?m)^observed\s+VM `+m[2]+` on node pve1`, status.stdout)
	assert.Regexp(t, `(?m)^done\s+#\d+ create \S.* completed `, status.stdout)
	progress := decode[starter.ProxyProgress](t, s.pveflow("status", "--uid", uid, "--json"))
	assert.Equal(t, proxyvm.ProxyPresent, progress.Phase)
	assert.Equal(t, "running", progress.State, "the proxy's entity runs while it is present")
	assert.Equal(t, m[2], strconv.Itoa(progress.Observed.VMID))
	assert.Equal(t, "small", progress.Desired.MachineType)

	res := decode[proxyvm.CreateProxyResult](t, s.pveflow("--json", "result", "--uid", uid))
	assert.Equal(t, providerID, res.ProviderID)
	assert.Equal(t, m[5], res.IPv4)

	const newSecret = "n3w-s3cr3t-in-user-data"
	newUserData := filepath.Join(t.TempDir(), "new-user-data")
	require.NoError(t, os.WriteFile(newUserData, []byte("#cloud-config\npassword: "+newSecret+"\n"), 0o600))
	reseeded := s.pveflow("update", "--uid", uid, "--user-data-file", newUserData)
	require.Equal(t, exitOK, reseeded.code, reseeded.stderr)
	assert.Regexp(t, `(?m)^proxy changed: `+providerID+` on pve1: changed \S.*; the guest was restarted; IPv4 \S+$`, reseeded.stdout)
	resized := decode[proxyvm.ChangeProxyResult](t, s.pveflow("update", "--uid", uid, "--machine-type", "large", "--json"))
	assert.NotEmpty(t, resized.Changed)
	assert.Equal(t, "large", decode[starter.ProxyProgress](t, s.pveflow("status", "--uid", uid, "--json")).Desired.MachineType)
	refused := s.pveflow("update", "--uid", uid, "--machine-type", "huge")
	assert.Equal(t, exitPermanent, refused.code)
	assert.Regexp(t, `^pveflow: change of proxy `+uid+` refused: [^\n]*"huge"[^\n]*\n$`, refused.stderr, "one line")

	require.Eventually(t, func() bool {
		list := decode[[]starter.Proxy](t, s.pveflow("list", "--json"))
		return slices.ContainsFunc(list, func(p starter.Proxy) bool {
			return p.UID == uid && p.Phase == proxyvm.ProxyPresent && p.VMID != 0
		})
	}, 30*time.Second, 500*time.Millisecond, "list shows the present proxy")
	listed := s.pveflow("list", "--phase", proxyvm.ProxyPresent)
	require.Equal(t, exitOK, listed.code, listed.stderr)
	assert.Regexp(t, `(?m)^UID\s+NAME\s+PHASE\s+NODE\s+VMID\s+ENTITY\s+STARTED$`, listed.stdout, "ENTITY: the workflow's state, not the VM's")
	assert.Regexp(t, `(?m)^`+uid+`\s+`+name+`\s+present\s+pve1\s+`+m[2]+`\s+running\s`, listed.stdout)
	vmsListed := s.pveflow("ls")
	require.Equal(t, exitOK, vmsListed.code, vmsListed.stderr)
	assert.Regexp(t, `(?m)^PROVIDER ID\s+NODE\s+VM STATUS\s+UID\s+CREATED$`, vmsListed.stdout)

	deleted := s.pveflow("delete", "--uid", uid, "--wait")
	require.Equal(t, exitOK, deleted.code, deleted.stderr)
	assert.Contains(t, deleted.stdout, "proxy deleted: "+uid+"\n")
	assert.Empty(t, proxyVMs(t, simURL, simDir))
	delRes := decode[proxyvm.DeleteProxyResult](t, s.pveflow("result", "--uid", uid, "--delete", "--json"))
	assert.Len(t, delRes.Destroyed, 1)
	assert.Equal(t, proxyvm.ProxyAbsent, decode[starter.ProxyProgress](t, s.pveflow("status", "--uid", uid, "--json")).Phase)

	for _, out := range []string{created.stdout, created.stderr, status.stdout, reseeded.stdout, reseeded.stderr, deleted.stdout, deleted.stderr, w.log.String()} {
		assert.NotContains(t, out, secret, "user-data is never printed or logged")
		assert.NotContains(t, out, newSecret, "user-data is never printed or logged")
	}
}

func TestE2E_aCreateOfAnUnknownImageIsRefusedAtOnceAndExits3(t *testing.T) {
	s := newE2E(t, "e2e-permanent")
	s.startSimulatorWorker()
	const uid = "0c9d8e7f-6a5b-4c3d-8e1f-2a3b4c5d6e7f"
	sent := time.Now()

	created := s.pveflow("create", "--uid", uid, "--image", "no-such-image", "--machine-type", "small", "--wait")

	assert.Less(t, time.Since(sent), 20*time.Second, "refused, not tried")
	assert.Equal(t, exitPermanent, created.code)
	assert.Regexp(t, `^pveflow: create of proxy `+uid+` refused: [^\n]*no-such-image[^\n]*\n$`, created.stderr, "one line")
	assert.Empty(t, created.stdout)
}

func TestE2E_demoCreatesAndDeletesAProxy(t *testing.T) {
	s := newE2E(t, "e2e-demo")
	_, simDir := s.startSimulatorWorker()

	demo := s.pveflow("demo")

	require.Equal(t, exitOK, demo.code, demo.stderr)
	assert.Regexp(t, createdRE, demo.stdout)
	assert.Regexp(t, `(?m)^proxy deleted: [0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, demo.stdout)
	assert.Empty(t, proxyVMs(t, simulatorURL(t, simDir), simDir))
}

// createPollingItsClone asks for the proxy of uid and returns once its create polls its
// running clone.
func (s *e2e) createPollingItsClone(uid string) {
	s.t.Helper()
	started := s.pveflow("create", "--uid", uid, "--image", "debian13", "--machine-type", "small")
	require.Equal(s.t, exitOK, started.code, started.stderr)
	assert.Contains(s.t, started.stdout, "create of proxy "+uid+" accepted by workflow proxy/"+uid+" (update ")
	require.Eventually(s.t, func() bool {
		p := decode[starter.ProxyProgress](s.t, s.pveflow("status", "--uid", uid, "--json")).OperationProgress
		return p != nil && p.Phase == core.PhaseCloning && cloneRunningRE.MatchString(p.LastFailure)
	}, time.Minute, 200*time.Millisecond, "the create polls its clone")
}

func TestE2E_workerKilledMidCloneResumesWithoutASecondClone(t *testing.T) {
	s := newE2E(t, "e2e-restart")
	// The cluster must outlive the worker, as a real one does: the simulator's own process.
	url, simDir := s.startPVESim()
	cfg := s.writeConfig(url, filepath.Join(simDir, "ca.pem"), filepath.Join(simDir, "token"))
	w := s.startWorker("--config", cfg)
	const uid = "3f2e1d0c-9b8a-4765-8432-10fedcba9876"
	s.createPollingItsClone(uid)

	w.kill(t)
	s.startWorker("--config", cfg)
	res := s.pveflow("result", "--uid", uid)

	require.Equal(t, exitOK, res.code, res.stderr)
	m := createdRE.FindStringSubmatch(res.stdout)
	require.NotNil(t, m, res.stdout)
	vms := proxyVMs(t, url, simDir)
	require.Len(t, vms, 1, "one clone, resumed rather than repeated")
	assert.Equal(t, proxy.NameFromUID(uid), vms[0].Name)
	assert.Equal(t, m[2], strconv.Itoa(vms[0].VMID))
	require.Eventually(t, func() bool {
		list := decode[[]starter.Proxy](t, s.pveflow("list", "--json"))
		return slices.ContainsFunc(list, func(p starter.Proxy) bool { return p.UID == uid && p.Phase == proxyvm.ProxyPresent })
	}, 30*time.Second, 500*time.Millisecond, "list shows the present proxy")
	ops := decode[starter.ProxyProgress](t, s.pveflow("status", "--uid", uid, "--json")).Operations
	require.Len(t, ops, 1, "the same create went on")
	assert.Equal(t, "completed", ops[0].Outcome)
}

func TestE2E_withACodecKeyFileTheWorkerAndTheCLIReadEachOthersPayloads(t *testing.T) {
	s := newE2E(t, "e2e-codec")
	s.extraEnv = []string{"PVEFLOW_CODEC_KEY_FILE=" + newKeyFile(t)}
	// Clones long enough to look at the clone wait twice.
	s.startWorker("--simulator", "--simulator-dir", t.TempDir(), "--config", s.simulatorConfig(),
		"--simulator-clone-time", "8s", "--simulator-agent-delay", "500ms")
	plain, err := client.Dial(client.Options{HostPort: shared.temporal, Namespace: "default", Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	require.NoError(t, err)
	defer plain.Close()
	const uid = "6b5a4c3d-2e1f-4a0b-9c8d-7e6f5a4b3c2d"
	started := s.pveflow("create", "--uid", uid, "--image", "debian13", "--machine-type", "small")
	require.Equal(t, exitOK, started.code, started.stderr)

	var stored string // the last failure as the server holds it
	require.Eventually(t, func() bool {
		desc, err := plain.DescribeWorkflowExecution(t.Context(), core.CreateWorkflowID(uid), "")
		if err != nil || len(desc.GetPendingActivities()) == 0 || desc.GetPendingActivities()[0].GetLastFailure() == nil {
			return false
		}
		stored = desc.GetPendingActivities()[0].GetLastFailure().GetMessage()
		p := decode[starter.ProxyProgress](t, s.pveflow("status", "--uid", uid, "--json")).OperationProgress
		return p != nil && p.Phase == core.PhaseCloning && cloneRunningRE.MatchString(p.LastFailure)
	}, time.Minute, 200*time.Millisecond, "the status shows the clone wait's last failure decrypted")
	assert.Regexp(t, cloneRunningRE, stored, "the worker leaves failure messages plain")
	res := s.pveflow("result", "--uid", uid)

	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Regexp(t, createdRE, res.stdout)
}

// The acceptance of issue 12: with the worker stopped during a clone wait, status describes
// the wait and says no worker polls, wait --retry-now acts on it all the same, and the create
// completes once the worker comes back.
func TestE2E_withTheWorkerStoppedStatusDescribesTheWaitAndWaitActsOnIt(t *testing.T) {
	s := newE2E(t, "e2e-stalled")
	url, simDir := s.startPVESim()
	// The simulator's clone takes 8 s, well within its budget.
	cfg := s.writeConfig(url, filepath.Join(simDir, "ca.pem"), filepath.Join(simDir, "token"), "clone: 2m")
	w := s.startWorker("--config", cfg)
	const uid = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
	s.createPollingItsClone(uid)

	w.stop(t)
	status := s.pveflow("status", "--uid", uid)
	retried := decode[starter.Wait](t, s.pveflow("wait", "--uid", uid, "--retry-now", "--json"))
	s.startWorker("--config", cfg)
	res := s.pveflow("result", "--uid", uid)

	require.Equal(t, exitOK, status.code, status.stderr)
	assert.Regexp(t, `(?m)^operation\s+create, workflow proxy/`+uid+`/create, since `, status.stdout)
	assert.Regexp(t, `(?m)^  phase\s+cloning$`, status.stdout)
	assert.Regexp(t, `(?m)^  wait\s+TaskStatus \(activity \S+\) scheduled, attempt \d+, budget 2m0s`, status.stdout)
	assert.Regexp(t, `(?m)^  last failure\s+clone task \S+ still running on node pve1`, status.stdout)
	assert.Regexp(t, `(?m)^source\s+described by Temporal \(no worker answered the status query within 3s\)`, status.stdout)
	assert.Regexp(t, `(?m)^workers\s+no worker polls task queue e2e-stalled`, status.stdout)
	assert.Equal(t, "TaskStatus", retried.ActivityType)
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Regexp(t, createdRE, res.stdout)
}

func TestE2E_createWithStaticAddressesAndNICsPrintsTheAddresses(t *testing.T) {
	s := newE2E(t, "e2e-addresses")
	_, simDir := s.startSimulatorWorker()
	const uid = "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d"

	created := s.pveflow("create", "--uid", uid, "--image", "debian13", "--machine-type", "small",
		"--ipv4", "192.0.2.10/24", "--gateway4", "192.0.2.1", "--ipv6", "2001:db8::10/64", "--gateway6", "fe80::1",
		"--nic", ":20", "--nic", "vmbr1:30", "--wait")

	require.Equal(t, exitOK, created.code, created.stderr)
	m := regexp.MustCompile(`(?m)^proxy created: vms/(\d+)/proxy-[a-z2-7]+ on pve1, IPv4 192\.0\.2\.10, IPv6 2001:db8::10$`).FindStringSubmatch(created.stdout)
	require.NotNil(t, m, created.stdout)
	api, err := pve.NewClient(pve.ClientConfig{URL: simulatorURL(t, simDir), CAFile: filepath.Join(simDir, "ca.pem"), TokenFile: filepath.Join(simDir, "token")})
	require.NoError(t, err)
	vmid, _ := strconv.Atoi(m[1])
	cfg, err := api.VMConfig(t.Context(), "pve1", vmid)
	require.NoError(t, err)
	assert.Regexp(t, `,tag=20$`, cfg["net0"])
	assert.Regexp(t, `^virtio=[0-9A-F:]{17},bridge=vmbr1,tag=30$`, cfg["net1"])
	got := s.pveflow("get", "--uid", uid)
	require.Equal(t, exitOK, got.code, got.stderr)
	assert.Regexp(t, `(?m)^ipv6\s+2001:db8::10$`, got.stdout)
	assert.Regexp(t, `(?m)^addresses\s+192\.0\.2\.10/24 2001:db8::10/64$`, got.stdout)
}

// noteWithin runs the CLI with args until it says on stderr that no worker polls, which it must
// within limit, and returns what it said.
func (s *e2e) noteWithin(limit time.Duration, args ...string) string {
	s.t.Helper()
	env := map[string]string{}
	for _, kv := range s.env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncbuf.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, append([]string{"--task-queue", s.taskQueue}, args...), func(k string) string { return env[k] }, io.Discard, &stderr)
	}()
	assert.Eventually(s.t, func() bool { return strings.Contains(stderr.String(), ", but no worker polls task queue ") },
		limit, 50*time.Millisecond, "%v says within %s that no worker polls; stderr: %s", args, limit, &stderr)
	cancel()
	<-exited
	return stderr.String()
}

// The first of issue 34: a worker killed a moment ago is still listed as a poller for a minute,
// yet a waiting command says within about 2 s that none polls, before the entity has run
// too, and result waits for a create the entity has yet to start, then prints it.
func TestE2E_withTheWorkerKilledWaitingCommandsSaySoWithinSeconds(t *testing.T) {
	s := newE2E(t, "e2e-killed")
	w, _ := s.startSimulatorWorker()
	const uid = "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f"
	require.Equal(t, exitNotFound, s.pveflow("get", "--uid", uid).code, "a worker answers")
	w.kill(t)

	created := s.noteWithin(3*time.Second, "create", "--uid", uid, "--image", "debian13", "--machine-type", "small", "--wait")
	got := s.noteWithin(3*time.Second, "get", "--uid", uid)
	waited := s.noteWithin(3*time.Second, "result", "--uid", uid)
	s.startSimulatorWorker()
	res := s.pveflow("result", "--uid", uid)

	note := `(?m)^pveflow: waiting for %s, but no worker polls task queue e2e-killed: none took its workflow task, the last poll was \d+s ago$`
	assert.Regexp(t, fmt.Sprintf(note, "the create of proxy "+uid), created)
	assert.Regexp(t, fmt.Sprintf(note, "get proxy "+uid), got)
	assert.Regexp(t, fmt.Sprintf(note, "the create of proxy "+uid), waited)
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Regexp(t, createdRE, res.stdout)
}
