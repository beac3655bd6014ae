package main

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

const readUID = "3b9e7c21-6d4a-4f8e-a1c2-5e7f9a0b1c2d"

// readServer is a Temporal server with a worker in this process running the workflows over the
// simulator's model, which holds the running VM of proxy readUID, and the environment that
// points the CLI at it.
func readServer(t *testing.T) (env map[string]string, cfg config.Config) {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "..", "..", "testdata", "config", "simulator.yaml"))
	require.NoError(t, err)
	opts := pvesim.Default()
	opts.VMs = append(opts.VMs, pvesim.VM{Node: "pve1", VMID: proxy.VMIDFor(readUID, cfg.Proxmox.VMIDRange, 0), Running: true, Config: pve.VMConfig{
		"name":        proxy.NameFromUID(readUID),
		"description": proxy.FormatDescription(proxy.Mark{UID: readUID, CreatedAt: time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC)}),
		"tags":        proxy.Tag,
		"net0":        "virtio=BC:24:11:AA:00:01,bridge=vmbr0",
		"agent":       "1",
	}})
	cluster := pvesim.New(opts)
	server := testserver.New(t)
	serveWorkflows(server, core.DefaultTaskQueue, cfg, cluster)
	return map[string]string{"TEMPORAL_ADDRESS": server.Address(), "TEMPORAL_NAMESPACE": server.Namespace()}, cfg
}

func TestRun_readCommands(t *testing.T) {
	env, cfg := readServer(t)
	providerID := proxy.FormatProviderID(proxy.VMIDFor(readUID, cfg.Proxmox.VMIDRange, 0), proxy.NameFromUID(readUID))

	t.Run("get by UID", func(t *testing.T) {
		code, stdout, stderr := runCLI(env, "get", "--uid", readUID)

		require.Equal(t, exitOK, code, stderr)
		assert.Regexp(t, `proxy +`+providerID+`\nstate +Running\nvm +\d+ on node pve1\nipv4 +10\.`, stdout)
	})
	t.Run("get by provider ID as JSON", func(t *testing.T) {
		code, stdout, stderr := runCLI(env, "get", "--provider-id", providerID, "--json")

		require.Equal(t, exitOK, code, stderr)
		var res proxyvm.GetProxyResult
		require.NoError(t, json.Unmarshal([]byte(stdout), &res))
		assert.Equal(t, readUID, res.UID)
		assert.Equal(t, proxy.Running, res.State)
	})
	t.Run("get of an absent proxy exits 7", func(t *testing.T) {
		code, stdout, stderr := runCLI(env, "get", "--uid", "absent-proxy")

		assert.Equal(t, exitNotFound, code)
		assert.Empty(t, stdout)
		assert.Equal(t, "pveflow: get proxy absent-proxy: no VM carries its mark\n", stderr)
	})
	t.Run("ls", func(t *testing.T) {
		code, stdout, stderr := runCLI(env, "ls")

		require.Equal(t, exitOK, code, stderr)
		assert.Regexp(t, `PROVIDER ID +NODE +VM STATUS +UID +CREATED\n`+providerID+` +pve1 +running +`+readUID, stdout)
	})
	t.Run("check", func(t *testing.T) {
		code, stdout, stderr := runCLI(env, "check")

		require.Equal(t, exitOK, code, stderr)
		assert.Regexp(t, `pve1 +healthy +9\.2\.11 +local \(\d+ GiB free\) +1/1 +-`, stdout)
	})
	t.Run("check --last without a schedule", func(t *testing.T) {
		code, _, stderr := runCLI(env, "check", "--last")

		assert.Equal(t, exitError, code)
		assert.Equal(t, "pveflow: no scheduled health check has completed yet: no worker of task queue pveflow has made the health schedule "+
			"(worker --health-every); run 'pveflow check' to check now\n", stderr)
	})
	t.Run("check --last before the schedule's first run", func(t *testing.T) {
		c, err := client.Dial(client.Options{HostPort: env["TEMPORAL_ADDRESS"], Namespace: env["TEMPORAL_NAMESPACE"],
			Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, starter.New(c, core.DefaultTaskQueue).ApplyHealthSchedule(t.Context(), time.Hour))

		code, _, stderr := runCLI(env, "check", "--last")

		assert.Equal(t, exitError, code)
		assert.Equal(t, "pveflow: no scheduled health check has completed yet: the worker runs one every 1h0m0s (worker --health-every); "+
			"run 'pveflow check' to check now\n", stderr)
	})
}

func TestRun_checkWithAnUnhealthyNodeExits8(t *testing.T) {
	assert.Equal(t, exitUnhealthy, exitCode(unhealthy{nodes: []string{"pve2"}}))
}

func TestRun_readCommandsHelpSaysMoreThanTheirEntry(t *testing.T) {
	for cmd, want := range map[string]string{
		"get":   "It runs the GetProxy workflow",
		"ls":    "It runs the ListProxies\nworkflow",
		"check": "It runs the\nCheckHealth workflow",
	} {
		t.Run(cmd, func(t *testing.T) {
			code, stdout, _ := runCLI(nil, cmd, "--help")

			assert.Equal(t, exitOK, code)
			assert.Contains(t, stdout, "Usage:\n  pveflow "+cmd)
			assert.Contains(t, stdout, want)
		})
	}
}

func TestRun_getUsageErrorsBeforeConnecting(t *testing.T) {
	env, addr := unreachableTemporal(t)
	for name, args := range map[string][]string{
		"neither":     {"get"},
		"both":        {"get", "--uid", readUID, "--provider-id", "vms/100100/proxy-x"},
		"bad uid":     {"get", "--uid", "a b"},
		"bad ID":      {"get", "--provider-id", "vms/12/proxy-x"},
		"an argument": {"ls", "extra"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := runCLI(env, args...)

			assert.Equal(t, exitUsage, code, stderr)
			assert.NotContains(t, stderr, addr)
		})
	}
}
