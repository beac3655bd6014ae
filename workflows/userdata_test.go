package workflows_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// seedUserData is the user-data file on the seed the proxy's guest booted with last, as
// cloud-init read it.
func seedUserData(t *testing.T, w *world) string {
	t.Helper()
	return seedFile(t, w, "user-data")
}

// seedFile is file name on the seed the guest of the proxy's one VM booted with last. It is read
// from the guest: pveflow deletes the seed ISO once the guest consumed it.
func seedFile(t *testing.T, w *world, name string) string {
	t.Helper()
	vms := w.vms()
	require.Len(t, vms, 1)
	seed, ok := w.cluster.GuestSeed(vms[0].VMID)
	require.True(t, ok)
	content, ok := seed[name]
	require.True(t, ok, "no %s on the seed of VM %d", name, vms[0].VMID)
	return content
}

func TestCreate_seedISOHoldsTheUserDataOfTheRunsInput(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.UserData = "#cloud-config\nchpasswd:\n  users:\n    - {name: debian, password: from-the-start-event}\n"

	_, err := w.create(in)

	require.NoError(t, err)
	assert.Equal(t, in.UserData, seedUserData(t, w))
}

func TestCreate_userDataOverTheLimitIsPermanentBeforeAnyCall(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.UserData = "#cloud-config\n" + strings.Repeat("x", proxyvm.MaxUserDataBytes)

	_, err := w.create(in)

	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "user-data is 65550 bytes, more than the limit of 65536")
	assert.NotContains(t, err.Error(), "cloud-config")
	assert.Empty(t, w.cluster.Calls())
}
