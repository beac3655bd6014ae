package e2e_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// taskTypes are the types of the tasks the cluster ran, in order.
func taskTypes(c *pvesim.Cluster) []string {
	var out []string
	for _, r := range c.TaskRuns() {
		out = append(out, r.Type)
	}
	return out
}

func TestE2E_anHAProxyStoppedThroughPVEIsHealedByAHastartAndDeletedThroughTheRESTAPI(t *testing.T) {
	// The HA manager acts two seconds after a request: a hastart or hastop task has long ended.
	cluster := newCluster(func(o *pvesim.Options) { o.HARound = 2 * time.Second })
	cfg := fastConfig(t)
	cfg.Proxmox.HA = config.HA{Enabled: true, State: "started"}
	cfg.Entity.CheckInterval, cfg.Entity.CheckJitter, cfg.Entity.BackstopInterval = time.Second, 0, 0
	s := startStack(t, overREST(t, cluster, &cfg, pve.ClientConfig{}), cfg)
	created, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
	require.NoError(t, err)
	sid := "vm:" + strconv.Itoa(created.VMID)

	// PVE's stop of an HA resource is a hastop: the HA manager stops the VM and keeps it so.
	_, err = cluster.Stop(context.Background(), created.Node, created.VMID)
	require.NoError(t, err)

	var heal *proxyvm.OperationRecord
	eventually(t, "the entity heals the stopped proxy", func() bool {
		st := s.proxyStatus(uid)
		if st.Operation != nil || len(st.Operations) < 2 {
			return false
		}
		heal = &st.Operations[len(st.Operations)-1]
		return true
	})
	assert.Equal(t, proxyvm.OpCreate, heal.Kind)
	assert.Contains(t, heal.Reason, "was stopped")
	assert.Equal(t, "completed", heal.Outcome)
	types := taskTypes(cluster)
	stop := slices.Index(types, "hastop")
	require.GreaterOrEqual(t, stop, 0, "tasks: %v", types)
	assert.Contains(t, types[stop:], "hastart", "the heal's start went through the HA manager")
	assert.NotContains(t, types[stop:], "qmstart")
	vm := markedVM(t, cluster, uid)
	assert.True(t, vm.Running, "the heal waited for the HA manager to start the VM")
	state, _ := cluster.HAState(sid)
	assert.Equal(t, "started", state)

	del, err := served[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))

	require.NoError(t, err)
	assert.Len(t, del.Destroyed, 1)
	assert.Empty(t, leftovers(cluster))
	assert.Empty(t, cluster.HAResources())
}
