package upgrade

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The proxies of the upgrade test, by role: what is asked of each, on which build.
const (
	// changedTwice is created and changed on the release, and changed again on next. Its
	// entity replays the release's change on next, where GetVersion answers DefaultVersion and
	// keeps the old path. GetVersion answers once per change ID and run, so the entity keeps
	// the old path for its second change too: it never takes next's branch, and the release
	// can take it back.
	changedTwice = "changed-twice"
	// changedOnNext is created on the release and changed on next: its entity takes next's
	// branch. The operator pins it to next before the rollback.
	changedOnNext = "changed-on-next"
	// createdOnNext is created and changed on next, taking next's branch. It is not pinned
	// before the rollback: its next workflow task reaches the release.
	createdOnNext = "created-on-next"
	// changing's change, deleting's delete and creating's create are in flight at the upgrade.
	changing = "changing"
	deleting = "deleting"
	creating = "creating"
	// deletedOnNext is created and changed on the release and deleted on next.
	deletedOnNext = "deleted-on-next"
	// creatingAtRollback's create, on next, is in flight at the rollback.
	creatingAtRollback = "creating-at-rollback"
	// createdAfterRollback is created once the release is current again.
	createdAfterRollback = "created-after-rollback"
)

var roles = []string{changedTwice, changedOnNext, createdOnNext, changing, deleting, creating, deletedOnNext, creatingAtRollback, createdAfterRollback}

// kept are the proxies present at the end; the others were deleted.
var kept = []string{creatingAtRollback, createdAfterRollback}

// TestUpgrade_aFleetMovesToANewBuildAndBackWithNothingLostOrBroken runs a fleet on the release
// under Worker Deployment versioning, makes next current while a create, a change and a delete
// are in flight, and rolls back to the release while a create of next's is in flight. It checks
// that every operation (a short workflow, pinned) ran all its workflow tasks on the build it
// started on; that the entities and the clone admission (long-lived, auto-upgrading) moved to
// next and back, replaying the other build's histories with no failed workflow task; and that
// no proxy was lost or made twice.
//
// The rollback is the one docs/deploy.md has an operator make. The release cannot replay a
// history in which next's new branch ran (the branch's timer is a command the release does not
// make), so the entities that took it must stay on next: the operator lists them by
// TemporalChangeVersion and pins them there before the rollback. The test leaves one of the two
// unpinned: its next workflow task fails on the release with a nondeterminism error, and the
// request that brought it fails. Next made current again takes it back; pinned to next, it
// stays there through the second rollback, made while a create of next's is in flight.
func TestUpgrade_aFleetMovesToANewBuildAndBackWithNothingLostOrBroken(t *testing.T) {
	t.Parallel()
	skipShort(t)
	bins := binaries(t, release, next)
	f := newFleet(t)
	f.step("the server and the simulator are up")
	f.startWorker(bins[release], release, "--promote")
	f.waitCurrent(release)
	f.step("the release is current")

	// On the release: the fleet, two of it changed, so that their entities' histories hold the
	// release's change path for next to replay.
	f.serve(f.create(changedTwice), f.create(changedOnNext), f.create(changing), f.create(deleting), f.create(deletedOnNext))
	f.serve(f.change(changedTwice), f.change(deletedOnNext))
	f.step("the fleet runs on the release")

	// The upgrade: next polls beside the release, current for nothing yet (the canary of
	// docs/deploy.md), and is made current while a create waits for its clone and a change and
	// a delete run.
	f.startWorker(bins[next], next)
	f.waitPolling(next)
	atUpgrade := []*op{f.create(creating), f.change(changing), f.remove(deleting)}
	f.waitRunning(atUpgrade...)
	upgradedAt := f.promote(next)
	f.step("next is current")
	f.serve(f.change(changedTwice), f.change(changedOnNext), f.remove(deletedOnNext), f.create(createdOnNext))
	f.serve(f.change(createdOnNext))
	f.serve(atUpgrade...)
	f.step("next served every request")

	for _, role := range []string{changedTwice, changedOnNext, createdOnNext, changing, deleting, creating, deletedOnNext} {
		v := f.describe(core.ProxyWorkflowID(uidOf(role)), "")
		assert.Equal(t, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE, v.behavior, "the entity of %s", role)
		assert.Equal(t, next, v.build, "the entity of %s moved to next", role)
	}
	assert.Equal(t, next, f.describe(f.admissionID(), "").build, "the clone admission moved to next")
	f.checkVMs([]string{changedTwice, changedOnNext, createdOnNext, changing, creating}, "after the upgrade")

	// The rollback. The entities that took next's branch are found as an operator finds them;
	// one of the two is pinned to next.
	var tookBranch []string
	f.eventually("visibility lists the entities that took next's branch", func() bool {
		tookBranch = workflowIDs(f.runs(fmt.Sprintf("TemporalChangeVersion = %q AND ExecutionStatus = 'Running'", entityChangeVersion)))
		return len(tookBranch) >= 2
	})
	assert.ElementsMatch(t, []string{core.ProxyWorkflowID(uidOf(changedOnNext)), core.ProxyWorkflowID(uidOf(createdOnNext))}, tookBranch)
	f.pin(uidOf(changedOnNext), next)
	f.promote(release)
	f.step("the release is current again")

	// The unpinned entity's next workflow task reaches the release, which cannot replay next's
	// branch: the task fails, and the request that brought it is not accepted. Temporal answers
	// it so once its wait for the request's acceptance has run out, about 20 s later.
	unpinned := core.ProxyWorkflowID(uidOf(createdOnNext))
	_, err := f.deleteRequest(t.Context(), uidOf(createdOnNext))
	require.ErrorContains(t, err, "Workflow Task in failed state", "a request to the entity the release cannot replay")
	failed := f.failedTasksOf(unpinned)
	require.Len(t, failed, 1)
	assert.Equal(t, enumspb.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR, failed[0].cause, failed[0].message)
	f.step("the unpinned entity failed its workflow task on the release")

	// Next made current again takes it back, once the task the release holds has timed out. (A
	// pin now would not: the server goes on sending the task to the release, to which the
	// entity's move is under way, docs/deploy.md.) Then the operator pins it, and rolls back
	// again while a create of next's is in flight.
	f.promote(next)
	f.eventually("the unpinned entity settles on next", func() bool {
		desc, err := f.c.DescribeWorkflowExecution(t.Context(), unpinned, "")
		return err == nil && desc.GetPendingWorkflowTask() == nil && desc.GetWorkflowExecutionInfo().GetVersioningInfo().GetVersionTransition() == nil
	})
	f.pin(uidOf(createdOnNext), next)
	atRollback := f.create(creatingAtRollback)
	f.waitRunning(atRollback)
	rolledBackAt := f.promote(release)
	f.step("rolled back again")

	f.serve(atRollback)
	f.serve(f.send(uidOf(changedOnNext), proxyvm.OpDelete, next, f.deleteRequest), // pinned to next
		f.send(uidOf(createdOnNext), proxyvm.OpDelete, next, f.deleteRequest), // pinned to next
		f.remove(changedTwice), f.remove(changing), f.remove(creating), f.create(createdAfterRollback))
	f.step("every request served")

	// Every operation ran on the build it started on, each in flight at a switch across it.
	for _, role := range roles {
		f.checkOperations(role)
	}
	for _, o := range atUpgrade {
		f.checkInFlightAt(o, upgradedAt)
	}
	f.checkInFlightAt(atRollback, rolledBackAt)

	// The entities and the admission moved with the current build, but for the two pinned to
	// next; next's branch ran in the two that took it.
	wantBuilds := map[string][]string{
		changedTwice: {release, next, release}, changedOnNext: {release, next}, createdOnNext: {next},
		changing: {release, next, release}, creating: {release, next, release},
		deleting: {release, next}, deletedOnNext: {release, next},
		creatingAtRollback: {next, release}, createdAfterRollback: {release},
	}
	for _, role := range roles {
		events := f.history(core.ProxyWorkflowID(uidOf(role)), "")
		assert.Equal(t, wantBuilds[role], workflowTaskBuilds(events), "the builds of the workflow tasks of the entity of %s", role)
		branch := 0
		if role == changedOnNext || role == createdOnNext {
			branch = 1
			assert.Equal(t, next, f.describe(core.ProxyWorkflowID(uidOf(role)), "").pinnedTo, "the entity of %s is pinned to next", role)
		}
		assert.Equal(t, branch, timersSummarized(events, entityChangeSummary), "the runs of next's branch in the entity of %s", role)
	}
	assert.Equal(t, []string{release, next, release}, workflowTaskBuilds(f.history(f.admissionID(), "")), "the builds of the clone admission's workflow tasks")

	// No workflow task failed anywhere but the unpinned entity's, once, on the release.
	if failed := f.failedWorkflowTasks(); assert.Len(t, failed, 1, "failed workflow tasks: %+v", failed) {
		assert.Equal(t, unpinned, failed[0].workflowID)
	}
	f.checkVMs(kept, "after the rollback")
	assert.Equal(t, len(f.kinds(proxyvm.OpCreate)), f.cluster.CallCount("Clone"), "one clone per create")
	f.step("checked")
}

// TestUpgrade_theLongLivedChangeWithoutItsGetVersionFailsAnEntityThatRanTheOldCode is the
// upgrade of the first test's changedTwice with next's entity change made without its
// GetVersion: an entity that took the change path on the release, moved to the new build by
// its next workflow task, fails that task with a nondeterminism error, as the first test's
// check of failed workflow tasks reports it. So the upgrade test fails if the long-lived
// change is made without its GetVersion, as issue 35 asks.
func TestUpgrade_theLongLivedChangeWithoutItsGetVersionFailsAnEntityThatRanTheOldCode(t *testing.T) {
	t.Parallel()
	skipShort(t)
	bins := binaries(t, release, nextWithoutGetVersion)
	f := newFleet(t)
	f.startWorker(bins[release], release, "--promote")
	f.waitCurrent(release)
	f.serve(f.create(changedTwice))
	f.serve(f.change(changedTwice))
	f.step("the proxy is created and changed on the release")
	f.startWorker(bins[nextWithoutGetVersion], next)
	f.waitPolling(next)
	f.promote(next)
	f.step("the build without GetVersion is current")

	// The request is not accepted: the workflow task that brings it to the entity fails. It is
	// given a few seconds; the failed task is in the entity's history by then.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err := f.changeRequest(ctx, uidOf(changedTwice))

	require.Error(t, err, "the change request, whose workflow task failed, was accepted")
	entity := core.ProxyWorkflowID(uidOf(changedTwice))
	var failed []failedTask
	f.eventually("the entity fails its workflow task on the build without GetVersion", func() bool {
		failed = f.failedWorkflowTasks()
		return len(failed) > 0
	})
	require.Len(t, failed, 1, "failed workflow tasks: %+v", failed)
	assert.Equal(t, entity, failed[0].workflowID)
	assert.Equal(t, enumspb.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR, failed[0].cause, failed[0].message)
	assert.Contains(t, failed[0].message, "nondeterministic")
	f.step("checked")
}

// skipShort skips a test of -short: each builds the worker and runs it as processes for a
// minute or more.
func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker twice and runs a fleet on real processes for a minute or more")
	}
}

// failedTasksOf are the failed workflow tasks of the workflow's latest run.
func (f *fleet) failedTasksOf(workflowID string) []failedTask {
	var out []failedTask
	for _, ev := range f.history(workflowID, "") {
		if a := ev.GetWorkflowTaskFailedEventAttributes(); a != nil {
			out = append(out, failedTask{workflowID: workflowID, cause: a.GetCause(), message: a.GetFailure().GetMessage()})
		}
	}
	return out
}

// admissionID is the workflow ID of the clone admission of the fleet's storage.
func (f *fleet) admissionID() string {
	f.t.Helper()
	runs := f.runs(fmt.Sprintf("WorkflowType = %q", core.CloneAdmissionName))
	require.NotEmpty(f.t, runs, "no clone admission")
	return runs[0].workflowID
}

func workflowIDs(runs []aRun) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.workflowID)
	}
	return out
}

// kinds are the requests of kind the test sent.
func (f *fleet) kinds(kind string) []*op {
	var out []*op
	for _, o := range f.ops {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// checkOperations checks that the entity of role's proxy ran one operation for each request
// sent to it, in order and of its kind, and each to completion, pinned to the build it started
// on with every workflow task there; and that next's creates ran next's short change.
func (f *fleet) checkOperations(role string) {
	f.t.Helper()
	uid := uidOf(role)
	st, err := f.status(uid)
	require.NoError(f.t, err, "the status of %s", uid)
	ops := f.opsOf(uid)
	if !assert.Nil(f.t, st.Operation, "%s: an operation still runs", role) || !assert.Len(f.t, st.Operations, len(ops), "%s: operations %+v", role, st.Operations) {
		return
	}
	for i, rec := range st.Operations {
		o := ops[i]
		what := fmt.Sprintf("%s's %s #%d", role, o.kind, i+1)
		assert.Equal(f.t, o.kind, rec.Kind, what)
		assert.Equal(f.t, "requested", rec.Reason, what)
		assert.Equal(f.t, "completed", rec.Outcome, what)
		v := f.describe(rec.WorkflowID, rec.RunID)
		assert.Equal(f.t, enumspb.VERSIONING_BEHAVIOR_PINNED, v.behavior, what)
		assert.Equal(f.t, o.build, v.build, "%s runs pinned to its build", what)
		events := f.history(rec.WorkflowID, rec.RunID)
		assert.Equal(f.t, []string{o.build}, workflowTaskBuilds(events), "%s: every workflow task on its build", what)
		if o.kind == proxyvm.OpCreate {
			want := 0
			if o.build == next {
				want = 1
			}
			assert.Equal(f.t, want, timersSummarized(events, createChangeSummary), "%s: the runs of next's short change", what)
		}
	}
}

// checkInFlightAt checks that o's operation started before build was made current and closed
// after: it was in flight across the switch.
func (f *fleet) checkInFlightAt(o *op, at time.Time) {
	f.t.Helper()
	st, err := f.status(o.uid)
	require.NoError(f.t, err)
	i := slices.Index(f.opsOf(o.uid), o)
	require.Less(f.t, i, len(st.Operations))
	rec := st.Operations[i]
	v := f.describe(rec.WorkflowID, rec.RunID)
	assert.True(f.t, v.started.Before(at) && v.closed.After(at),
		"the %s of %s ran from %s to %s, not across the switch at %s: make it slower (taskDurations)",
		o.kind, o.uid, v.started.Format(time.StampMilli), v.closed.Format(time.StampMilli), at.Format(time.StampMilli))
}

// checkVMs checks the simulator: each proxy of present has one VM, no other proxy has any, no
// VM is there that pveflow did not make (but the template), and every seed ISO is a present
// proxy's.
func (f *fleet) checkVMs(present []string, when string) {
	f.t.Helper()
	byUID := map[string][]int{}
	var strays []string
	for _, vm := range f.cluster.VMs() {
		if m, managed := proxy.ParseDescription(vm.Config["description"]); managed {
			byUID[m.UID] = append(byUID[m.UID], vm.VMID)
		} else if vm.Config["template"] != "1" {
			strays = append(strays, fmt.Sprintf("VM %d", vm.VMID))
		}
	}
	for _, role := range roles {
		want := 0
		if slices.Contains(present, role) {
			want = 1
		}
		assert.Len(f.t, byUID[uidOf(role)], want, "%s: the VMs of %s", when, role)
		delete(byUID, uidOf(role))
	}
	assert.Empty(f.t, byUID, "%s: VMs of proxies the test never asked for", when)
	assert.Empty(f.t, strays, "%s: VMs pveflow did not make", when)
	var names []string
	for _, role := range present {
		names = append(names, proxy.NameFromUID(uidOf(role)))
	}
	for _, v := range f.cluster.Volumes() {
		if name, ok := proxy.SeedISOOwner(v.VolID); ok && v.Data != nil {
			assert.Contains(f.t, names, name, "%s: the seed ISO %s of a proxy not present", when, v.VolID)
		}
	}
}
