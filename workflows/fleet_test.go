package workflows_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
)

// The tests of a create at fleet scale: locks waited out, clones made again after a lock, and
// (in admission_test.go) clones admitted per storage.

func TestFleet_templateLockedByABackupIsWaitedOut(t *testing.T) {
	w := newWorld(t)
	require.NoError(t, w.cluster.HoldLock(9000, "backup", 3*time.Minute))

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, firstVMID(w), res.VMID)
	assert.Greater(t, w.cluster.CallCount("Clone"), 1, "the clone was refused while the backup ran")
	assert.Len(t, w.vms(), 1)
}

func TestFleet_templateLockedLongerThanTheBudgetSaysSo(t *testing.T) {
	w := newWorld(t)
	require.NoError(t, w.cluster.HoldLock(9000, "backup", time.Hour))

	_, err := w.create(createInput())

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "still locked when its budget ran out")
	assert.Contains(t, err.Error(), "VM is locked (backup)")
	assert.Empty(t, w.vms())
}

func TestFleet_cloneFailingOnceOnTheStorageLockIsClonedAgain(t *testing.T) {
	w := newWorld(t)
	w.cluster.FailTask("qmclone", "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout")

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, firstVMID(w), res.VMID, "the same VMID, which PVE freed")
	assert.Equal(t, 2, w.cluster.CallCount("Clone"))
	assert.Len(t, w.vms(), 1)
}

func TestFleet_cloneFailingOnTheStorageLockForTheWholeBudgetIsTransient(t *testing.T) {
	w := newWorld(t)
	w.cfg.Budgets.Clone = 2 * time.Minute
	for range 100 {
		w.cluster.FailTask("qmclone", "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout")
	}

	_, err := w.create(createInput())

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.Contains(t, err.Error(), "pve-storage-local-lvm")
	assert.Empty(t, w.vms())
}

// busy makes node run VMs of memMiB in all, so that it has less memory free than the others.
func busy(t *testing.T, w *world, node string, memMiB int) {
	t.Helper()
	require.NoError(t, w.cluster.AddVM(pvesim.VM{Node: node, VMID: 4000, Running: true, Config: pve.VMConfig{
		"name": "someone-elses-database", "memory": fmt.Sprint(memMiB),
	}}))
}

// perNodeTemplates gives the cluster template 9001 on pve2 beside 9000 on pve1, and the config
// a template of debian13 on each node.
func perNodeTemplates(t *testing.T, w *world) {
	t.Helper()
	require.NoError(t, w.cluster.AddVM(pvesim.Template(9001, "pve2", 2)))
	w.cfg.Proxmox.Nodes = []string{"pve1", "pve2"}
	w.cfg.Proxmox.Templates["debian13"] = config.Template{Nodes: map[string]int{"pve1": 9000, "pve2": 9001}}
}

// clonedFrom is the node and template of the create's clone calls.
func clonedFrom(w *world) []string {
	var out []string
	for _, c := range w.cluster.Calls() {
		if c.Method == "Clone" {
			out = append(out, fmt.Sprintf("%d on %s", c.VMID, c.Node))
		}
	}
	return out
}

func TestFleet_placementPicksTheEmptiestEligibleNode(t *testing.T) {
	w := newWorld(t)
	perNodeTemplates(t, w)
	busy(t, w, "pve1", 32768)

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, "pve2", res.Node)
	assert.Equal(t, []string{"9001 on pve2"}, clonedFrom(w), "the node's own template")
}

func TestFleet_placementSkipsANodeWithoutTheTemplate(t *testing.T) {
	// One template, on pve1's local storage: pve2, though emptier, cannot be cloned to.
	w := newWorld(t)
	w.cfg.Proxmox.Nodes = []string{"pve1", "pve2"}
	busy(t, w, "pve1", 32768)
	env := w.env()
	w.runOp(env, core.CreateProxyName, createInput())
	require.NoError(t, env.GetWorkflowError())
	v, err := env.QueryWorkflowByID(core.CreateWorkflowID(uid), core.StatusQuery)
	require.NoError(t, err)
	var st core.Status
	require.NoError(t, v.Get(&st))

	assert.Equal(t, "pve1", st.Node)
	assert.Contains(t, st.Placement, "pve2 no template it can be cloned from")
}

func TestFleet_perNodeTemplateIsUsedForTheZone(t *testing.T) {
	w := newWorld(t)
	perNodeTemplates(t, w)
	in := createInput()
	in.Zone = "pve2"

	res, err := w.create(in)

	require.NoError(t, err)
	assert.Equal(t, "pve2", res.Node)
	assert.Equal(t, []string{"9001 on pve2"}, clonedFrom(w))
}

func TestFleet_localStorageCrossNodeCloneIsRefusedBeforeAnyClone(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.Nodes = []string{"pve1", "pve2"}
	in := createInput()
	in.Zone = "pve2"

	_, err := w.create(in)

	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "can't clone VM to node 'pve2' (VM uses local storage)")
	assert.Contains(t, err.Error(), "templates.debian13.nodes")
	assert.Zero(t, w.cluster.CallCount("Clone"))
}

func TestFleet_tagsAreMergedWithTheTemplates(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.VMs[0].Config["tags"] = "debian;golden" })
	w.cfg.Proxmox.Tags = []string{"team-egress"}

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, "debian;golden;proxy_operator;team-egress", vmConfig(t, w, res.VMID)["tags"])
}

func TestFleet_cloneJoinsTheConfiguredPool(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.Pools = []string{"proxies"} })
	w.cfg.Proxmox.Pool = "proxies"

	_, err := w.create(createInput())

	require.NoError(t, err)
	require.Len(t, w.vms(), 1)
	assert.Equal(t, "proxies", w.vms()[0].Pool)
}
