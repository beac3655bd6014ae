package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// observedInterval is the observer's interval in these tests, and observedConfig a config with
// it and a backstop far beyond the tests.
const observedInterval = 2 * time.Second

func observedConfig(t testing.TB) config.Config {
	cfg := fastConfig(t)
	cfg.Entity.CheckInterval = observedInterval
	cfg.Entity.CheckJitter = 0
	cfg.Entity.BackstopInterval = time.Hour
	return cfg
}

// observerStatus is what the observer of the default task queue answers.
func observerStatus(t *testing.T, s *stack) fleet.ObserverStatus {
	t.Helper()
	return queried[fleet.ObserverStatus](t, s, core.ObserverWorkflowID(core.DefaultTaskQueue), core.ObserverQuery)
}

func TestObserver_aQuietProxyCostsNoCheckAndAVMStoppedByHandIsHealedWithinAnInterval(t *testing.T) {
	cluster := newCluster()
	s := startStack(t, cluster, observedConfig(t))
	created, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
	require.NoError(t, err)
	eventually(t, "the entity's word starts the observer, which watches the proxy", func() bool {
		st := observerStatus(t, s)
		return st.Watching == 1 && st.Listings > 0
	})

	configs, agents, listings := cluster.CallCount("VMConfig"), cluster.CallCount("AgentNetworkInterfaces"), observerStatus(t, s).Listings
	time.Sleep(4 * observedInterval)
	assert.Equal(t, configs, cluster.CallCount("VMConfig"), "no VM read while nothing changes")
	assert.Equal(t, agents, cluster.CallCount("AgentNetworkInterfaces"))
	assert.GreaterOrEqual(t, observerStatus(t, s).Listings-listings, 3, "one listing per interval")
	assert.Empty(t, s.proxyStatus(uid).Operations[1:], "no operation but the create")

	_, err = cluster.Stop(context.Background(), created.Node, created.VMID)
	require.NoError(t, err)
	stopped := time.Now()
	eventually(t, "the entity heals the VM", func() bool {
		ops := s.proxyStatus(uid).Operations
		return len(ops) == 2 && ops[1].Outcome == "completed"
	})
	heal := s.proxyStatus(uid).Operations[1]
	assert.Equal(t, fmt.Sprintf("check: VM %d on node pve1 was stopped", created.VMID), heal.Reason)
	assert.Less(t, heal.StartedAt.Sub(stopped), observedInterval*11/10+time.Second,
		"the heal began within an interval (plus 10% and a second for the stop task and the check)")
	assert.True(t, runningVM(cluster, created.VMID))
}

// runningVM reports whether VM vmid runs on the cluster.
func runningVM(c *pvesim.Cluster, vmid int) bool {
	for _, v := range c.VMs() {
		if v.VMID == vmid {
			return v.Running
		}
	}
	return false
}
