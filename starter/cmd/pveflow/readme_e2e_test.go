package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/docsection"
)

// The README's CLI block, run as a reader runs it against make run's stack: from the top of a
// checkout (bin/pveflow, the key in .run/codec.key), with a worker that encrypts, under set -e,
// so that a line that fails stops it.
func TestE2E_theREADMEsCLIBlockRunsUnderSetE(t *testing.T) {
	s := newE2E(t, "e2e-readme")
	top := t.TempDir()
	require.NoError(t, os.Symlink(shared.bin, filepath.Join(top, "bin")))
	require.NoError(t, os.Mkdir(filepath.Join(top, ".run"), 0o700))
	key := filepath.Join(top, ".run", "codec.key")
	keygen := s.pveflow("codec-keygen", "--out", key)
	require.Equal(t, exitOK, keygen.code, keygen.stderr)
	s.extraEnv = append(s.extraEnv, "PVEFLOW_CODEC_KEY_FILE="+key, "PVEFLOW_TASK_QUEUE="+s.taskQueue)
	s.startSimulatorWorker()
	block := docsection.Block(t, filepath.Join("..", "..", "..", "README.md"), "sh", "bin/pveflow create ")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// -x: a failure's output ends with the line that failed.
	sh := exec.CommandContext(ctx, "bash", "--norc", "--noprofile", "-e", "-x", "-c", block)
	sh.Dir = top
	sh.Env = append(s.env(), "PATH="+os.Getenv("PATH"), "HOME="+top)

	out, err := sh.CombinedOutput()

	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "the wait of the create of proxy 0f5b1c9e has ended\n",
		"wait --retry-now after create --wait says that nothing waits")
}
