package simserver

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

// The tests in this file run pveflow's real client against the simulator's real model.

func realClient(t *testing.T, s *Server) *pve.Client {
	t.Helper()
	c, err := pve.NewClient(pve.ClientConfig{URL: s.URL(), TokenFile: s.TokenFile(), CAFile: s.CAFile()})
	require.NoError(t, err)
	return c
}

// waitTask polls a task until it stops and requires it to have succeeded.
func waitTask(t *testing.T, ctx context.Context, c pve.API, upid pve.UPID) {
	t.Helper()
	node := upid.Node()
	require.NotEmpty(t, node, "malformed UPID %q", upid)
	var st pve.TaskStatus
	require.Eventually(t, func() bool {
		var err error
		st, err = c.TaskStatus(ctx, node, upid)
		require.NoError(t, err)
		return st.Done()
	}, 30*time.Second, 10*time.Millisecond, "task %s never stopped", upid)
	_, err := st.Result()
	require.NoError(t, err)
}

func TestServer_realClientCreatesAndDestroysVM(t *testing.T) {
	const (
		node     = "pve1"
		template = 9000
		vmid     = 123456
		isoName  = "seed-123456.iso"
		isoVolID = "local:iso/" + isoName
	)
	ctx := t.Context()
	cluster := pvesim.New(pvesim.Default())
	s := startServer(t, cluster)
	c := realClient(t, s)

	upid, err := c.Clone(ctx, node, template, pve.CloneParams{NewID: vmid, Name: "proxy-3k7q2m9x4w8p1r5t", Description: "proxy-operator-managed=true\n"})
	require.NoError(t, err)
	info, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	assert.Equal(t, "qmclone", info.Type)
	waitTask(t, ctx, c, upid)

	iso := bytes.Repeat([]byte("CD001"), 8<<10)
	upid, err = c.UploadISO(ctx, node, "local", isoName, bytes.NewReader(iso), int64(len(iso)))
	require.NoError(t, err)
	waitTask(t, ctx, c, upid)

	require.NoError(t, c.SetVMConfig(ctx, node, vmid, pve.VMConfig{"ide2": isoVolID + ",media=cdrom", "cores": "4"}))
	cfg, err := c.VMConfig(ctx, node, vmid)
	require.NoError(t, err)
	assert.Equal(t, "4", cfg["cores"])
	assert.Equal(t, "proxy-3k7q2m9x4w8p1r5t", cfg["name"])
	assert.True(t, strings.HasPrefix(cfg["ide2"], isoVolID), cfg["ide2"])

	upid, err = c.Start(ctx, node, vmid)
	require.NoError(t, err)
	waitTask(t, ctx, c, upid)
	status, err := c.VMStatus(ctx, node, vmid)
	require.NoError(t, err)
	assert.Equal(t, "running", status.Status)

	mac, _, _ := strings.Cut(strings.TrimPrefix(cfg["net0"], "virtio="), ",")
	var ifaces []pve.AgentInterface
	require.Eventually(t, func() bool {
		ifaces, err = c.AgentNetworkInterfaces(ctx, node, vmid)
		if pve.IsClass(err, pve.AgentNotRunning) {
			return false
		}
		require.NoError(t, err)
		return true
	}, 30*time.Second, 10*time.Millisecond, "guest agent never answered")
	assert.True(t, hasInterfaceWithMAC(ifaces, mac), "no interface with net0's MAC %s in %+v", mac, ifaces)

	upid, err = c.Stop(ctx, node, vmid)
	require.NoError(t, err)
	waitTask(t, ctx, c, upid)

	upid, err = c.Destroy(ctx, node, vmid)
	require.NoError(t, err)
	waitTask(t, ctx, c, upid)

	upid, err = c.DeleteVolume(ctx, node, "local", isoVolID)
	require.NoError(t, err)
	if upid != "" {
		waitTask(t, ctx, c, upid)
	}

	_, err = c.VMConfig(ctx, node, vmid)
	assert.True(t, pve.IsClass(err, pve.NotFound), "VM %d still there: %v", vmid, err)
	resources, err := c.ClusterResources(ctx)
	require.NoError(t, err)
	for _, r := range resources {
		assert.Equal(t, template, r.VMID, "left behind: %+v", r)
	}
	for _, v := range cluster.Volumes() {
		assert.NotEqual(t, isoVolID, v.VolID, "the seed ISO is left behind")
		assert.NotContains(t, v.VolID, "vm-123456-", "a disk is left behind")
	}
}

func hasInterfaceWithMAC(ifaces []pve.AgentInterface, mac string) bool {
	for _, i := range ifaces {
		if strings.EqualFold(i.HardwareAddress, mac) && len(i.IPAddresses) > 0 {
			return true
		}
	}
	return false
}

func TestServer_realClientReadsModelErrors(t *testing.T) {
	const msg = "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist"
	tests := []struct {
		name        string
		pve82       bool
		wantMessage string
	}{
		{"PVE 9", false, msg},
		{"PVE 8.2", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := pvesim.Default()
			opts.PVE82 = tt.pve82
			s := startServer(t, pvesim.New(opts))

			_, err := realClient(t, s).VMConfig(t.Context(), "pve1", 999)

			var apiErr *pve.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 500, apiErr.Status)
			assert.Equal(t, msg, apiErr.Reason)
			assert.Equal(t, tt.wantMessage, apiErr.Message)
			assert.Equal(t, pve.NotFound, pve.Classify(err))
		})
	}
}
