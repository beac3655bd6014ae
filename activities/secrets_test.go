package activities_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
)

// TestSecrets_neverInLogsErrorsOrResults runs every activity through the real client and the
// simulator's REST server, once succeeding and once failing, and once with a wrong token, and
// looks for the token's secret and a cloud-init sentinel in everything the activities wrote.
func TestSecrets_neverInLogsErrorsOrResults(t *testing.T) {
	const userDataSecret = "user-data-sentinel-7d1f0c2e"
	cluster := pvesim.New(pvesim.Default())
	srv, err := simserver.Start(simserver.Options{API: cluster, Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	token, err := os.ReadFile(srv.TokenFile())
	require.NoError(t, err)
	_, tokenSecret, ok := strings.Cut(strings.TrimSpace(string(token)), "=")
	require.True(t, ok)
	wrongTokenFile := filepath.Join(t.TempDir(), "token")
	const wrongSecret = "wrong-token-sentinel-5b2e9a41"
	require.NoError(t, os.WriteFile(wrongTokenFile, []byte(simserver.DefaultTokenUser+"="+wrongSecret+"\n"), 0o600))

	var log bytes.Buffer
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	var written []string // every error text and result the activities gave back
	runAll := func(tokenFile string) {
		client, err := pve.NewClient(pve.ClientConfig{URL: srv.URL(), CAFile: srv.CAFile(), TokenFile: tokenFile})
		require.NoError(t, err)
		env := suite.NewTestActivityEnvironment()
		acts := &activities.Activities{API: client, Proxmox: config.Default().Proxmox}
		env.RegisterActivity(acts)
		ref := activities.VMRef{Node: "pve1", VMID: 9000}
		calls := []struct {
			method string
			fn     any
			arg    any
		}{
			{"Version", acts.Version, nil},
			{"NodeStatus", acts.NodeStatus, "pve1"},
			{"StorageStatus", acts.StorageStatus, activities.StorageRef{Node: "pve1", Storage: "local"}},
			{"ClusterResources", acts.ClusterResources, activities.ResourcesFilter{}},
			{"VMConfig", acts.VMConfig, activities.VMConfigRequest{VMRef: ref}},
			{"Clone", acts.Clone, activities.CloneRequest{Node: "pve1", TemplateVMID: 9000, Params: pve.CloneParams{NewID: 123456, Name: "proxy-test", Full: true}}},
			{"SetVMConfig", acts.SetVMConfig, activities.SetVMConfigRequest{VMRef: ref, Params: pve.VMConfig{"cores": "2"}}},
			{"Resize", acts.Resize, activities.ResizeRequest{VMRef: ref, Disk: "scsi0", Size: "1G"}},
			{"Start", acts.Start, ref},
			{"Stop", acts.Stop, ref},
			{"VMStatus", acts.VMStatus, activities.VMStatusRequest{VMRef: ref}},
			{"Destroy", acts.Destroy, activities.VMRef{Node: "pve1", VMID: 999}},
			{"TaskStatus", acts.TaskStatus, activities.TaskStatusRequest{UPID: "UPID:pve1:00000001:00000001:00000001:qmstart:1:root@pam:"}},
			{"AgentNetworkInterfaces", acts.AgentNetworkInterfaces, activities.AgentRequest{VMRef: ref}},
			{"UploadISO", acts.UploadISO, activities.UploadISORequest{StorageRef: activities.StorageRef{Node: "pve1", Storage: "local"}, Name: "proxy-test", Seed: "proxy-test", InstanceID: "uid",
				UserData: "#cloud-config\npassword: " + userDataSecret + "\n"}},
			{"DeleteVolume", acts.DeleteVolume, activities.DeleteVolumeRequest{StorageRef: activities.StorageRef{Node: "pve1", Storage: "local"}, VolID: "local:iso/proxy-test-seed.iso"}},
		}
		for _, failing := range []bool{false, true} {
			for _, c := range calls {
				if failing {
					cluster.FailNext(c.method, &pve.APIError{Status: 500, Reason: "upload failed", Message: "upload failed"})
				}
				var args []any
				if c.arg != nil {
					args = append(args, c.arg)
				}
				val, err := env.ExecuteActivity(c.fn, args...)
				if err != nil {
					written = append(written, err.Error())
					continue
				}
				if val.HasValue() {
					var out any
					require.NoError(t, val.Get(&out))
					data, err := json.Marshal(out)
					require.NoError(t, err)
					written = append(written, string(data))
				}
			}
		}
	}
	runAll(srv.TokenFile())
	runAll(wrongTokenFile)

	require.NotEmpty(t, written)
	everything := strings.Join(written, "\n") + log.String()
	for _, secret := range []string{tokenSecret, wrongSecret, userDataSecret} {
		assert.NotContains(t, everything, secret)
	}
	assert.Contains(t, everything, "401", "the wrong token was refused")
}
