package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValidateUID_table(t *testing.T) {
	tests := []struct {
		uid     string
		wantErr string // empty: valid
	}{
		{uid: "0f5b1c9e-4a7d-4e8b-9a51-7c2e3d4f5a60"}, // Kubernetes metadata.uid
		{uid: "0F5B1C9E-4A7D-4E8B-9A51-7C2E3D4F5A60"},
		{uid: "01JD8Z6K5W3Q2V9R7T4M1N0P8S"}, // ULID
		{uid: "V1StGXR8_Z5jdHi6B-myT"},      // nanoid
		{uid: "egress.eu-west-1"},
		{uid: "a"},
		{uid: strings.Repeat("a", MaxUIDLength)},
		{uid: "", wantErr: "empty"},
		{uid: strings.Repeat("a", MaxUIDLength+1), wantErr: "at most 128"},
		{uid: "abc ", wantErr: `"abc "`},
		{uid: " abc", wantErr: "only ASCII"},
		{uid: "abc\nproxy-operator-uid=victim", wantErr: `\n`},
		{uid: "a=b", wantErr: "only ASCII"},
		{uid: "ns/name", wantErr: "only ASCII"},
		{uid: "-abc", wantErr: "starting with a letter or digit"},
		{uid: "ünïcode", wantErr: "only ASCII"},
		{uid: "tab\there", wantErr: "only ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.uid, func(t *testing.T) {
			err := ValidateUID(tt.uid)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}
