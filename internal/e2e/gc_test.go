package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

// uploadOrphanISO puts on the ISO storage the seed ISO of a UID that has no VM, as a create
// that died between its upload and its clone's cleanup would leave it.
func uploadOrphanISO(t *testing.T, c *pvesim.Cluster, goneUID string) string {
	t.Helper()
	const data = "CD001 seed"
	_, err := c.UploadISO(context.Background(), "pve1", "local", proxy.SeedISOName(proxy.NameFromUID(goneUID)), strings.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	volid := proxy.SeedVolID("local", proxy.NameFromUID(goneUID))
	eventually(t, "the orphan ISO is stored", func() bool { return strings.Contains(strings.Join(leftovers(c), " "), volid) })
	return volid
}

// vmsOf are the cluster's VMs by VMID.
func vmsOf(c *pvesim.Cluster) map[int]pvesim.VM {
	out := map[int]pvesim.VM{}
	for _, v := range c.VMs() {
		out[v.VMID] = v
	}
	return out
}

func TestE2E_gcCollectsTheVMOfAKilledCreateAndAnOrphanISOAndLeavesTheKeptProxies(t *testing.T) {
	// Boots take long enough to kill a create while it waits for one.
	cluster := newCluster(func(o *pvesim.Options) { o.AgentBootDelay = 4 * time.Second })
	s := startStack(t, cluster, fastConfig(t))
	orphanISO := uploadOrphanISO(t, cluster, "a-proxy-long-gone")
	kept := []string{"kept-proxy-a", "kept-proxy-b"}
	const killed = "killed-proxy"
	reqs := []*starter.Request{s.startCreate(createInput(kept[0])), s.startCreate(createInput(kept[1]))}
	s.startCreate(createInput(killed))
	eventually(t, "the third create waits for its VM to boot", func() bool {
		return query(t, s.client, core.CreateWorkflowID(killed)).Phase == core.PhaseBooting
	})
	require.NoError(t, s.client.TerminateWorkflow(context.Background(), core.CreateWorkflowID(killed), "", "killed halfway"))
	for _, req := range reqs {
		_, err := served[proxyvm.CreateProxyResult](t, req)
		require.NoError(t, err)
	}
	killedVM := markedVM(t, cluster, killed)
	require.Contains(t, leftovers(cluster), proxy.SeedVolID("local", proxy.NameFromUID(killed)), "the killed create left its seed ISO")
	before := vmsOf(cluster)
	keptVMs := []pvesim.VM{markedVM(t, cluster, kept[0]), markedVM(t, cluster, kept[1])}
	// Anything made before the run is old enough: the grace period is the workflow's own
	// concern, tested in package workflows.
	in := fleet.CollectGarbageInput{Keep: kept, DryRun: true, Grace: time.Millisecond}

	dry, err := result[fleet.CollectGarbageResult](t, s.startGC("dry-run", in))

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbageVM{{UID: killed, VMID: killedVM.VMID, Node: killedVM.Node, Name: proxy.NameFromUID(killed), Outcome: reads.GarbageFound}}, dry.VMs)
	require.Len(t, dry.ISOs, 1)
	assert.Equal(t, orphanISO, dry.ISOs[0].VolID)
	assert.Equal(t, reads.GarbageFound, dry.ISOs[0].Outcome)
	assert.Equal(t, before, vmsOf(cluster), "a dry run changes nothing")

	in.DryRun = false
	res, err := result[fleet.CollectGarbageResult](t, s.startGC("collect", in))

	require.NoError(t, err)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, reads.GarbageDeleted, res.VMs[0].Outcome)
	require.Len(t, res.ISOs, 1)
	assert.Equal(t, reads.GarbageDeleted, res.ISOs[0].Outcome)
	assert.Equal(t, proxyvm.ProxyAbsent, s.proxyStatus(killed).Phase, "the VM went by a delete of the killed proxy's entity")
	want := []string{}
	for _, v := range keptVMs {
		want = append(want, fmt.Sprintf("VM %d on %s", v.VMID, v.Node))
		assert.Equal(t, v, vmsOf(cluster)[v.VMID], "kept VM %d untouched", v.VMID)
	}
	// The kept proxies' seed ISOs went when their creates released them.
	assert.ElementsMatch(t, want, leftovers(cluster), "the kept proxies' VMs, and nothing else")
}

// markedVM is the one VM that carries the mark of uid.
func markedVM(t *testing.T, c *pvesim.Cluster, uid string) pvesim.VM {
	t.Helper()
	var found []pvesim.VM
	for _, v := range c.VMs() {
		if owner, _ := proxy.OwnerOf(v.Config); owner == uid {
			found = append(found, v)
		}
	}
	require.Len(t, found, 1, "VMs of %s", uid)
	return found[0]
}

// A collection runs its deletes in the entities: cancelled while one runs, it stops waiting for
// it, and the delete goes on to the end.
func TestE2E_aCancelledCollectionStillDeletesWhatItStarted(t *testing.T) {
	cluster := newCluster(func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": time.Second, "qmstop": 3 * time.Second}
	})
	s := startStack(t, cluster, fastConfig(t))
	const orphan = "orphan-proxy"
	_, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(orphan)))
	require.NoError(t, err)
	run := s.startGC("cancelled", fleet.CollectGarbageInput{KeepNone: true, Grace: time.Millisecond})
	eventually(t, "the entity's delete stops the VM", func() bool { return cluster.CallCount("Stop") > 0 })

	require.NoError(t, s.client.CancelWorkflow(context.Background(), run.GetID(), run.GetRunID()))

	_, err = result[fleet.CollectGarbageResult](t, run)
	require.ErrorAs(t, err, new(*temporal.CanceledError), "the collection was cancelled")
	del, err := result[proxyvm.DeleteProxyResult](t, s.operation(orphan, proxyvm.OpDelete))
	require.NoError(t, err, "the delete it started went on")
	assert.Len(t, del.Destroyed, 1)
	assert.Empty(t, leftovers(cluster), "the VM and its seed ISO are gone")
}

// createsFirst is a worker's Proxies on which a create of the proxy is asked for, and served,
// just before the first delete request goes out: after the collection sending it looked.
type createsFirst struct {
	starter.EntityProxies
	t    *testing.T
	once sync.Once
}

func (c *createsFirst) DeleteProxy(ctx context.Context, req activities.ProxyDelete) (activities.ProxyDeleteOutcome, error) {
	c.once.Do(func() {
		_, err := served[proxyvm.CreateProxyResult](c.t, accepted(c.t)(c.Client.Create(ctx, createInput(req.UID))))
		assert.NoError(c.t, err)
	})
	return c.EntityProxies.DeleteProxy(ctx, req)
}

func TestE2E_aCollectionDoesNotDestroyAProxyCreatedSinceItLooked(t *testing.T) {
	cluster := newCluster()
	s := newStack(t, cluster, fastConfig(t), client.Options{})
	// The stack's worker, with a create asked for between the collection's look and its delete.
	s.worker = s.server.NewWorker(core.DefaultTaskQueue, func(r worker.Registry) {
		(&workflows.Workflows{Config: s.cfg}).Register(r)
		r.RegisterActivity(&activities.Activities{API: s.api, Proxmox: s.cfg.Proxmox, Runs: s.runs,
			Proxies: &createsFirst{EntityProxies: starter.EntityProxies{Client: s.starter}, t: t}})
	})
	const recreated = "recreated-proxy"
	_, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(recreated)))
	require.NoError(t, err)
	vm := markedVM(t, cluster, recreated)

	res, err := result[fleet.CollectGarbageResult](t, s.startGC("collect", fleet.CollectGarbageInput{Keep: []string{uid}, Grace: time.Millisecond}))

	require.NoError(t, err)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, reads.GarbageSkipped, res.VMs[0].Outcome)
	assert.Contains(t, res.VMs[0].Detail, "the proxy is wanted again")
	assert.False(t, res.Failed())
	assert.Equal(t, vm, markedVM(t, cluster, recreated), "the proxy created again is left alone")
	assert.Equal(t, proxyvm.ProxyPresent, s.proxyStatus(recreated).Phase)
}
