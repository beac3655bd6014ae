package codec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteNewKeyFile_writesALoadableFileOnlyItsOwnerReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "codec.key")

	require.NoError(t, WriteNewKeyFile(path, "k1"))

	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	c, err := LoadKeyFile(path)
	require.NoError(t, err)
	assert.Equal(t, "k1", c.EncryptKeyID())
}

func TestWriteNewKeyFile_refusesToReplaceAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "codec.key")
	require.NoError(t, os.WriteFile(path, []byte("old keys\n"), 0o600))

	assert.ErrorContains(t, WriteNewKeyFile(path, "k1"), "is not replaced")

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "old keys\n", string(data))
}

func TestWriteNewKeyFile_refusesABadKeyID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "codec.key")

	assert.ErrorIs(t, WriteNewKeyFile(path, "-bad id"), ErrKeyFile)
	assert.NoFileExists(t, path)
}
