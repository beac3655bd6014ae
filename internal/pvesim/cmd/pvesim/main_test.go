package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

// pvesimBinary builds this command into a temporary directory.
func pvesimBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pvesim")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// startPvesim runs the simulator on a free port with its files in dir and the state file
// state, and returns a client of its API and a function that stops it with SIGTERM and
// returns its exit error.
func startPvesim(t *testing.T, bin, dir, state string) (*pve.Client, func() error) {
	t.Helper()
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-dir", dir, "-state-file", state,
		"-task-scale", "0.01", "-auth-delay", "0", "-resources-lag", "0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var url string
	lines := bufio.NewScanner(stdout)
	for url == "" && lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "pvesim serves the Proxmox VE API at "); ok {
			url = strings.TrimSuffix(rest, "/api2/json")
		}
	}
	require.NotEmpty(t, url, "pvesim prints its address")
	go func() {
		for lines.Scan() {
		}
	}()
	client, err := pve.NewClient(pve.ClientConfig{URL: url, TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.pem")})
	require.NoError(t, err)
	return client, func() error {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		return cmd.Wait()
	}
}

// waitTask waits for a task to stop and returns its exit status.
func waitTask(t *testing.T, client *pve.Client, upid pve.UPID) string {
	t.Helper()
	var exit string
	require.Eventually(t, func() bool {
		st, err := client.TaskStatus(t.Context(), upid.Node(), upid)
		require.NoError(t, err)
		exit = st.ExitStatus
		return st.Status == pve.TaskStopped
	}, 10*time.Second, 20*time.Millisecond)
	return exit
}

func TestPvesim_aRestartWithTheStateFileHasTheClonesOfBefore(t *testing.T) {
	bin, dir := pvesimBinary(t), t.TempDir()
	state := filepath.Join(dir, "cluster.json")
	client, stop := startPvesim(t, bin, dir, state)
	clone, err := client.Clone(t.Context(), "pve1", 9000, pve.CloneParams{NewID: 4242, Name: "proxy-a", Full: true, Storage: "local-lvm"})
	require.NoError(t, err)
	require.Equal(t, "OK", waitTask(t, client, clone))
	require.NoError(t, stop(), "exits 0 on SIGTERM, having saved its state")

	client, _ = startPvesim(t, bin, dir, state)

	cfg, err := client.VMConfig(t.Context(), "pve1", 4242)
	require.NoError(t, err, "the clone is there after the restart")
	assert.Equal(t, "proxy-a", cfg["name"])
	assert.Equal(t, "OK", waitTask(t, client, clone), "and so is its task")
}

func TestStateFile_savesOnlyWhatChanged(t *testing.T) {
	clk := pvesim.NewManualClock(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	opts := pvesim.Default()
	opts.Clock = clk
	f := &stateFile{cluster: pvesim.New(opts), path: filepath.Join(t.TempDir(), "cluster.json")}
	require.NoError(t, f.save())
	first, err := os.Stat(f.path)
	require.NoError(t, err)
	require.NoError(t, os.Chtimes(f.path, time.Time{}, first.ModTime().Add(-time.Hour)))

	require.NoError(t, f.save())

	again, err := os.Stat(f.path)
	require.NoError(t, err)
	assert.Equal(t, first.ModTime().Add(-time.Hour), again.ModTime(), "an unchanged cluster is not written again")
}

func TestLoadState_aBrokenFileIsNamedWithWhatToDo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.json")
	require.NoError(t, os.WriteFile(path, []byte("{not json"), 0o600))

	_, err := loadState(pvesim.New(pvesim.Default()), path)

	assert.ErrorContains(t, err, "state file "+path+": ")
	assert.ErrorContains(t, err, "remove it to start from the default cluster")
}

func TestLoadState_noFileIsTheDefaultCluster(t *testing.T) {
	cluster := pvesim.New(pvesim.Default())
	path := filepath.Join(t.TempDir(), "pvesim", "cluster.json")

	restored, err := loadState(cluster, path)

	require.NoError(t, err)
	assert.False(t, restored)
	assert.Len(t, cluster.VMs(), 1, "the template")
	assert.DirExists(t, filepath.Dir(path), "made for the first save")
}
