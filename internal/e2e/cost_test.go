package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/admission"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// historyCost is what a run cost the Temporal server, read off its history.
type historyCost struct {
	events, bytes int
	// activities counts the activities scheduled, by type.
	activities map[string]int
	// executions counts the activities' attempts, every poll among them.
	executions, workflowTasks, markers, upserts int
}

func costOf(t testing.TB, s *stack, run client.WorkflowRun) historyCost {
	t.Helper()
	c := historyCost{activities: map[string]int{}}
	for _, ev := range history(t, s.client, run.GetID(), run.GetRunID()) {
		c.events++
		c.bytes += proto.Size(ev)
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			c.activities[ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()]++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			c.executions += int(ev.GetActivityTaskStartedEventAttributes().GetAttempt())
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			c.workflowTasks++
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			c.markers++
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			c.upserts++
		}
	}
	return c
}

// createAndDelete creates the proxy of uid and deletes it, and returns the two runs.
func createAndDelete(t testing.TB, s *stack, uid string) (create, del client.WorkflowRun) {
	t.Helper()
	_, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
	require.NoError(t, err)
	_, err = served[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))
	require.NoError(t, err)
	return s.operation(uid, proxyvm.OpCreate), s.operation(uid, proxyvm.OpDelete)
}

func TestE2E_aCreateAndDeleteScheduleActivitiesOnlyToWait(t *testing.T) {
	s := startStack(t, newCluster(), fastConfig(t))

	create, del := createAndDelete(t, s, uid)

	// A wait polls by its attempts, and the destroy is an activity so that the lookup before it
	// is recorded (a delete made again after its destroy answers the VM it destroyed). Every
	// other call, the admission's description among them, is a local activity answered at once.
	waits := []string{"TaskStatus", "AgentNetworkInterfaces", "Destroy"}
	for _, run := range []client.WorkflowRun{create, del} {
		c := costOf(t, s, run)
		t.Logf("%s: %d events, activities scheduled %v, %d executions, %d workflow tasks, %d markers, %d upserts",
			run.GetID(), c.events, c.activities, c.executions, c.workflowTasks, c.markers, c.upserts)
		scheduled := 0
		for typ, n := range c.activities {
			assert.Contains(t, waits, typ, "%s scheduled %s as an activity", run.GetID(), typ)
			scheduled += n
		}
		assert.LessOrEqual(t, c.upserts, scheduled+1, "%s: search attributes upserted when it waits and when it closes", run.GetID())
	}
}

func TestE2E_waitsOverWithinTheirFirstLooksScheduleNoActivity(t *testing.T) {
	s := startStack(t, newCluster(), fastConfig(t))

	create, del := createAndDelete(t, s, uid)

	// The delete's stop, destroy and seed deletion end within tens of milliseconds, before the
	// second look; the create's clone (1 s) and the guest's boot (0.5 s) outlast the first looks.
	c, d := costOf(t, s, create), costOf(t, s, del)
	assert.Equal(t, map[string]int{"Destroy": 1}, d.activities, "the delete's waits are local looks; its destroy is recorded before it is made")
	assert.Equal(t, 2, d.upserts, "search attributes upserted before the destroy, and when the delete closes")
	assert.Subset(t, []string{"TaskStatus", "AgentNetworkInterfaces"}, slices.Collect(maps.Keys(c.activities)), "the create's long waits")
	assert.LessOrEqual(t, c.activities["TaskStatus"], 1, "only the clone's wait outlasts its local looks")
}

func TestE2E_onceItsAdmissionRunsACreateCostsAtMostSixtyEventsAndADeleteThirty(t *testing.T) {
	s := startStack(t, newCluster(), fastConfig(t))
	createAndDelete(t, s, uid) // starts the storage's admission

	create, del := createAndDelete(t, s, otherUID)

	c, d := costOf(t, s, create), costOf(t, s, del)
	t.Logf("create: %d events, %d markers; delete: %d events", c.events, c.markers, d.events)
	assert.LessOrEqual(t, c.events, 60)
	assert.LessOrEqual(t, d.events, 30)
}

func TestE2E_theFirstCreateOfAStorageStartsItsAdmissionByACallWithinSixtyEvents(t *testing.T) {
	s := startStack(t, newCluster(), fastConfig(t))

	create, _ := createAndDelete(t, s, uid)

	for _, ev := range history(t, s.client, create.GetID(), create.GetRunID()) {
		assert.NotEqual(t, enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED, ev.GetEventType(), "the admission is no child of the create")
	}
	assert.LessOrEqual(t, costOf(t, s, create).events, 60)
	admission, err := s.client.DescribeWorkflowExecution(context.Background(), admission.CloneAdmissionWorkflowID(core.DefaultTaskQueue, "pve1/local-lvm"), "")
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, admission.GetWorkflowExecutionInfo().GetStatus(), "the create started the admission")
}

func TestE2E_aCreatesHistoryDoesNotGrowWithTheCluster(t *testing.T) {
	cluster := newCluster()
	s := startStack(t, cluster, fastConfig(t))
	small, _ := createAndDelete(t, s, uid)
	const others = 500
	for i := range others {
		require.NoError(t, cluster.AddVM(pvesim.VM{Node: "pve1", VMID: 1000 + i, Config: pve.VMConfig{"name": fmt.Sprintf("someone-else-%d", i)}}))
	}

	big, _ := createAndDelete(t, s, otherUID)

	// Each VM of the list is some 200 bytes: the whole list would be 100 KB.
	assert.Less(t, costOf(t, s, big).bytes, costOf(t, s, small).bytes+4096)
}

// serverWork is what every workflow on a server did in a stretch of time, read off their
// histories: what a proxy costs counted the way the issue sets its goals, over all of the
// proxy's workflows (its entity's runs, its operations, its checks) and its share of those it
// shares with others (the storage's admission, the cluster's observer, the workers' call
// shares), rather than over one operation's history.
type serverWork struct {
	events, workflowTasks int
	// activities are the attempts of activities the server scheduled; localActivities those
	// of local activities, which the worker runs within a workflow task and records as a
	// marker with their attempt.
	activities, localActivities int
	// eventsByType are the events by workflow type: where they come from.
	eventsByType map[string]int
}

// executions are the activity executions of either kind.
func (w serverWork) executions() int { return w.activities + w.localActivities }

// workBetween is the work of every workflow of s's server whose events fall between from and
// to, but the ceiling's no-op workflows.
func workBetween(tb testing.TB, s *stack, from, to time.Time) serverWork {
	tb.Helper()
	w := serverWork{eventsByType: map[string]int{}}
	for _, info := range executions(tb, s) {
		ex := info.GetExecution()
		if strings.HasPrefix(ex.GetWorkflowId(), ceilingWorkflowIDPrefix) {
			continue
		}
		for _, ev := range history(tb, s.client, ex.GetWorkflowId(), ex.GetRunId()) {
			if at := ev.GetEventTime().AsTime(); at.Before(from) || at.After(to) {
				continue
			}
			w.events++
			w.eventsByType[info.GetType().GetName()]++
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				w.workflowTasks++
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
				w.activities += int(ev.GetActivityTaskStartedEventAttributes().GetAttempt())
			case enumspb.EVENT_TYPE_MARKER_RECORDED:
				w.localActivities += localActivityAttempts(tb, ev.GetMarkerRecordedEventAttributes())
			}
		}
	}
	return w
}

// localActivityAttempts is how many times the local activity a marker records ran: the attempt
// the SDK writes into the marker's data. A marker of another kind (a side effect, a version)
// ran none.
func localActivityAttempts(tb testing.TB, m *historypb.MarkerRecordedEventAttributes) int {
	tb.Helper()
	if m.GetMarkerName() != "LocalActivity" {
		return 0
	}
	var data struct{ Attempt int }
	require.NoError(tb, converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["data"], &data))
	return max(data.Attempt, 1)
}

// executions are every run of every workflow s's server holds, open or closed. A page is
// given a minute: the SDK's default of 10 s is too short for the embedded server's SQLite
// visibility to list a page of a three-hundred-proxy fleet.
func executions(tb testing.TB, s *stack) []*workflowpb.WorkflowExecutionInfo {
	tb.Helper()
	var out []*workflowpb.WorkflowExecutionInfo
	var token []byte
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{NextPageToken: token, PageSize: 200})
		cancel()
		require.NoError(tb, err)
		out = append(out, resp.GetExecutions()...)
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out
		}
	}
}
