package codec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadKeyFile_firstKeyEncryptsAllDecrypt(t *testing.T) {
	c := loadCodec(t, "# pveflow payload keys\n\n  new "+newKey(t)+"  \r\nold.2024-01 "+newKey(t)+"\n")

	assert.Equal(t, "new", c.EncryptKeyID())
	assert.Equal(t, []string{"new", "old.2024-01"}, c.KeyIDs())
}

func TestLoadKeyFile_refusesBadContentWithoutQuotingKeys(t *testing.T) {
	key := newKey(t)
	short := key[:len(key)-4] // 30 bytes, still base64: "...=" dropped with its 3 bytes
	tests := []struct {
		name    string
		content string
		wantErr string
	}{
		{name: "key alone", content: key + "\n", wantErr: `line 1: has 1 fields, want 2`},
		{name: "three fields", content: "k1 " + key + " extra\n", wantErr: `line 1: has 3 fields, want 2`},
		{name: "fields swapped", content: key + " k1\n", wantErr: `line 1: the key ID is not`},
		{name: "short key", content: "# c\nk1 " + short + "\n", wantErr: `line 2: key "k1" is 30 bytes, want 32`},
		{name: "not base64", content: "k1 " + strings.ReplaceAll(key, "=", "!") + "\n", wantErr: `line 1: key "k1" is not standard base64`},
		{name: "duplicate ID", content: "k1 " + key + "\nk2 " + newKey(t) + "\nk1 " + key + "\n", wantErr: `line 3: key ID "k1" is already on line 1`},
		{name: "no key", content: "# nothing yet\n\n", wantErr: `no key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeKeyFile(t, tt.content)

			_, err := LoadKeyFile(path)

			require.ErrorIs(t, err, ErrKeyFile)
			assert.ErrorContains(t, err, path)
			assert.ErrorContains(t, err, tt.wantErr)
			assert.NotContains(t, err.Error(), key)
			assert.NotContains(t, err.Error(), short)
		})
	}
}

func TestLoadKeyFile_refusesAFileOthersCanReadOrItsGroupCanWrite(t *testing.T) {
	for _, tt := range []struct {
		mode os.FileMode
		want string
	}{
		{0o644, "mode 0644"},
		{0o660, "mode 0660"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			path := writeKeyFile(t, "k1 "+newKey(t)+"\n")
			require.NoError(t, os.Chmod(path, tt.mode))

			_, err := LoadKeyFile(path)

			require.ErrorIs(t, err, ErrKeyFile)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestLoadKeyFile_acceptsFileItsGroupCanRead(t *testing.T) {
	path := writeKeyFile(t, "k1 "+newKey(t)+"\n")
	require.NoError(t, os.Chmod(path, 0o440))

	_, err := LoadKeyFile(path)

	assert.NoError(t, err)
}

func TestLoadKeyFile_missingFile(t *testing.T) {
	_, err := LoadKeyFile(filepath.Join(t.TempDir(), "absent"))

	assert.ErrorIs(t, err, os.ErrNotExist)
}
