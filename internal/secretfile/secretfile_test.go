package secretfile_test

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/internal/secretfile"
)

func TestCheckMode(t *testing.T) {
	const fix = " gives others access to it, or its group write access: chmod 600 /etc/pveflow/secret (640 to let its group read it)"
	for _, tt := range []struct {
		mode    fs.FileMode
		wantErr string // "" when the mode is accepted
	}{
		{0o600, ""},
		{0o400, ""},
		{0o640, ""},
		{0o440, ""},
		{0o700, ""},
		{0o750, ""},
		{0o644, "mode 0644" + fix},
		{0o604, "mode 0604" + fix},
		{0o602, "mode 0602" + fix},
		{0o601, "mode 0601" + fix},
		{0o660, "mode 0660" + fix},
		{0o620, "mode 0620" + fix},
		{0o777, "mode 0777" + fix},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			err := secretfile.CheckMode("/etc/pveflow/secret", tt.mode)

			if tt.wantErr == "" {
				assert.NoError(t, err)
			} else {
				assert.EqualError(t, err, tt.wantErr)
			}
		})
	}
}
