package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBuildIDOf_table(t *testing.T) {
	tests := []struct {
		name     string
		version  string
		settings map[string]string
		want     string
	}{
		{"a clean checkout", "(devel)", map[string]string{"vcs.revision": "9f1c2ab34d5e6f708192a3b4c5d6e7f8091a2b3c", "vcs.modified": "false"}, "9f1c2ab34d5e"},
		{"uncommitted changes", "(devel)", map[string]string{"vcs.revision": "9f1c2ab34d5e6f708192a3b4c5d6e7f8091a2b3c", "vcs.modified": "true"}, "9f1c2ab34d5e-dirty"},
		{"a module version", "v1.4.0", nil, "v1.4.0"},
		{"the revision wins over the version", "v1.4.0", map[string]string{"vcs.revision": "abc"}, "abc"},
		{"nothing to go by", "(devel)", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := &debug.BuildInfo{Main: debug.Module{Version: tt.version}}
			for k, v := range tt.settings {
				info.Settings = append(info.Settings, debug.BuildSetting{Key: k, Value: v})
			}

			assert.Equal(t, tt.want, buildIDOf(info))
		})
	}
}
