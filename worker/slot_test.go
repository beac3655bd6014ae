package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClaimSlot_twoLiveWorkersHoldTwoSlots(t *testing.T) {
	dir := t.TempDir()
	a, before, err := claimSlot(dir, "proxies", "worker@host:1")
	require.NoError(t, err)
	defer a.Close()
	assert.Zero(t, before)

	b, before, err := claimSlot(dir, "proxies", "worker@host:2")
	require.NoError(t, err)
	defer b.Close()
	assert.Zero(t, before, "a's slot is held")
	assert.NotEqual(t, a.Name(), b.Name())
}

func TestClaimSlot_aWorkerStartedAfterOneExitedReplacesIt(t *testing.T) {
	dir := t.TempDir()
	a, _, err := claimSlot(dir, "proxies", "worker@host:1")
	require.NoError(t, err)
	a.recordCalls(12)
	a.recordCalls(3)
	require.NoError(t, a.Close()) // the kernel drops the lock with the process's last descriptor

	b, before, err := claimSlot(dir, "proxies", "worker@host:2")
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, predecessor{identity: "worker@host:1", calls: new(3)}, before, "the calls a had in flight last")
	assert.Equal(t, a.Name(), b.Name())

	c, before, err := claimSlot(dir, "proxies", "worker@host:3")
	require.NoError(t, err)
	defer c.Close()
	assert.Zero(t, before, "b runs: c takes another slot and replaces no one")
}

// A slot held by a process that was killed is free: the lock is the kernel's, not a file's.
func TestClaimSlot_aKilledWorkersSlotIsFree(t *testing.T) {
	dir := t.TempDir()
	holder := exec.Command(os.Args[0], "-test.run", "^TestClaimSlot_holdsASlotUntilKilled$")
	holder.Env = append(os.Environ(), slotHolderEnv+"="+dir)
	out, err := holder.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, holder.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "holding\n", line)

	held, _, err := claimSlot(dir, "proxies", "worker@host:2")
	require.NoError(t, err)
	require.NotEqual(t, filepath.Join(dir, "proxies.0.slot"), held.Name(), "the holder has the first slot")
	require.NoError(t, held.Close())

	require.NoError(t, holder.Process.Kill())
	_ = holder.Wait()
	b, before, err := claimSlot(dir, "proxies", "worker@host:3")
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, filepath.Join(dir, "proxies.0.slot"), b.Name())
	assert.Equal(t, predecessor{identity: "worker@host:1", calls: new(1)}, before)
}

func TestParsePredecessor(t *testing.T) {
	tests := []struct {
		name, text string
		want       predecessor
	}{
		{"a new slot", "", predecessor{}},
		{"identity and calls", "worker@host:1\n2       \n", predecessor{identity: "worker@host:1", calls: new(2)}},
		{"calls unreadable: unknown, not none", "worker@host:1\nx\n", predecessor{identity: "worker@host:1"}},
		{"calls missing", "worker@host:1\n", predecessor{identity: "worker@host:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, parsePredecessor(tt.text))
		})
	}
}

// slotHolderEnv names the directory in which TestClaimSlot_holdsASlotUntilKilled, run as a
// process of its own, holds a slot.
const slotHolderEnv = "PVEFLOW_TEST_SLOT_HOLDER"

// TestClaimSlot_holdsASlotUntilKilled is the killed worker of TestClaimSlot_aKilledWorkersSlotIsFree;
// run by go test, it does nothing.
func TestClaimSlot_holdsASlotUntilKilled(t *testing.T) {
	dir := os.Getenv(slotHolderEnv)
	if dir == "" {
		return
	}
	s, _, err := claimSlot(dir, "proxies", "worker@host:1")
	require.NoError(t, err)
	s.recordCalls(1) // a call in flight when it is killed
	fmt.Println("holding")
	time.Sleep(time.Minute)
}
