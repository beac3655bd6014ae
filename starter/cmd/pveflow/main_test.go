package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
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
		{"unknown flag", []string{"list", "--uid", "x"}, "list: flag provided but not defined: -uid"},
		{"stray argument", []string{"delete", "--uid", "x", "now"}, `delete: unexpected arguments ["now"]`},
		{"unknown global flag", []string{"--verbose", "list"}, "pveflow: flag provided but not defined: -verbose"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(nil, tt.args...)

			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr, tt.want)
			assert.Contains(t, stderr, "Run 'pveflow help' for usage.")
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
		{"delete", []string{"delete", "--name", "egress-a"}, "proxy a"},
		{"status", []string{"status"}, "-proxy"},
		{"status of the delete", []string{"status", "--delete"}, "próxy"},
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

// flagValues are values of the flags that "true" is not one of.
var flagValues = map[string]string{"grace": "30m"}

func TestRun_everyFlagTheHelpListsIsAccepted(t *testing.T) {
	commands := helpSynopses(t)
	require.Contains(t, commands, "delete")
	for cmd, flags := range commands {
		for _, flag := range flags {
			t.Run(cmd+" --"+flag, func(t *testing.T) {
				env, _ := unreachableTemporal(t)

				value := cmp.Or(flagValues[flag], "true")

				code, _, stderr := runCLI(env, cmd, "--"+flag+"="+value, "-h")

				assert.Equal(t, exitOK, code, stderr)
			})
		}
	}
}

// helpSynopses reads the flags of each command from the help text's Commands section: the
// lines indented less than the descriptions.
func helpSynopses(t *testing.T) map[string][]string {
	t.Helper()
	_, section, ok := strings.Cut(helpText, "\nCommands:\n")
	require.True(t, ok)
	section, _, _ = strings.Cut(section, "\n\n")
	commandRE := regexp.MustCompile(`^  ([a-z][a-z-]*)\b`)
	flagRE := regexp.MustCompile(`--([a-z-]+)`)
	commands := map[string][]string{}
	var cmd string
	for _, line := range strings.Split(section, "\n") {
		if indent := len(line) - len(strings.TrimLeft(line, " ")); indent >= 18 {
			continue // a description
		}
		if m := commandRE.FindStringSubmatch(line); m != nil {
			cmd = m[1]
			commands[cmd] = nil
		}
		for _, m := range flagRE.FindAllStringSubmatch(line, -1) {
			commands[cmd] = append(commands[cmd], m[1])
		}
	}
	return commands
}

func TestRun_helpDocumentsCommandsAndExitCodes(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"help", "no-such-command"}} {
		code, stdout, _ := runCLI(nil, args...)

		assert.Equal(t, exitOK, code, args)
		for _, want := range []string{
			"create --uid UID", "delete --uid UID [--name N]", "status --uid UID", "result --uid UID", "list [--phase P]", "demo",
			"codec-server [--listen ADDR] [--ui-origin URL]...", "codec-keygen --out FILE",
			"TEMPORAL_ADDRESS", "PVEFLOW_CODEC_KEY_FILE", "--json",
			"1 to 128 ASCII letters, digits, '-', '_' and '.', starting with a letter or digit",
			"Any other --uid is a\nusage error.",
			"The UID alone finds the proxy's VM.",
			"0  success", "2  usage error", "3  the workflow failed Permanent", "4  the workflow failed Transient",
			"5  the workflow failed QuotaExceeded", "6  the workflow was cancelled",
		} {
			assert.Contains(t, stdout, want, args)
		}
	}
}

func TestRun_unreachableTemporalExits1(t *testing.T) {
	env, addr := unreachableTemporal(t)

	code, _, stderr := runCLI(env, "status", "--uid", "x")

	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "pveflow: cannot reach Temporal at "+addr+": ")
}

func TestRun_missingUserDataFileIsNamed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "user-data")

	code, _, stderr := runCLI(nil, "create", "--uid", "x", "--user-data-file", missing)

	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "pveflow: user-data: open "+missing+": no such file or directory")
}

func TestRun_userDataFileOverTheLimitIsAUsageErrorBeforeConnecting(t *testing.T) {
	env, _ := unreachableTemporal(t)
	file := filepath.Join(t.TempDir(), "user-data")
	const secret = "oversize-sentinel-0b7e4c2d"
	require.NoError(t, os.WriteFile(file, []byte("#cloud-config\npassword: "+secret+"\n"+strings.Repeat("#", workflows.MaxUserDataBytes)), 0o600))

	code, stdout, stderr := runCLI(env, "create", "--uid", "x", "--user-data-file", file)

	assert.Equal(t, exitUsage, code, "exit 1 would mean it tried to connect")
	assert.Contains(t, stderr, "pveflow: create: --user-data-file "+file+": user-data is 65587 bytes, more than the limit of 65536 (workflows.MaxUserDataBytes)\n")
	assert.NotContains(t, stderr, secret)
	assert.Empty(t, stdout)
}

func TestExitCode(t *testing.T) {
	_, invalidUID := starter.New(nil, workflows.DefaultTaskQueue).Status(context.Background(), "a b", starter.Create)
	require.ErrorIs(t, invalidUID, starter.ErrInvalidUID)
	big := workflows.CreateProxyInput{UID: "u", UserData: strings.Repeat("x", workflows.MaxUserDataBytes+1)}
	_, userDataTooLarge := starter.New(nil, workflows.DefaultTaskQueue).Create(context.Background(), big)
	require.ErrorIs(t, userDataTooLarge, starter.ErrUserDataTooLarge)
	workflowErr := func(typ string) error {
		return failed{op: starter.Create, uid: "u", err: temporal.NewNonRetryableApplicationError("boom", typ, nil)}
	}
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, exitOK},
		{"usage", usageError{errors.New("no command given")}, exitUsage},
		{"invalid UID from the starter", invalidUID, exitUsage},
		{"user-data too large from the starter", userDataTooLarge, exitUsage},
		{"permanent", workflowErr(workflows.FailPermanent), exitPermanent},
		{"transient", workflowErr(workflows.FailTransient), exitTransient},
		{"quota exceeded", workflowErr(workflows.FailQuotaExceeded), exitQuotaExceeded},
		{"cancelled", failed{op: starter.Create, uid: "u", err: temporal.NewCanceledError()}, exitCanceled},
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
		temporal.NewNonRetryableApplicationError("destroy VM 100 on node pve1: storage gone", workflows.FailTransient, nil))}

	assert.Equal(t, "delete of proxy u-1 failed (Transient): destroy VM 100 on node pve1: storage gone", err.Error())
}

func TestFailed_cancelledCreate(t *testing.T) {
	err := failed{op: starter.Create, uid: "u-1", err: temporal.NewCanceledError()}

	assert.Equal(t, "create of proxy u-1 was cancelled", err.Error())
}

var started = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func cloning(attempt int32, lastFailure string) starter.Progress {
	return starter.Progress{
		Status: workflows.Status{Phase: workflows.PhaseCloning, Step: "wait for clone of 9000 to 124973 on pve1", StartedAt: started},
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
		"cloning · wait for clone of 9000 to 124973 on pve1 · 3s · attempt 2 (clone task UPID:x still running)\n", out.String())
}

func TestProgressLine_showsNothingBeforeTheWorkflowSaysWhereItIs(t *testing.T) {
	var out bytes.Buffer
	line := &progressLine{w: &out}

	line.show(starter.Progress{Status: workflows.Status{StartedAt: started}, State: "running"}, started)
	line.show(cloning(1, ""), started.Add(time.Second))

	assert.Equal(t, "cloning · wait for clone of 9000 to 124973 on pve1 · 1s\n", out.String())
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

func TestWaitText(t *testing.T) {
	tests := []struct {
		name        string
		attempt     int32
		lastFailure string
		want        string
	}{
		{"first attempt running", 1, "", ""},
		{"no activity pending", 0, "", ""},
		{"retried", 5, "clone task UPID:x still running", "attempt 5 (clone task UPID:x still running)"},
		{"retried after a timeout without message", 3, "", "attempt 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, waitText(cloning(tt.attempt, tt.lastFailure)))
		})
	}
}

func TestNewUID_isARandomVersion4UUID(t *testing.T) {
	a, b := newUID(), newUID()

	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, a)
	assert.NotEqual(t, a, b)
}

func TestRun_everyCommandHasItsOwnHelp(t *testing.T) {
	commands := helpSynopses(t)
	delete(commands, "help") // help -h is all of it
	require.Contains(t, commands, "wait")
	for cmd := range commands {
		t.Run(cmd, func(t *testing.T) {
			code, stdout, _ := runCLI(nil, cmd, "-h")
			helpCode, helpStdout, _ := runCLI(nil, "help", cmd)

			assert.Equal(t, exitOK, code)
			assert.Regexp(t, `^Usage:\n  `+regexp.QuoteMeta(cmd)+`\b`, stdout)
			assert.Contains(t, stdout, "--task-queue Q")
			assert.NotContains(t, stdout, "Exit codes:", "the whole help is `pveflow help`")
			assert.Equal(t, exitOK, helpCode)
			assert.Equal(t, stdout, helpStdout)
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
	var v versionInfo
	require.NoError(t, json.Unmarshal([]byte(stdout), &v))
	assert.Equal(t, "github.com/pveflow/pveflow", v.Module)
	assert.Equal(t, "v1.50.0", v.TemporalSDK)
	assert.Equal(t, runtime.Version(), v.GoVersion)
}
