package codec

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// newKey returns a random key as a key file holds it.
func newKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, KeySize)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(b)
}

// writeKeyFile writes content to a mode-0600 key file and returns its path.
func writeKeyFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// loadCodec loads a Codec from a key file of content.
func loadCodec(t *testing.T, content string) *Codec {
	t.Helper()
	c, err := LoadKeyFile(writeKeyFile(t, content))
	require.NoError(t, err)
	return c
}
