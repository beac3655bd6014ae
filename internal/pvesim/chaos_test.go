package pvesim

import (
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestFaultRate_failsAboutTheShareOfCallsAsked(t *testing.T) {
	c, _ := newCluster(t, func(o *Options) { o.FaultRate, o.Seed = 0.2, 7 })
	const calls = 4000
	failed := 0
	for range calls {
		if _, err := c.Version(t.Context()); err != nil {
			failed++
		}
	}
	assert.InDelta(t, 0.2, float64(failed)/calls, 0.02)
	st := c.State()
	assert.Equal(t, calls, st.Calls)
	total := 0
	for _, n := range st.Faults {
		total += n
	}
	assert.Equal(t, failed, total, "State counts every fault")
}

// With every call failing, a config write either fails before it takes effect or takes
// effect and loses its answer, as PVE's do: the fault says which.
func TestFaultRate_aLostAnswerComesAfterTheEffectAndARefusalBefore(t *testing.T) {
	c, clk := newCluster(t, func(o *Options) { o.FaultRate, o.Seed = 1, 3 })
	require.NoError(t, c.AddVM(VM{Node: "pve1", VMID: newID, Config: map[string]string{"name": "proxy-a", "cores": "1"}}))
	kinds := map[string]bool{}
	for i := range 200 {
		cores := strconv.Itoa(i + 2)
		err := c.SetVMConfig(t.Context(), "pve1", newID, pve.VMConfig{"cores": cores})
		require.Error(t, err)
		written := c.VMs()[1].Config["cores"] == cores
		var ae *pve.APIError
		switch {
		case errors.Is(err, ErrDropConnection), errors.Is(err, ErrAnswerHeld):
			assert.True(t, written, "%v comes after the effect", err)
		case errors.As(err, &ae) && ae.Status == 596 && ae.Reason == "Connection timed out":
			assert.True(t, written, "%v comes after the effect", err)
			assert.Empty(t, ae.Message, "pveproxy relays a 596 without a body")
		default:
			assert.False(t, written, "%v comes before the effect", err)
		}
		kinds[err.Error()] = true
		clk.Advance(0)
	}
	assert.Contains(t, kinds, "proxmox api: 500 VM is locked (backup)")
	assert.Contains(t, kinds, "proxmox api: 500 can't lock file '/var/lock/qemu-server/lock-123456.conf' - got timeout")
	assert.Contains(t, kinds, "proxmox api: 595 Connection refused")
	assert.Contains(t, kinds, "proxmox api: 596 Broken pipe")
}

// A start is refused on no lock: its worker checks the lock, so the task fails with it, and the
// VM stays stopped. Every call fails, so the only start that returns a task is one whose task
// meets the lock; clusters of other seeds are tried until one's first start is that one.
func TestFaultRate_aLockFaultOnAStartFailsItsTask(t *testing.T) {
	for seed := range int64(100) {
		c, clk := newCluster(t, func(o *Options) { o.FaultRate, o.Seed = 1, seed })
		require.NoError(t, c.AddVM(VM{Node: "pve1", VMID: newID, Config: map[string]string{"name": "proxy-a"}}))
		upid, err := c.Start(t.Context(), "pve1", newID)
		if err != nil {
			continue
		}
		clk.Advance(defaultTaskDurations["qmstart"])
		c.mu.Lock()
		c.faultRate = 0 // to read the task's status
		c.mu.Unlock()
		st, err := c.TaskStatus(t.Context(), "pve1", upid)
		require.NoError(t, err)
		require.Equal(t, pve.TaskStopped, st.Status)
		assert.Contains(t, []string{"VM is locked (backup)", "can't lock file '/var/lock/qemu-server/lock-123456.conf' - got timeout"}, st.ExitStatus)
		assert.False(t, c.VMs()[1].Running)
		return
	}
	t.Fatal("no start met a lock fault in 100 seeds")
}
