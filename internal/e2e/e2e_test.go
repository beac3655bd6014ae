package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
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

// query is the status of the operation workflowID, or no status while its entity has not
// started it yet.
func query(t *testing.T, c client.Client, workflowID string) core.Status {
	t.Helper()
	val, err := c.QueryWorkflow(context.Background(), workflowID, "", core.StatusQuery)
	if _, notYet := errors.AsType[*serviceerror.NotFound](err); notYet {
		return core.Status{}
	}
	require.NoError(t, err)
	var st core.Status
	require.NoError(t, val.Get(&st))
	return st
}

func TestE2E_createQueryResultDeleteThroughTheRESTAPI(t *testing.T) {
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Second} })
	s := startRESTStack(t, cluster)

	req := s.startCreate(createInput(uid))
	var waiting core.Status
	eventually(t, "the status query shows the clone wait", func() bool {
		waiting = query(t, s.client, core.CreateWorkflowID(uid))
		return waiting.Phase == core.PhaseCloning && waiting.UPID != ""
	})
	res, err := served[proxyvm.CreateProxyResult](t, req)

	require.NoError(t, err)
	assert.Equal(t, res.VMID, waiting.VMID)
	assert.Contains(t, waiting.Step, "wait for clone")
	assert.NotEmpty(t, res.IPv4)
	assert.Equal(t, core.PhaseCreated, query(t, s.client, core.CreateWorkflowID(uid)).Phase)

	create := s.operation(uid, proxyvm.OpCreate)

	del, err := served[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))
	require.NoError(t, err)
	assert.Len(t, del.Destroyed, 1)
	assert.Empty(t, leftovers(cluster))
	assertNoFailureEvents(t, s, create)
	assertNoFailureEvents(t, s, s.operation(uid, proxyvm.OpDelete))
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
	_, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
	require.NoError(t, err)
	first := s.operation(uid, proxyvm.OpCreate)
	del := s.startDelete(proxyvm.DeleteProxyInput{UID: uid})
	eventually(t, "the delete destroys the VM", func() bool { return cluster.CallCount("Destroy") > 0 })

	second := s.startCreate(createInput(uid))
	_, delErr := served[proxyvm.DeleteProxyResult](t, del)
	res, err := served[proxyvm.CreateProxyResult](t, second)

	require.NoError(t, delErr)
	require.NoError(t, err)
	assert.Equal(t, 2, cluster.CallCount("Clone"), "the second create cloned anew after the delete")
	assert.Len(t, leftovers(cluster), 1, "the second create's VM; it released its seed ISO")
	assert.NotZero(t, res.VMID)
	ops := s.proxyStatus(uid).Operations
	require.Len(t, ops, 3, "create, delete, create")
	assert.Equal(t, []string{proxyvm.OpCreate, proxyvm.OpDelete, proxyvm.OpCreate}, []string{ops[0].Kind, ops[1].Kind, ops[2].Kind})
	assert.False(t, ops[2].StartedAt.Before(ops[1].ClosedAt), "the second create started once the delete had closed")
	runs := []client.WorkflowRun{first, s.operation(uid, proxyvm.OpDelete), s.operation(uid, proxyvm.OpCreate)}
	assert.NotEqual(t, first.GetRunID(), runs[2].GetRunID(), "a create of its own served the second request")
	for _, run := range runs {
		assertNoFailureEvents(t, s, run)
	}
}

func TestE2E_workerRestartMidCloneDoesNotCloneTwice(t *testing.T) {
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second} })
	s := startStack(t, cluster, fastConfig(t))
	req := s.startCreate(createInput(uid))
	eventually(t, "the create polls its clone", func() bool { return cluster.CallCount("TaskStatus") > 0 })

	s.worker.Stop()
	s.startWorker()
	_, err := served[proxyvm.CreateProxyResult](t, req)

	require.NoError(t, err)
	assert.Equal(t, 1, cluster.CallCount("Clone"))
	assert.Len(t, cluster.VMs(), 2, "the template and one proxy")
}

func TestE2E_deleteDuringCreateLeavesNothingBehind(t *testing.T) {
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second} })
	s := startStack(t, cluster, fastConfig(t))
	create := s.startCreate(createInput(uid))
	eventually(t, "the create polls its clone", func() bool { return cluster.CallCount("TaskStatus") > 0 })

	del, err := served[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))

	require.NoError(t, err)
	assert.Len(t, del.Destroyed, 1, "the clone the create had started")
	_, err = served[proxyvm.CreateProxyResult](t, create)
	assert.Equal(t, starter.FailSuperseded, starter.FailureType(err), "the create request: %v", err)
	_, err = result[proxyvm.CreateProxyResult](t, s.operation(uid, proxyvm.OpCreate))
	assert.ErrorAs(t, err, new(*temporal.CanceledError), "the CreateProxy was cancelled")
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
	reqs := make([]*starter.Request, n)
	for i := range n {
		uids[i] = fmt.Sprintf("proxy-uid-%02d", i)
		reqs[i] = s.startCreate(createInput(uids[i]))
	}
	vmids := map[int]string{}
	for i, req := range reqs {
		res, err := served[proxyvm.CreateProxyResult](t, req)
		require.NoError(t, err, uids[i])
		require.NotContains(t, vmids, res.VMID, "VMID %d given to %s and %s", res.VMID, vmids[res.VMID], uids[i])
		vmids[res.VMID] = uids[i]
	}
	assert.Len(t, leftovers(cluster), n, "one VM per proxy; each create released its seed ISO")

	for i, u := range uids {
		reqs[i] = s.startDelete(proxyvm.DeleteProxyInput{UID: u})
	}
	for i, req := range reqs {
		_, err := served[proxyvm.DeleteProxyResult](t, req)
		require.NoError(t, err, uids[i])
	}
	assert.Empty(t, leftovers(cluster))
}
