package workflows_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/kdomanski/iso9660"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/workflows"
)

// seedUserData is the user-data file on the seed ISO of the proxy, as cloud-init reads it.
func seedUserData(t *testing.T, w *world) string {
	t.Helper()
	return seedFile(t, w, proxy.SeedVolID("local", proxy.NameFromUID(uid)), "user-data")
}

// seedFile is file name on the seed ISO volID.
func seedFile(t *testing.T, w *world, volID, name string) string {
	t.Helper()
	for _, v := range w.cluster.Volumes() {
		if v.VolID != volID {
			continue
		}
		im, err := iso9660.OpenImage(bytes.NewReader(v.Data))
		require.NoError(t, err)
		root, err := im.RootDir()
		require.NoError(t, err)
		files, err := root.GetChildren()
		require.NoError(t, err)
		for _, f := range files {
			if f.Name() == name {
				data, err := io.ReadAll(f.Reader())
				require.NoError(t, err)
				return string(data)
			}
		}
		t.Fatalf("no %s on %s", name, volID)
	}
	t.Fatalf("no seed ISO %s", volID)
	return ""
}

func TestCreate_seedISOHoldsTheUserDataOfTheRunsInput(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.UserData = "#cloud-config\nchpasswd:\n  users:\n    - {name: debian, password: from-the-start-event}\n"

	_, err := w.create(in)

	require.NoError(t, err)
	assert.Equal(t, in.UserData, seedUserData(t, w))
}

func TestCreate_uploadISOInputCarriesNoUserData(t *testing.T) {
	w := newWorld(t)
	env := w.env()
	var uploads []map[string]any
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		if info.ActivityType.Name == "UploadISO" {
			var req map[string]any
			require.NoError(t, args.Get(&req))
			uploads = append(uploads, req)
		}
	})

	runOp(env, workflows.CreateProxyName, createInput())

	require.NoError(t, env.GetWorkflowError())
	require.Len(t, uploads, 1)
	assert.NotContains(t, uploads[0], "userData")
	data, err := json.Marshal(uploads[0])
	require.NoError(t, err)
	assert.NotContains(t, string(data), "cloud-config")
}

func TestCreate_userDataOverTheLimitIsPermanentBeforeAnyCall(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.UserData = "#cloud-config\n" + strings.Repeat("x", workflows.MaxUserDataBytes)

	_, err := w.create(in)

	assert.Equal(t, workflows.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "user-data is 65550 bytes, more than the limit of 65536")
	assert.NotContains(t, err.Error(), "cloud-config")
	assert.Empty(t, w.cluster.Calls())
}

func TestValidateUserData(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		wantErr string
	}{
		{"none", 0, ""},
		{"at the limit", workflows.MaxUserDataBytes, ""},
		{"a byte over", workflows.MaxUserDataBytes + 1, "user-data is 65537 bytes, more than the limit of 65536 (workflows.MaxUserDataBytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := workflows.ValidateUserData(strings.Repeat("s", tt.size))

			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.EqualError(t, err, tt.wantErr)
		})
	}
}
