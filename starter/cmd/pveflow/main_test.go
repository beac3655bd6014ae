package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/buildinfo"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// runCLI runs the CLI in this process with an environment of its own.
func runCLI(env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRun_usageErrorsExit2(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "no command given"},
		{"unknown command", []string{"resize"}, `unknown command "resize"`},
		{"create without uid", []string{"create", "--image", "debian13"}, "create: --uid is required"},
		{"status without uid", []string{"status"}, "status: --uid is required"},
		{"unknown flag", []string{"list", "--uid", "x"}, "pveflow: list: unknown flag: --uid\n"},
		{"long flag with one dash", []string{"create", "-uid", "x"}, "pveflow: create: -uid: long flags take two dashes: --uid\n"},
		{"unknown word with one dash", []string{"ls", "-bogus"}, "pveflow: ls: unknown flag: -bogus\n"},
		{"stray argument", []string{"delete", "--uid", "x", "now"}, `delete: unexpected arguments ["now"]`},
		{"unknown global flag", []string{"--verbose", "list"}, "pveflow: unknown flag: --verbose\n"},
		{"misspelt command", []string{"stauts"}, `unknown command "stauts"; did you mean status?`},
		{"misspelt command with a flag of the command meant", []string{"craete", "--uid", "x"}, "pveflow: unknown command \"craete\"; did you mean create?\n"},
		{"misspelt command after a global flag", []string{"--json", "craete", "--uid", "x"}, "pveflow: unknown command \"craete\"; did you mean create?\n"},
		{"global flag without its value", []string{"--task-queue"}, "pveflow: flag needs an argument: --task-queue\n"},
		{"unknown help topic", []string{"help", "resize"}, `help: unknown command "resize"`},
		{"misspelt help topic", []string{"help", "craete"}, "pveflow: help: unknown command \"craete\"; did you mean create?\n"},
		{"unknown shell", []string{"completion", "tcsh"}, `completion: want bash or zsh, not "tcsh"`},
		{"bad duration", []string{"gc", "--all", "--grace", "soon"}, `gc: invalid argument "soon" for "--grace" flag`},
		{"name that is not a DNS label", []string{"create", "--uid", "x", "--name", "egress.eu-1"}, `create proxy x: name "egress.eu-1" is not a DNS label`},
		{"gateway outside its prefix", []string{"create", "--uid", "x", "--ipv4", "192.0.2.10/24", "--gateway4", "198.51.100.1", "--ipv6", "192.0.2.11/24"},
			"create proxy x: addresses: ipv4: gateway 198.51.100.1 is outside 192.0.2.0/24; ipv6: 192.0.2.11/24 is not an IPv6 address"},
		{"NIC with a VLAN over PVE's", []string{"create", "--uid", "x", "--nic", ":20", "--nic", "vmbr1:5000"}, "create proxy x: nics[1].vlan: 5000 is outside PVE's VLAN tags 1..4094"},
		{"NIC with a VLAN that is no number", []string{"create", "--uid", "x", "--nic", "vmbr1:ten"}, `create: --nic: "vmbr1:ten": VLAN "ten" is not a number`},
		{"user-data file that is not there", []string{"create", "--uid", "x", "--user-data-file", "no-such-proxy.yaml"}, "create: --user-data-file: open no-such-proxy.yaml: no such file or directory"},
		{"phase that is none", []string{"list", "--phase", "presnt"}, `list: --phase "presnt" is not a phase: want one of absent, `},
		{"update that changes nothing", []string{"update", "--uid", "x"}, "change proxy x: nothing to change: give an image, a machine type or user-data"},
		{"status of the delete, which is gone", []string{"status", "--uid", "x", "--delete"}, "status: unknown flag: --delete"},
		{"wait on the delete and the change", []string{"wait", "--uid", "x", "--delete", "--change", "--retry-now"}, "wait: give one of --delete, --change"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(nil, tt.args...)

			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr, tt.want)
			assert.Regexp(t, `^pveflow: [^\n]+\nRun 'pveflow help' for usage.\n$`, stderr, "one line naming the mistake, then where help is")
			assert.NotContains(t, stderr, "pveflow: pveflow:", "the program's name once")
			assert.Empty(t, stdout)
		})
	}
}

// unreachableTemporal is an environment whose Temporal address nothing listens on.
func unreachableTemporal(t *testing.T) (env map[string]string, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr = ln.Addr().String()
	require.NoError(t, ln.Close())
	return map[string]string{"TEMPORAL_ADDRESS": addr}, addr
}

func TestRun_invalidUIDIsAUsageErrorBeforeConnecting(t *testing.T) {
	tests := []struct {
		name string
		args []string
		uid  string
	}{
		{"create", []string{"create", "--image", "debian13"}, "team/proxy"},
		{"delete", []string{"delete"}, "proxy a"},
		{"status", []string{"status"}, "-proxy"},
		{"update", []string{"update", "--machine-type", "small"}, "próxy"},
		{"result", []string{"result"}, "proxy=a"},
		{"result of the delete", []string{"result", "--delete"}, strings.Repeat("a", proxy.MaxUIDLength+1)},
		{"trailing line break", []string{"create"}, "5d2c8a41\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, _ := unreachableTemporal(t)

			code, stdout, stderr := runCLI(env, append(tt.args, "--uid", tt.uid)...)

			assert.Equal(t, exitUsage, code, "exit 1 would mean it tried to connect")
			assert.Contains(t, stderr, "pveflow: "+tt.args[0]+": --uid: "+proxy.ValidateUID(tt.uid).Error()+"\n")
			assert.Contains(t, stderr, "Run 'pveflow help' for usage.")
			assert.Empty(t, stdout)
		})
	}
}

func TestRun_helpDocumentsCommandsEnvironmentAndExitCodes(t *testing.T) {
	code, stdout, _ := runCLI(nil, "help")

	assert.Equal(t, exitOK, code)
	for _, want := range []string{
		"Usage:\n  pveflow [flags]\n  pveflow [command]\n",
		"  create       Ask for the proxy of a UID to be created",
		"  update       Change a present proxy",
		"  completion   Write the shell completion script for bash or zsh",
		"TEMPORAL_ADDRESS", "PVEFLOW_CODEC_KEY_FILE",
		"1 to 128 ASCII letters, digits, '-', '_' and '.', starting with a letter or digit",
		"Any other --uid is a\nusage error.",
		"Exit codes:\n  0  success\n  1  any other error",
	} {
		assert.Contains(t, stdout, want)
	}
	assert.Regexp(t, `\n      --json +print results as JSON on stdout\n`, stdout)
	for _, e := range exitCodes {
		assert.Contains(t, stdout, fmt.Sprintf("\n  %d  %s\n", e.code, e.meaning))
	}
}

func TestRun_helpOfACommandIsItsDashDashHelp(t *testing.T) {
	root := (&cli{getenv: func(string) string { return "" }}).command()
	for _, cmd := range root.Commands() {
		t.Run(cmd.Name(), func(t *testing.T) {
			code, stdout, _ := runCLI(nil, cmd.Name(), "--help")
			helpCode, helpStdout, _ := runCLI(nil, "help", cmd.Name())

			assert.Equal(t, exitOK, code)
			assert.Contains(t, stdout, "Usage:\n  pveflow "+cmd.Name())
			assert.Contains(t, stdout, "Global Flags:\n      --json ")
			assert.NotContains(t, stdout, "Exit codes:", "the whole help is `pveflow help`")
			assert.Equal(t, exitOK, helpCode)
			assert.Equal(t, stdout, helpStdout)
		})
	}
}

func TestRun_everyFlagHasAUsage(t *testing.T) {
	root := (&cli{getenv: func(string) string { return "" }}).command()
	for _, cmd := range append(root.Commands(), root) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			assert.NotEmpty(t, f.Usage, "pveflow %s --%s", cmd.Name(), f.Name)
		})
	}
}

func TestRun_unreachableTemporalExits1(t *testing.T) {
	env, addr := unreachableTemporal(t)

	code, _, stderr := runCLI(env, "status", "--uid", "x")

	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "pveflow: cannot reach Temporal at "+addr+": ")
}

func TestRun_userDataFileOverTheLimitIsAUsageErrorBeforeConnecting(t *testing.T) {
	env, _ := unreachableTemporal(t)
	file := filepath.Join(t.TempDir(), "user-data")
	const secret = "oversize-sentinel-0b7e4c2d"
	require.NoError(t, os.WriteFile(file, []byte("#cloud-config\npassword: "+secret+"\n"+strings.Repeat("#", proxyvm.MaxUserDataBytes)), 0o600))

	code, stdout, stderr := runCLI(env, "create", "--uid", "x", "--user-data-file", file)

	assert.Equal(t, exitUsage, code, "exit 1 would mean it tried to connect")
	assert.Contains(t, stderr, "pveflow: create proxy x: user-data is 65587 bytes, more than the limit of 65536 (proxyvm.MaxUserDataBytes)\n")
	assert.NotContains(t, stderr, secret)
	assert.Empty(t, stdout)
}

func TestExitCode(t *testing.T) {
	_, invalidUID := starter.New(nil, core.DefaultTaskQueue).Status(context.Background(), "a b", starter.Create)
	require.ErrorIs(t, invalidUID, starter.ErrInvalidUID)
	big := proxyvm.ProxySpec{UID: "u", UserData: strings.Repeat("x", proxyvm.MaxUserDataBytes+1)}
	_, userDataTooLarge := starter.New(nil, core.DefaultTaskQueue).Create(context.Background(), big)
	require.ErrorIs(t, userDataTooLarge, starter.ErrUserDataTooLarge)
	workflowErr := func(typ string) error {
		return failed{op: starter.Create, uid: "u", err: temporal.NewNonRetryableApplicationError("boom", typ, nil)}
	}
	rejected := fmt.Errorf("create of proxy u refused: %w", starter.ErrRejected)
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, exitOK},
		{"usage", usageError{errors.New("no command given")}, exitUsage},
		{"invalid UID from the starter", invalidUID, exitUsage},
		{"user-data too large from the starter", userDataTooLarge, exitUsage},
		{"permanent", workflowErr(core.FailPermanent), exitPermanent},
		{"transient", workflowErr(core.FailTransient), exitTransient},
		{"quota exceeded", workflowErr(core.FailQuotaExceeded), exitQuotaExceeded},
		{"cancelled", failed{op: starter.Create, uid: "u", err: temporal.NewCanceledError()}, exitCanceled},
		{"refused by the proxy", rejected, exitPermanent},
		{"superseded", workflowErr(starter.FailSuperseded), exitCanceled},
		{"any other error", errors.New("connection refused"), exitError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, exitCode(tt.err))
		})
	}
}

func TestFailed_readsAsTheWorkflowsOwnMessageAndType(t *testing.T) {
	err := failed{op: starter.Delete, uid: "u-1", err: fmt.Errorf("delete of proxy u-1: %w",
		temporal.NewNonRetryableApplicationError("destroy VM 100 on node pve1: storage gone", core.FailTransient, nil))}

	assert.Equal(t, "delete of proxy u-1 failed (Transient): destroy VM 100 on node pve1: storage gone", err.Error())
}

func TestFailed_supersededCreate(t *testing.T) {
	err := failed{op: starter.Create, uid: "u-1", err: fmt.Errorf("create of proxy u-1: %w",
		temporal.NewNonRetryableApplicationError("a delete was requested", starter.FailSuperseded, nil))}

	assert.Equal(t, "create of proxy u-1 was superseded: a delete was requested", err.Error())
}

func TestFailed_cancelledCreate(t *testing.T) {
	err := failed{op: starter.Create, uid: "u-1", err: temporal.NewCanceledError()}

	assert.Equal(t, "create of proxy u-1 was cancelled", err.Error())
}

var started = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func cloning(attempt int32, lastFailure string) starter.Progress {
	return starter.Progress{
		Status: core.Status{Phase: core.PhaseCloning, Step: "wait for clone of 9000 to 124973 on pve1", StartedAt: started},
		State:  "running",
		Wait:   starter.Wait{ActivityAttempt: attempt, LastFailure: lastFailure},
	}
}

func TestProgressLine_elsewhereWritesALinePerChangeNotPerTick(t *testing.T) {
	var out bytes.Buffer
	line := &progressLine{w: &out}

	line.show(cloning(1, ""), started.Add(time.Second))
	line.show(cloning(1, ""), started.Add(2*time.Second))
	line.show(cloning(2, "clone task UPID:x still running"), started.Add(3*time.Second))
	line.clear()

	assert.Equal(t, "cloning · wait for clone of 9000 to 124973 on pve1 · 1s\n"+
		"attempt 2: clone task UPID:x still running · cloning · wait for clone of 9000 to 124973 on pve1 · 3s\n", out.String())
}

func TestProgressLine_showsNothingBeforeTheWorkflowSaysWhereItIs(t *testing.T) {
	var out bytes.Buffer
	line := &progressLine{w: &out}

	line.show(starter.Progress{Status: core.Status{StartedAt: started}, State: "running"}, started)
	line.show(cloning(1, ""), started.Add(time.Second))

	assert.Equal(t, "cloning · wait for clone of 9000 to 124973 on pve1 · 1s\n", out.String())
}

func TestProgressLine_aStepBeforeAnyPhaseStandsAlone(t *testing.T) {
	var out bytes.Buffer
	line := &progressLine{w: &out}

	line.show(starter.Progress{Status: core.Status{StartedAt: started, Step: "describe workflow proxy/u/create"}, State: "running"}, started)

	assert.Equal(t, "describe workflow proxy/u/create · 0s\n", out.String())
}

func TestProgressLine_onATerminalRewritesOneClippedLine(t *testing.T) {
	var out bytes.Buffer
	line := &progressLine{w: &out, width: 30}

	line.show(cloning(1, ""), started.Add(time.Second))
	line.show(cloning(1, ""), started.Add(2*time.Second))
	line.clear()

	assert.Equal(t, "\rcloning · wait for clone of …\x1b[K"+
		"\rcloning · wait for clone of …\x1b[K"+
		"\r\x1b[K", out.String())
	for _, l := range strings.Split(out.String(), "\r") {
		assert.LessOrEqual(t, len([]rune(strings.TrimSuffix(l, "\x1b[K"))), 29, "a line never wraps")
	}
}

// refused is the last failure of a wait that cannot reach Proxmox.
const refused = `list cluster resources: Get "https://pve.example.com:8006/api2/json/cluster/resources": dial tcp 192.0.2.10:8006: connect: connection refused`

func TestProgressLine_at80ColumnsShowsTheCauseOfTheLastFailure(t *testing.T) {
	var out bytes.Buffer
	line := &progressLine{w: &out, width: 80}

	line.show(cloning(15, refused), started.Add(12*time.Second))

	shown := strings.TrimSuffix(strings.TrimPrefix(out.String(), "\r"), "\x1b[K")
	assert.LessOrEqual(t, len([]rune(shown)), 79)
	assert.True(t, strings.HasPrefix(shown, "attempt 15: connection refused · cloning · "), shown)
}

func TestProgressLine_aNoteGoesOnALineOfItsOwn(t *testing.T) {
	var out bytes.Buffer
	line := &progressLine{w: &out, width: 80}

	line.show(cloning(1, ""), started.Add(time.Second))
	line.note("pveflow: waiting for the create of proxy u-1, but no worker polls task queue pveflow")
	line.show(cloning(1, ""), started.Add(2*time.Second))

	assert.Equal(t, "\rcloning · wait for clone of 9000 to 124973 on pve1 · 1s\x1b[K"+
		"\r\x1b[Kpveflow: waiting for the create of proxy u-1, but no worker polls task queue pveflow\n"+
		"\rcloning · wait for clone of 9000 to 124973 on pve1 · 2s\x1b[K", out.String())
}

func TestWaitText(t *testing.T) {
	tests := []struct {
		name        string
		attempt     int32
		lastFailure string
		withContext bool
		want        string
	}{
		{"first attempt running", 1, "", true, ""},
		{"no activity pending", 0, "", true, ""},
		{"retried", 5, "clone task UPID:x still running", true, "attempt 5: clone task UPID:x still running"},
		{"retried after a timeout without message", 3, "", true, "attempt 3"},
		{"the cause first, then its context", 15, refused, true,
			`attempt 15: connection refused (list cluster resources: Get "https://pve.example.com:8006/api2/json/cluster/resources": dial tcp 192.0.2.10:8006: connect)`},
		{"the cause alone", 15, refused, false, "attempt 15: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, waitText(cloning(tt.attempt, tt.lastFailure), tt.withContext))
		})
	}
}

func TestRun_waitCommandLines(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no action", []string{"--uid", "u-1"}, "wait: give one of --retry-now, --pause, --resume"},
		{"two actions", []string{"--uid", "u-1", "--pause", "--resume"}, "wait: give one of"},
		{"extend, which is gone", []string{"--uid", "u-1", "--extend", "30m"}, "wait: unknown flag: --extend"},
		{"reason without pause", []string{"--uid", "u-1", "--resume", "--reason", "why"}, "wait: --reason goes with --pause"},
		{"no uid", []string{"--retry-now"}, "wait: --uid is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, _ := unreachableTemporal(t)

			code, _, stderr := runCLI(env, append([]string{"wait"}, tt.args...)...)

			assert.Equal(t, exitUsage, code, "exit 1 would mean it tried to connect")
			assert.Contains(t, stderr, tt.want)
		})
	}
}

func TestRun_versionNamesTheModuleAndTheSDK(t *testing.T) {
	code, stdout, stderr := runCLI(nil, "--json", "version")

	require.Equal(t, exitOK, code, stderr)
	var v buildinfo.Info
	require.NoError(t, json.Unmarshal([]byte(stdout), &v))
	assert.Equal(t, "github.com/pveflow/pveflow", v.Module)
	assert.Equal(t, "v1.50.0", v.TemporalSDK)
	assert.Equal(t, runtime.Version(), v.GoVersion)
}

func TestPhases_areEveryPhaseOfAProxy(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "..", "workflows", "proxyvm", "proxy.go"), nil, 0)
	require.NoError(t, err)
	var declared []string
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range spec.Names {
			if strings.HasPrefix(name.Name, "Proxy") && i < len(spec.Values) {
				if lit, ok := spec.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					declared = append(declared, strings.Trim(lit.Value, `"`))
				}
			}
		}
		return false
	})

	assert.ElementsMatch(t, declared, phases, "list --phase takes every Proxy phase of package proxyvm")
}

func TestPrintChanged_saysWhatChangedAndWhetherTheGuestRestarted(t *testing.T) {
	base := proxyvm.ChangeProxyResult{VMID: 124973, Node: "pve1", Name: "proxy-a", IPv4: "10.0.0.23"}
	tests := []struct {
		name string
		edit func(*proxyvm.ChangeProxyResult)
		want string
	}{
		{"nothing to change", func(*proxyvm.ChangeProxyResult) {},
			"proxy changed: vms/124973/proxy-a on pve1: nothing changed: the VM matched; the guest was not restarted; IPv4 10.0.0.23\n"},
		{"a reboot", func(r *proxyvm.ChangeProxyResult) {
			r.Changed, r.Restarted = []string{"cores 2 -> 4", "memory 2048 -> 4096 MiB"}, true
		}, "proxy changed: vms/124973/proxy-a on pve1: changed cores 2 -> 4, memory 2048 -> 4096 MiB; the guest was restarted; IPv4 10.0.0.23\n"},
		{"a rebuild", func(r *proxyvm.ChangeProxyResult) {
			r.Changed, r.Restarted, r.Rebuilt = []string{"image debian12 -> debian13"}, true, true
		}, "proxy changed: vms/124973/proxy-a on pve1: changed image debian12 -> debian13; the VM was rebuilt; IPv4 10.0.0.23\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			res := base
			tt.edit(&res)

			require.NoError(t, (&cli{stdout: &out}).printChanged(res))

			assert.Equal(t, tt.want, out.String())
		})
	}
}

func TestRequestText_saysWhatTheRequestWaitsFor(t *testing.T) {
	create := &proxyvm.OperationRecord{Kind: proxyvm.OpCreate}

	assert.Equal(t, "create, answered when the create that runs ends", requestText(proxyvm.PendingRequest{Kind: proxyvm.OpCreate, Served: true}, create))
	assert.Equal(t, "change, waiting for the create that runs to end", requestText(proxyvm.PendingRequest{Kind: proxyvm.OpChange}, create))
	assert.Equal(t, "delete, waiting for its operation to start", requestText(proxyvm.PendingRequest{Kind: proxyvm.OpDelete}, nil))
}
