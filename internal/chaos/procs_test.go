package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/testserver"
)

// The processes of a chaos run: each is the real binary, started, killed and started again as
// an operator's machine would see it. Their logs go to files in the run's directory, which a
// failed run keeps.

// proc is one process of the run, started again by restart after a kill.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string // file the process appends its output to

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
}

// start starts the process and, when ready is not empty, waits until its output has a line
// starting with ready, which it returns.
func (p *proc) start(ready string) (string, error) {
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", err
	}
	defer out.Close()
	fmt.Fprintf(out, "=== start %d at %s\n", p.starts+1, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stderr = out
	// Its own process group, so that it dies of the test's kills alone, not of a signal to the
	// test's group; and killed by the kernel when the test binary dies, so that a test killed
	// by its timeout leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	lines := make(chan string, 1)
	if ready == "" {
		cmd.Stdout = out
	} else {
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return "", err
		}
		go scanFor(stdout, p.log, ready, lines)
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.starts++
	p.mu.Unlock()
	if ready == "" {
		return "", nil
	}
	select {
	case line := <-lines:
		return line, nil
	case <-done:
		return "", fmt.Errorf("%s exited before it was ready; its log is %s:\n%s", p.name, p.log, tailOf(p.log))
	case <-time.After(2 * time.Minute):
		return "", fmt.Errorf("%s did not print %q within 2 minutes; its log is %s", p.name, ready, p.log)
	}
}

// mustStart is start for the test's goroutine, failing the test when the process does not
// start.
func (p *proc) mustStart(t testing.TB, ready string) string {
	t.Helper()
	line, err := p.start(ready)
	require.NoError(t, err)
	return line
}

// scanFor copies r to the file log, sending the first line that starts with prefix to found.
func scanFor(r io.Reader, log, prefix string, found chan<- string) {
	out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer out.Close()
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		fmt.Fprintln(out, sc.Text())
		if !sent && strings.HasPrefix(sc.Text(), prefix) {
			found <- sc.Text()
			sent = true
		}
	}
}

// kill ends the process with SIGKILL, as a crash or the OOM killer would, and reaps it.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// stop ends the process with SIGTERM, or SIGKILL when it does not stop within 30 s.
func (p *proc) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.kill()
	}
}

// running reports whether the process runs.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// tailOf is the end of a log file, for a failure message.
func tailOf(path string) string {
	data, _ := os.ReadFile(path)
	const keep = 4 << 10
	if len(data) > keep {
		data = data[len(data)-keep:]
	}
	return string(data)
}

// buildBinaries builds the worker and the simulator into dir and returns the path of the
// Temporal server's binary (testserver's).
func buildBinaries(t testing.TB, dir string) (temporal string) {
	t.Helper()
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./worker", "./internal/pvesim/cmd/pvesim")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	temporal, err = testserver.Binary()
	require.NoError(t, err)
	return temporal
}
