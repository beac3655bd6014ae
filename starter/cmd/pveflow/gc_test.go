package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/reads"
)

const keptUID = "9c4d2e1f-0a3b-4c5d-8e6f-7a8b9c0d1e2f"

func TestRun_gc(t *testing.T) {
	env, cfg := readServer(t)
	providerID := proxy.FormatProviderID(proxy.VMIDFor(readUID, cfg.Proxmox.VMIDRange, 0), proxy.NameFromUID(readUID))
	keepFile := filepath.Join(t.TempDir(), "keep")
	require.NoError(t, os.WriteFile(keepFile, []byte("# the controller's Proxies\n"+keptUID+"\n\n"), 0o600))

	t.Run("an empty kept set exits 2", func(t *testing.T) {
		empty := filepath.Join(t.TempDir(), "empty")
		require.NoError(t, os.WriteFile(empty, []byte("# nothing\n"), 0o600))

		code, stdout, stderr := runCLI(env, "gc", "--keep-file", empty)

		assert.Equal(t, exitUsage, code, stderr)
		assert.Empty(t, stdout)
		assert.Equal(t, "pveflow: gc: refusing to collect garbage: the kept set is empty, which would delete every proxy; "+
			"give --all to collect every proxy on purpose\nRun 'pveflow help' for usage.\n", stderr, "names the flag, not the Go field KeepNone")
	})
	t.Run("dry run lists the proxy not kept", func(t *testing.T) {
		code, stdout, stderr := runCLI(env, "gc", "--keep-file", keepFile, "--dry-run")

		require.Equal(t, exitOK, code, stderr)
		assert.Regexp(t, `KIND +ID +NODE +UID +OUTCOME +DETAIL\nvm +`+providerID+` +pve1 +`+readUID+` +found +-\n$`, stdout)
	})
	t.Run("deletes it, with the kept set from a command", func(t *testing.T) {
		code, stdout, stderr := runCLI(env, "gc", "--keep-command", "echo "+keptUID, "--json")

		require.Equal(t, exitOK, code, stderr)
		var res fleet.CollectGarbageResult
		require.NoError(t, json.Unmarshal([]byte(stdout), &res))
		require.Len(t, res.VMs, 1)
		assert.Equal(t, reads.GarbageDeleted, res.VMs[0].Outcome)
	})
	t.Run("then finds none", func(t *testing.T) {
		code, stdout, stderr := runCLI(env, "gc", "--all", "--dry-run")

		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, "no garbage found\n", stdout)
	})
}

func TestRun_gcUsageErrorsBeforeConnecting(t *testing.T) {
	env, addr := unreachableTemporal(t)
	for name, args := range map[string][]string{
		"no kept set":          {"gc"},
		"--all with --keep":    {"gc", "--all", "--keep", keptUID},
		"a bad UID":            {"gc", "--keep", "a b"},
		"a grace of zero":      {"gc", "--all", "--grace", "0s"},
		"an unknown flag":      {"gc", "--all", "--force"},
		"a positional keep ID": {"gc", keptUID},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := runCLI(env, args...)

			assert.Equal(t, exitUsage, code, stderr)
			assert.NotContains(t, stderr, addr)
		})
	}
}

func TestKeepSource_unionOfUIDsFilesAndCommands(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keep")
	require.NoError(t, os.WriteFile(file, []byte("# kept\n  b  \n\nc\n"), 0o600))
	k := keepSource{uids: []string{"a"}, files: []string{file}, commands: []string{"printf 'd\\n#e\\nf'"}}

	uids, err := k.read(t.Context())

	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c", "d", "f"}, uids)
}

func TestKeepSource_failingCommandOrMissingFileIsNamed(t *testing.T) {
	_, err := keepSource{commands: []string{"echo no cluster >&2; exit 3"}}.read(t.Context())
	assert.EqualError(t, err, `--keep-command "echo no cluster >&2; exit 3": exit status 3: no cluster`)

	_, err = keepSource{files: []string{"/nonexistent/keep"}}.read(t.Context())
	assert.ErrorContains(t, err, "--keep-file: open /nonexistent/keep")
	assert.Equal(t, exitUsage, exitCode(err), "a file the operator named that is not there is their mistake")
}

func TestPrintGarbage_saysWhatTheGracePeriodLeft(t *testing.T) {
	tests := []struct {
		name string
		res  fleet.CollectGarbageResult
		want string
	}{
		{"nothing young", fleet.CollectGarbageResult{Grace: time.Hour}, "no garbage found\n"},
		{"one young VM", fleet.CollectGarbageResult{Grace: time.Hour,
			YoungVMs: []fleet.GarbageVM{{VMID: 124973, Name: "proxy-x", Age: 5 * time.Minute}},
		}, "no garbage found\n1 item younger than the 1h0m0s grace was left: VM 124973 (proxy-x, 5m0s old)\n"},
		{"a young VM and a young ISO", fleet.CollectGarbageResult{Grace: time.Hour,
			YoungVMs:  []fleet.GarbageVM{{VMID: 124973, Name: "proxy-x", Age: 5 * time.Minute}},
			YoungISOs: []fleet.GarbageISO{{VolID: "local:iso/proxy-y-seed.iso", Node: "pve1", Age: 10*time.Minute + 300*time.Millisecond}},
		}, "no garbage found\n2 items younger than the 1h0m0s grace were left: VM 124973 (proxy-x, 5m0s old), local:iso/proxy-y-seed.iso on pve1 (10m0s old)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout strings.Builder
			c := &cli{stdout: &stdout}

			require.NoError(t, c.printGarbage(tt.res))

			assert.Equal(t, tt.want, stdout.String())
		})
	}
}

func TestPrintGarbage_listsWhatTheRunDidInTheAddressPools(t *testing.T) {
	held := activities.AddressHolding{UID: keptUID, IPv4: "192.0.2.10/24", IPv6: "2001:db8::10/64"}
	other := activities.AddressHolding{UID: readUID, IPv4: "192.0.2.10/24"}
	res := fleet.CollectGarbageResult{Grace: time.Hour, Pools: []fleet.GarbagePool{
		{Pool: "egress", Restored: []activities.AddressHolding{held}, Freed: []activities.AddressHolding{other},
			Conflicts: []activities.AddressConflict{{Held: other, Allocation: held}},
			Kept:      []fleet.KeptAddresses{{AddressHolding: other, Detail: "its proxy is kept"}}},
		{Pool: "spare"},
		{Pool: "out", Error: "reconcile address pool out: backend trouble"},
	}}
	var stdout strings.Builder
	c := &cli{stdout: &stdout}

	require.NoError(t, c.printGarbage(res))

	assert.Equal(t, strings.Join([]string{
		"KIND     ID                                    NODE  UID                                   OUTCOME   DETAIL",
		"address  egress:192.0.2.10/24,2001:db8::10/64  -     " + keptUID + "  restored  a VM holds it by its mark",
		"address  egress:192.0.2.10/24                  -     " + readUID + "  freed     no VM holds it",
		"address  egress:192.0.2.10/24                  -     " + readUID + "  conflict  a VM holds it by its mark; the pool gives 192.0.2.10/24,2001:db8::10/64 to " + keptUID,
		"address  egress:192.0.2.10/24                  -     " + readUID + "  kept      its proxy is kept",
		"pool     out                                   -     -                                     failed    reconcile address pool out: backend trouble",
		"",
	}, "\n"), stdout.String())
	assert.True(t, res.Failed())

	stdout.Reset()
	res.DryRun = true
	require.NoError(t, c.printGarbage(res))
	assert.Contains(t, stdout.String(), "to restore")
	assert.Contains(t, stdout.String(), "to free")
}

func TestPrintGarbage_listsAnOrphanDiskAndAStaleCloneLockAfterTheTable(t *testing.T) {
	res := fleet.CollectGarbageResult{Grace: time.Hour,
		Disks:      []reads.GarbageDisk{{VMID: 150000, GarbageVolume: reads.GarbageVolume{VolID: "local-lvm:vm-150000-disk-0", Node: "pve1", Outcome: reads.GarbageDeleted}}},
		CloneLocks: []reads.CloneLock{{VMID: 124973, Node: "pve1", Stale: true, Command: "qm unlock 124973", Detail: "no clone task runs"}},
	}
	var stdout strings.Builder

	require.NoError(t, (&cli{stdout: &stdout}).printGarbage(res))

	assert.Regexp(t, `\ndisk +local-lvm:vm-150000-disk-0 +pve1 +- +deleted +-\n`, stdout.String())
	assert.Regexp(t, `\n\nCLONE LOCK .*\nVM 124973 +pve1 +- +yes +unknown +qm unlock 124973 +no clone task runs\n$`, stdout.String())
}
