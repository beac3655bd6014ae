package upgrade

import (
	"context"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
)

// What the tests read of histories.

// history is the history of a run; runID "" is the workflow's latest run.
func (f *fleet) history(workflowID, runID string) []*historypb.HistoryEvent {
	f.t.Helper()
	iter := f.c.GetWorkflowHistory(context.Background(), workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(f.t, err, "the history of %s", workflowID)
		events = append(events, ev)
	}
	return events
}

// workflowTaskBuilds lists the builds that completed the run's workflow tasks, in order, each
// once in a row: [release next release] for a run that moved to next and back.
func workflowTaskBuilds(events []*historypb.HistoryEvent) []string {
	var builds []string
	for _, ev := range events {
		if done := ev.GetWorkflowTaskCompletedEventAttributes(); done != nil {
			build := done.GetDeploymentVersion().GetBuildId()
			if len(builds) == 0 || builds[len(builds)-1] != build {
				builds = append(builds, build)
			}
		}
	}
	return builds
}

// timersSummarized counts the run's timers whose summary is summary: how often a build's
// change ran in it.
func timersSummarized(events []*historypb.HistoryEvent, summary string) int {
	n := 0
	for _, ev := range events {
		if ev.GetTimerStartedEventAttributes() == nil || ev.GetUserMetadata().GetSummary() == nil {
			continue
		}
		var s string
		if converter.GetDefaultDataConverter().FromPayload(ev.GetUserMetadata().GetSummary(), &s) == nil && s == summary {
			n++
		}
	}
	return n
}

// failedTask is a WorkflowTaskFailed event of a run: a workflow task that a worker could not
// complete, such as one whose replay found the history to differ from the code's commands.
type failedTask struct {
	workflowID string
	cause      enumspb.WorkflowTaskFailedCause
	message    string
}

// failedWorkflowTasks are the failed workflow tasks in every run of the namespace, open or
// closed. A failed task's retries are not recorded, so each failing spell shows once.
func (f *fleet) failedWorkflowTasks() []failedTask {
	f.t.Helper()
	var out []failedTask
	for _, run := range f.runs("") {
		for _, ev := range f.history(run.workflowID, run.runID) {
			if a := ev.GetWorkflowTaskFailedEventAttributes(); a != nil {
				out = append(out, failedTask{workflowID: run.workflowID, cause: a.GetCause(), message: a.GetFailure().GetMessage()})
			}
		}
	}
	return out
}

// aRun names one run of a workflow, as visibility lists it.
type aRun struct {
	workflowID, runID, workflowType string
}

// runs are the runs the namespace's visibility lists for query ("" for all).
func (f *fleet) runs(query string) []aRun {
	f.t.Helper()
	var out []aRun
	var token []byte
	for {
		resp, err := f.c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 500})
		require.NoError(f.t, err, "list the runs of %q", query)
		for _, e := range resp.GetExecutions() {
			out = append(out, aRun{workflowID: e.GetExecution().GetWorkflowId(), runID: e.GetExecution().GetRunId(), workflowType: e.GetType().GetName()})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out
		}
	}
}
