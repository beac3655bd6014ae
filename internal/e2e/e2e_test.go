package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/workflows"
)

// newCluster is the simulator's default cluster with tasks that take about a second.
func newCluster(change ...func(*pvesim.Options)) *pvesim.Cluster {
	opts := pvesim.Default()
	opts.TaskDurations = map[string]time.Duration{"qmclone": time.Second}
	opts.AgentBootDelay = 500 * time.Millisecond
	for _, c := range change {
		c(&opts)
	}
	return pvesim.New(opts)
}

// leftovers lists what the cluster holds besides its template: VMs and ISOs.
func leftovers(c *pvesim.Cluster) []string {
	var out []string
	for _, v := range c.VMs() {
		if v.Config["template"] != "1" {
			out = append(out, fmt.Sprintf("VM %d on %s", v.VMID, v.Node))
		}
	}
	for _, v := range c.Volumes() {
		if v.Data != nil {
			out = append(out, v.VolID)
		}
	}
	return out
}

func query(t *testing.T, c client.Client, workflowID string) workflows.Status {
	t.Helper()
	val, err := c.QueryWorkflow(context.Background(), workflowID, "", workflows.StatusQuery)
	require.NoError(t, err)
	var st workflows.Status
	require.NoError(t, val.Get(&st))
	return st
}

func TestE2E_createQueryResultDeleteThroughTheRESTAPI(t *testing.T) {
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Second} })
	srv, err := simserver.Start(simserver.Options{API: cluster, Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	cfg := fastConfig(t)
	cfg.Proxmox.URL, cfg.Proxmox.CAFile, cfg.Proxmox.TokenFile = srv.URL(), srv.CAFile(), srv.TokenFile()
	api, err := pve.NewClient(pve.ClientConfig{URL: srv.URL(), CAFile: srv.CAFile(), TokenFile: srv.TokenFile()})
	require.NoError(t, err)
	s := startStack(t, api, cfg)

	run := s.startCreate(createInput(uid))
	var waiting workflows.Status
	eventually(t, "the status query shows the clone wait", func() bool {
		waiting = query(t, s.client, workflows.CreateWorkflowID(uid))
		return waiting.Phase == workflows.PhaseCloning && waiting.UPID != ""
	})
	res, err := result[workflows.CreateProxyResult](t, run)

	require.NoError(t, err)
	assert.Equal(t, res.VMID, waiting.VMID)
	assert.Contains(t, waiting.Step, "wait for clone")
	assert.NotEmpty(t, res.IPv4)
	assert.Equal(t, workflows.PhaseCreated, query(t, s.client, workflows.CreateWorkflowID(uid)).Phase)

	delRun := s.startDelete(workflows.DeleteProxyInput{UID: uid, ProviderID: res.ProviderID})
	del, err := result[workflows.DeleteProxyResult](t, delRun)
	require.NoError(t, err)
	assert.Len(t, del.Destroyed, 1)
	assert.Empty(t, leftovers(cluster))
	assertNoFailureEvents(t, s, run)
	assertNoFailureEvents(t, s, delRun)
}

// assertNoFailureEvents asserts that the history of a run that succeeded holds no event of a
// failure (a *Failed or *TimedOut event): the UI shows those in red, and an operator reads red
// as trouble.
func assertNoFailureEvents(t *testing.T, s *stack, run client.WorkflowRun) {
	t.Helper()
	iter := s.client.GetWorkflowHistory(context.Background(), run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	events := 0
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		events++
		name := ev.GetEventType().String()
		assert.False(t, strings.HasSuffix(name, "Failed") || strings.HasSuffix(name, "TimedOut"),
			"%s: event %d is %s", run.GetID(), ev.GetEventId(), name)
	}
	require.NotZero(t, events)
}

func TestE2E_createStartedDuringADeleteWaitsForItAndNeitherHistoryHoldsAFailure(t *testing.T) {
	cluster := newCluster(func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": 2 * time.Second, "qmdestroy": 3 * time.Second}
	})
	s := startStack(t, cluster, fastConfig(t))
	first := s.startCreate(createInput(uid))
	_, err := result[workflows.CreateProxyResult](t, first)
	require.NoError(t, err)
	del := s.startDelete(workflows.DeleteProxyInput{UID: uid})
	eventually(t, "the delete destroys the VM", func() bool { return cluster.CallCount("Destroy") > 0 })

	second := s.startCreate(createInput(uid))
	_, delErr := result[workflows.DeleteProxyResult](t, del)
	res, err := result[workflows.CreateProxyResult](t, second)

	require.NoError(t, delErr)
	require.NoError(t, err)
	assert.Equal(t, 2, cluster.CallCount("Clone"), "the second create cloned anew after the delete")
	assert.Len(t, leftovers(cluster), 2, "the second create's VM and seed ISO")
	assert.NotZero(t, res.VMID)
	for _, run := range []client.WorkflowRun{first, del, second} {
		assertNoFailureEvents(t, s, run)
	}
}

func TestE2E_workerRestartMidCloneDoesNotCloneTwice(t *testing.T) {
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second} })
	s := startStack(t, cluster, fastConfig(t))
	run := s.startCreate(createInput(uid))
	eventually(t, "the create polls its clone", func() bool { return cluster.CallCount("TaskStatus") > 0 })

	s.worker.Stop()
	s.startWorker()
	_, err := result[workflows.CreateProxyResult](t, run)

	require.NoError(t, err)
	assert.Equal(t, 1, cluster.CallCount("Clone"))
	assert.Len(t, cluster.VMs(), 2, "the template and one proxy")
}

func TestE2E_deleteDuringCreateLeavesNothingBehind(t *testing.T) {
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second} })
	s := startStack(t, cluster, fastConfig(t))
	create := s.startCreate(createInput(uid))
	eventually(t, "the create polls its clone", func() bool { return cluster.CallCount("TaskStatus") > 0 })

	del, err := result[workflows.DeleteProxyResult](t, s.startDelete(workflows.DeleteProxyInput{UID: uid}))

	require.NoError(t, err)
	assert.Len(t, del.Destroyed, 1, "the clone the create had started")
	_, err = result[workflows.CreateProxyResult](t, create)
	require.Error(t, err, "the create was cancelled")
	assert.Empty(t, leftovers(cluster))
}

func TestE2E_fiftyConcurrentCreatesGetDistinctVMIDsAndDeletesRemoveAll(t *testing.T) {
	const n = 50
	cluster := newCluster()
	cfg := fastConfig(t)
	// All fifty clone at once, racing for VMIDs: this simulator's storage has no lock to queue
	// for (the admission's own test is in fleet_test.go).
	cfg.Clones.PerStorage = 0
	s := startStack(t, cluster, cfg)
	uids := make([]string, n)
	runs := make([]client.WorkflowRun, n)
	for i := range n {
		uids[i] = fmt.Sprintf("proxy-uid-%02d", i)
		runs[i] = s.startCreate(createInput(uids[i]))
	}
	vmids := map[int]string{}
	for i, run := range runs {
		res, err := result[workflows.CreateProxyResult](t, run)
		require.NoError(t, err, uids[i])
		require.NotContains(t, vmids, res.VMID, "VMID %d given to %s and %s", res.VMID, vmids[res.VMID], uids[i])
		vmids[res.VMID] = uids[i]
	}
	assert.Len(t, leftovers(cluster), 2*n, "one VM and one seed ISO per proxy")

	for i, u := range uids {
		runs[i] = s.startDelete(workflows.DeleteProxyInput{UID: u})
	}
	for i, run := range runs {
		_, err := result[workflows.DeleteProxyResult](t, run)
		require.NoError(t, err, uids[i])
	}
	assert.Empty(t, leftovers(cluster))
}
