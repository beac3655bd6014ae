// Package demo holds the scripts of make run, make run-stalled and make cluster; its tests run
// run.sh's refusal to start a second stack, in a copy of the tree that holds run.sh alone.
package demo

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkout is a directory laid out as the repository for run.sh: internal/demo/run.sh and a
// .run directory holding a running stack's log. It returns the checkout and the .run path.
func checkout(t *testing.T) (root, run string) {
	t.Helper()
	root = t.TempDir()
	script, err := os.ReadFile("run.sh")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "internal", "demo"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "internal", "demo", "run.sh"), script, 0o755))
	run = filepath.Join(root, ".run")
	require.NoError(t, os.Mkdir(run, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(run, "codec-server.log"), []byte("the running stack's log\n"), 0o600))
	return root, run
}

// snapshot is every file under dir with its content and modification time.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		content, err := os.ReadFile(path)
		files[path] = info.ModTime().String() + "\n" + string(content)
		return err
	}))
	return files
}

// runSh runs the checkout's run.sh with args and returns its exit code and output; it must end
// within seconds, as a refusal does: a start would wait for programs the checkout lacks.
func runSh(t *testing.T, root string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "internal", "demo", "run.sh")}, args...)...)
	cmd.WaitDelay = time.Second
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		out, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("run.sh %v did not stop within 10 s: %s", args, out)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	require.NoError(t, err)
	return 0, string(out)
}

func TestRunSh_aLiveStackOfTheCheckoutIsNamedAndLeftAlone(t *testing.T) {
	root, run := checkout(t)
	// A process whose command line is a run.sh's, as the running stack's is.
	stack := exec.Command("bash", "-c", `exec -a "$0" sleep 60`, filepath.Join(root, "internal", "demo", "run.sh"))
	require.NoError(t, stack.Start())
	t.Cleanup(func() {
		_ = stack.Process.Kill()
		_ = stack.Wait()
	})
	pid := strconv.Itoa(stack.Process.Pid)
	require.NoError(t, os.WriteFile(filepath.Join(run, "stack.pid"), []byte(pid+" stalled\n"), 0o600))
	before := snapshot(t, run)

	code, out := runSh(t, root, "demo")

	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "A pveflow stack already runs from this checkout: make run-stalled (internal/demo/run.sh, pid "+pid)
	assert.Contains(t, out, "Ctrl-C in its shell, or kill "+pid)
	assert.Equal(t, before, snapshot(t, run), "the running stack's files are untouched")
}

func TestRunSh_aStalePidFileDoesNotStopTheCheck(t *testing.T) {
	root, run := checkout(t)
	// A pid that is no run.sh: this test's own.
	require.NoError(t, os.WriteFile(filepath.Join(run, "stack.pid"), []byte(strconv.Itoa(os.Getpid())+" demo\n"), 0o600))

	code, out := runSh(t, root, "check")

	// Another stack's ports may be taken on a shared machine; a refusal names them, not a pid.
	assert.NotContains(t, out, "already runs from this checkout")
	if code != 0 {
		assert.Contains(t, out, "Ports of the stack are taken")
	}
}

func TestRunSh_aTakenPortOfTheStackIsNamedBeforeAnythingIsWritten(t *testing.T) {
	root, run := checkout(t)
	// The simulator's port, held by this test unless something holds it already.
	if ln, err := net.Listen("tcp", "127.0.0.1:8006"); err == nil {
		t.Cleanup(func() { ln.Close() })
	}
	before := snapshot(t, run)

	code, out := runSh(t, root, "demo")

	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "Ports of the stack are taken, by a stack of another checkout or another program:")
	assert.Contains(t, out, "  127.0.0.1:8006 (the Proxmox simulator)\n")
	assert.Equal(t, before, snapshot(t, run), "nothing is written")
}
