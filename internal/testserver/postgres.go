//go:build linux

package testserver

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// PostgreSQL for the tests of make cluster's topology (internal/e2e) and the chaos run on it
// (internal/chaos): Debian's binaries, a private data directory per test.

// PostgresBin is the directory of PostgreSQL's initdb, postgres, pg_isready and psql: that of
// the PATH's initdb (after symbolic links: Debian links only some of them into a PATH
// directory), or Debian's newest /usr/lib/postgresql/<version>/bin. Without one the test skips, or fails
// when CI is set: CI must install Debian's postgresql.
func PostgresBin(t testing.TB) string {
	t.Helper()
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if initdb, err = filepath.EvalSymlinks(initdb); err == nil {
			return filepath.Dir(initdb)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(a) - version(b) })
	for _, dir := range slices.Backward(dirs) {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir
		}
	}
	missing(t, "PostgreSQL's binaries (initdb, postgres) are neither on PATH nor in /usr/lib/postgresql/*/bin; install them with: apt-get install -y postgresql")
	return ""
}

// missing skips t for want of something, or fails it when CI is set.
func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why + " (CI is set: CI must provide it)")
	}
	t.Skip(why)
}

// Postgres is a PostgreSQL that a test started: its port, and its postmaster's process id.
type Postgres struct{ Port, Pid int }

// StartPostgres starts a PostgreSQL of t's own on a free loopback port, with its data in
// t.TempDir() and a superuser temporal that needs no password. It stops when t ends, and dies
// with the test binary. PostgreSQL refuses to run as root: as root, it runs as the postgres
// user.
func StartPostgres(t testing.TB) Postgres {
	t.Helper()
	bin := PostgresBin(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.Mkdir(data, 0o700))
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			missing(t, "PostgreSQL refuses to run as root, and there is no postgres user to run it as: "+err.Error())
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// t.TempDir's directories are root's, mode 0700: the postgres user must reach data.
		require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
		require.NoError(t, os.Chmod(dir, 0o755))
		require.NoError(t, os.Chown(data, uid, gid))
	}

	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "temporal", "--auth=trust", "--encoding=UTF8", "--no-locale")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := initdb.CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)

	port := FreePort(t)
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	require.NoError(t, err)
	// -h: TCP on loopback only; -k "": no Unix socket.
	pg := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-h", "127.0.0.1", "-k", "")
	pg.Stdout, pg.Stderr = logFile, logFile
	pg.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, pg.Start())
	exited := make(chan struct{})
	go func() {
		_ = pg.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = pg.Process.Signal(syscall.SIGQUIT) // immediate shutdown: the data goes with t
		<-exited
		logFile.Close()
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(port)).Run()
		if err == nil {
			return Postgres{Port: port, Pid: pg.Process.Pid}
		}
		if _, notReady := errors.AsType[*exec.ExitError](err); !notReady {
			require.NoError(t, err, "pg_isready")
		}
		select {
		case <-exited:
		case <-time.After(100 * time.Millisecond):
			if time.Now().Before(deadline) {
				continue
			}
		}
		log, _ := os.ReadFile(logFile.Name())
		t.Fatalf("PostgreSQL did not become ready on port %d; its log:\n%s", port, log)
	}
}

// SetUpTemporalSchema creates Temporal's databases on the PostgreSQL at port and sets up their
// schemas with pveflow-temporal sql-tool, as make cluster does.
func SetUpTemporalSchema(t testing.TB, port int) {
	t.Helper()
	bin, err := Binary()
	require.NoError(t, err)
	for _, db := range [][2]string{{"temporal", "postgresql/v12/temporal"}, {"temporal_visibility", "postgresql/v12/visibility"}} {
		tool := []string{"sql-tool", "--plugin", "postgres12", "--ep", "127.0.0.1", "-p", strconv.Itoa(port), "-u", "temporal", "--db", db[0]}
		for _, step := range [][]string{{"create-database"}, {"setup-schema", "-v", "0.0"}, {"update-schema", "--schema-name", db[1]}} {
			out, err := exec.Command(bin, append(tool, step...)...).CombinedOutput()
			require.NoError(t, err, "%s %s: %s", bin, strings.Join(append(tool, step...), " "), out)
		}
	}
}
