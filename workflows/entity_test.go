package workflows_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/admission"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// proxyEntity drives a Proxy entity in a test environment over the world's cluster: requests
// are sent at virtual times, and their answers kept.
type proxyEntity struct {
	t   *testing.T
	w   *world
	env *testsuite.TestWorkflowEnvironment
	// answers are the requests' answers by update ID.
	answers map[string]*answer
}

type answer struct {
	rejected error
	result   any
	err      error
	done     bool
}

func newProxyEntity(t *testing.T, w *world) *proxyEntity {
	env := w.env()
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: core.ProxyWorkflowID(uid)})
	// An entity that never closes would run on in virtual time.
	env.SetTestTimeout(30 * time.Second)
	return &proxyEntity{t: t, w: w, env: env, answers: map[string]*answer{}}
}

// request sends update name with arg at virtual time at, under id.
func (p *proxyEntity) request(at time.Duration, name, id string, arg any) {
	a := &answer{}
	p.answers[id] = a
	p.env.RegisterDelayedCallback(func() {
		p.env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { a.rejected, a.done = err, true },
			OnComplete: func(res any, err error) {
				a.result, a.err, a.done = res, err, true
			},
		}, arg)
	}, at)
}

// at runs f at virtual time d.
func (p *proxyEntity) at(d time.Duration, f func()) { p.env.RegisterDelayedCallback(f, d) }

// run runs the entity until it closes: the tests end with the proxy absent, and the entity
// closes entity.closeAfter later.
func (p *proxyEntity) run() proxyvm.ProxyStatus {
	p.env.ExecuteWorkflow(core.ProxyName, proxyvm.ProxyInput{UID: uid})
	require.True(p.t, p.env.IsWorkflowCompleted())
	require.NoError(p.t, p.env.GetWorkflowError())
	var st proxyvm.ProxyStatus
	require.NoError(p.t, p.env.GetWorkflowResult(&st))
	return st
}

// details are the entity's current details, as the UI reads them.
func (p *proxyEntity) details() string {
	v, err := p.env.QueryWorkflow("__temporal_workflow_metadata")
	require.NoError(p.t, err)
	var md sdkpb.WorkflowMetadata
	require.NoError(p.t, v.Get(&md))
	return md.GetCurrentDetails()
}

// status asks the entity for its status.
func (p *proxyEntity) status() proxyvm.ProxyStatus {
	v, err := p.env.QueryWorkflow(core.StatusQuery)
	require.NoError(p.t, err)
	var st proxyvm.ProxyStatus
	require.NoError(p.t, v.Get(&st))
	return st
}

// created is what the request "create" answered.
func (p *proxyEntity) created() proxyvm.CreateProxyResult {
	return p.answer("create").result.(proxyvm.CreateProxyResult)
}

func (p *proxyEntity) answer(id string) *answer {
	a := p.answers[id]
	require.True(p.t, a.done, "request %s was answered", id)
	return a
}

// kinds are the kinds and outcomes of the entity's operations, in order.
func kinds(st proxyvm.ProxyStatus) []string {
	var out []string
	for _, op := range st.Operations {
		out = append(out, op.Kind+":"+op.Outcome)
	}
	return out
}

func deleteInput() proxyvm.DeleteProxyInput { return proxyvm.DeleteProxyInput{UID: uid} }

func TestProxy_createThenDeleteLeavesNothing(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	created := p.created()
	assert.NotEmpty(t, created.IPv4)
	require.NoError(t, p.answer("delete").err)
	assert.Equal(t, []string{"create:completed", "delete:completed"}, kinds(st))
	assert.Equal(t, proxyvm.ProxyAbsent, st.Phase)
	assert.Empty(t, w.vms())
	assert.Empty(t, w.isos())
}

// While a create runs, the entity's current details (what the UI shows on its page) link to
// the create's page, where its wait shows: the entity cannot know the wait without a signal.
func TestProxy_detailsLinkToTheRunningOperationsPage(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())
	var during string
	p.at(20*time.Second, func() { during = p.details() }) // the clone takes 45 s

	p.run()

	assert.Equal(t, "creating: create (requested), what it waits for shows on its page: "+
		"[proxy/"+uid+"/create](/namespaces/default-test-namespace/workflows/proxy%2F"+uid+"%2Fcreate)", during)
}

func TestProxy_deleteWhileCloningStopsTheCreateAndLeavesNothing(t *testing.T) {
	w := newWorld(t)
	w.cfg.Clones.PerStorage = 1
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	// The clone takes 45 s.
	var during proxyvm.ProxyStatus
	p.at(20*time.Second, func() { during = p.status() })
	p.request(21*time.Second, core.DeleteUpdate, "delete", deleteInput())
	var adm admission.AdmissionState
	admissionID := admission.CloneAdmissionWorkflowID("default-test-taskqueue", "pve1/local-lvm")
	p.at(30*time.Minute, func() {
		v, err := p.env.QueryWorkflowByID(admissionID, admission.AdmissionQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&adm))
	})
	// The admission outlives the create that started it; idle, it closes when cancelled, and
	// the test environment with it.
	p.at(31*time.Minute, func() { p.env.CancelWorkflowByID(admissionID, "") })

	st := p.run()

	assert.Equal(t, proxyvm.ProxyCreating, during.Phase)
	assert.Equal(t, core.CreateWorkflowID(uid), during.Operation.WorkflowID)
	created := p.answer("create")
	assert.Equal(t, core.FailSuperseded, failureType(t, created.err))
	require.NoError(t, p.answer("delete").err)
	assert.Equal(t, []string{"create:cancelled", "delete:completed"}, kinds(st))
	assert.Empty(t, w.vms(), "the clone the create began is destroyed")
	assert.Empty(t, w.isos())
	assert.Len(t, w.cluster.CloneRuns(), 1)
	assert.Empty(t, adm.Holders, "the cancelled create gave its clone lease back")
	assert.Empty(t, adm.Covered, "and the admission has seen its clone end")
}

func TestProxy_createAfterDeleteWaitsForIt(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create-1", createInput())
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())
	// The delete stops and destroys the VM; the create comes while it does.
	p.request(time.Hour+time.Second, core.CreateUpdate, "create-2", createInput())
	p.request(3*time.Hour, core.DeleteUpdate, "delete-2", deleteInput())

	st := p.run()

	require.NoError(t, p.answer("delete").err, "a delete that runs is not superseded by a later create")
	again := p.answer("create-2").result.(proxyvm.CreateProxyResult)
	first := p.answer("create-1").result.(proxyvm.CreateProxyResult)
	assert.Equal(t, first.VMID, again.VMID, "the same probe VMID, made anew")
	assert.Equal(t, []string{"create:completed", "delete:completed", "create:completed", "delete:completed"}, kinds(st))
}

func TestProxy_invalidRequestsAreRefusedAndNothingRecorded(t *testing.T) {
	tests := []struct {
		name    string
		update  string
		arg     any
		wantErr string
	}{
		{"unknown machine type", core.CreateUpdate, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "huge"}, `machineType: "huge" is not a configured machine type`},
		{"another proxy's UID", core.CreateUpdate, proxyvm.ProxySpec{UID: otherUID, Image: "debian13", MachineType: "small"}, "send it to proxy/" + otherUID},
		{"name that is not a DNS label", core.CreateUpdate, proxyvm.ProxySpec{UID: uid, Name: "egress.eu-1", Image: "debian13", MachineType: "small"}, `name "egress.eu-1" is not a DNS label`},
		{"invalid addresses", core.CreateUpdate, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small", Addresses: proxy.Addresses{Gateway6: "fe80::1"}}, "addresses: gateway6 fe80::1 is given without an ipv6 address"},
		{"user-data too large", core.CreateUpdate, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small", UserData: string(make([]byte, proxyvm.MaxUserDataBytes+1))}, "more than the limit"},
		{"change of nothing", core.ChangeUpdate, proxyvm.ChangeRequest{UID: uid}, "nothing to change"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			p := newProxyEntity(t, w)
			p.request(0, tt.update, "bad", tt.arg)
			started := p.env.Now()

			st := p.run()

			require.ErrorContains(t, p.answer("bad").rejected, tt.wantErr)
			assert.Equal(t, core.FailRejected, failureType(t, p.answer("bad").rejected))
			assert.Empty(t, st.Operations)
			assert.False(t, st.Desired.Present)
			assert.Zero(t, w.cluster.CallCount("Clone")+w.cluster.CallCount("Destroy"))
			assert.Less(t, p.env.Now().Sub(started), time.Second, "the entity the refused request started closed at once")
		})
	}
}

func TestProxy_createOfAPresentProxyWithAnotherSpecIsRefused(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	other := createInput()
	other.UserData = "#cloud-config\nhostname: other\n"
	p.request(time.Hour, core.CreateUpdate, "create-other", other)
	p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	rejected := p.answer("create-other").rejected
	require.ErrorContains(t, rejected, "it exists with another spec (user-data)")
	assert.NotContains(t, rejected.Error(), "hostname", "the user-data is never in a message")
}

func TestProxy_createOfAPresentProxyWithOtherAddressesIsRefused(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	other := createInput()
	other.Addresses = proxy.Addresses{IPv4: "192.0.2.10/24"}
	p.request(time.Hour, core.CreateUpdate, "create-other", other)
	p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	require.ErrorContains(t, p.answer("create-other").rejected, `it exists with another spec (addresses "ipv4 by dhcp" -> "ipv4 192.0.2.10/24")`)
}

func TestProxy_healsAStoppedVMByStartingIt(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.at(10*time.Minute, func() {
		_, err := w.cluster.Stop(context.Background(), p.created().Node, p.created().VMID)
		require.NoError(t, err)
	})
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	ops := st.Operations
	require.Len(t, ops, 3, kinds(st))
	vmid := p.created().VMID
	assert.Equal(t, "create", ops[1].Kind)
	assert.Equal(t, "check: VM "+itoa(vmid)+" on node pve1 was stopped", ops[1].Reason)
	assert.Equal(t, "completed", ops[1].Outcome)
	assert.Equal(t, 1, w.cluster.CallCount("Clone"), "the stopped VM is started, not made anew")
	assert.Equal(t, 2, w.cluster.CallCount("Start"))
}

func TestProxy_healsADestroyedVMByCreatingItAgain(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.at(10*time.Minute, func() {
		_, err := w.cluster.Stop(context.Background(), p.created().Node, p.created().VMID)
		require.NoError(t, err)
	})
	p.at(11*time.Minute, func() {
		_, err := w.cluster.Destroy(context.Background(), p.created().Node, p.created().VMID)
		require.NoError(t, err)
	})
	var healed proxyvm.ProxyStatus
	p.at(50*time.Minute, func() { healed = p.status() })
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	require.Len(t, st.Operations, 3, kinds(st))
	assert.Equal(t, "check: the proxy has no VM", st.Operations[1].Reason)
	assert.Equal(t, 2, w.cluster.CallCount("Clone"), "made anew")
	assert.Equal(t, proxyvm.ProxyPresent, healed.Phase)
	assert.NotEmpty(t, healed.Observed.IPv4)
	assert.Empty(t, w.vms())
}

func TestProxy_failedCreateIsReportedAndNotRetriedUntilAskedOrChecked(t *testing.T) {
	w := newWorld(t)
	w.cfg.Entity.CheckInterval = 0
	w.cluster.FailTask("qmclone", "clone failed: storage gone")
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	var failed proxyvm.ProxyStatus
	p.at(time.Hour, func() { failed = p.status() })
	p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	assert.Equal(t, core.FailTransient, failureType(t, p.answer("create").err))
	assert.Equal(t, proxyvm.ProxyFailed, failed.Phase)
	assert.Contains(t, failed.LastFailure, "storage gone")
	assert.Equal(t, []string{"create:failed", "delete:completed"}, kinds(st))
	assert.Empty(t, st.LastFailure, "the delete succeeded since")
}

func TestProxy_continuesAsNewInTheMiddleOfAnOperationAndTheNextRunFollowsIt(t *testing.T) {
	w := newWorld(t)
	w.cfg.Entity.CheckJitter = 0
	first := newProxyEntity(t, w)
	first.request(0, core.CreateUpdate, "create", createInput())
	// The create's clone takes 45 s; the request it serves is answered once it closes, so the
	// run continues as new only then... unless nothing waits for it: a heal's create.
	first.at(10*time.Minute, func() {
		created := first.answer("create").result.(proxyvm.CreateProxyResult)
		_, err := w.cluster.Stop(context.Background(), created.Node, created.VMID)
		require.NoError(t, err)
	})
	// The create closes at 1:16; the check 5 min later finds the VM running, the next at 11:17
	// finds it stopped and starts a create that provisions it again: the history is long by
	// then.
	var healing proxyvm.ProxyStatus
	first.at(11*time.Minute+25*time.Second, func() {
		healing = first.status()
		first.env.SetContinueAsNewSuggested(true)
	})

	first.env.ExecuteWorkflow(core.ProxyName, proxyvm.ProxyInput{UID: uid})

	var cont *workflow.ContinueAsNewError
	require.True(t, errors.As(first.env.GetWorkflowError(), &cont), "continued as new: %v", first.env.GetWorkflowError())
	require.NoError(t, first.answer("create").err)
	var in proxyvm.ProxyInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(cont.Input, &in))
	require.NotNil(t, in.State)
	require.NotNil(t, in.State.Current, "the heal's create was carried: healing %+v", healing)
	assert.Equal(t, proxyvm.ProxyHealing, healing.Phase)
	assert.Equal(t, core.CreateWorkflowID(uid), in.State.Current.WorkflowID)
	assert.Equal(t, createInput().UserData, in.State.Spec.UserData)
	assert.Empty(t, in.State.Applied, "unknown while the heal runs")

	// The abandoned create goes on; here it is run to its end, as the server would.
	w.advance(time.Minute)
	_, err := w.create(createInput())
	require.NoError(t, err)
	w.runs.set(in.State.Current.WorkflowID, activities.RunInfo{RunID: in.State.Current.RunID, Running: true, StartedAt: in.State.Current.StartedAt})
	second := newProxyEntity(t, w)
	second.at(time.Minute, func() { w.runs.close(in.State.Current.WorkflowID, "completed") })
	var resumed proxyvm.ProxyStatus
	second.at(3*time.Minute, func() { resumed = second.status() })
	second.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())

	second.env.ExecuteWorkflow(core.ProxyName, in)

	require.NoError(t, second.env.GetWorkflowError())
	assert.Equal(t, 2, resumed.Runs)
	assert.Equal(t, proxyvm.ProxyPresent, resumed.Phase)
	assert.NotEmpty(t, resumed.Observed.IPv4, "checked once the carried create closed")
	ops := resumed.Operations
	require.NotEmpty(t, ops)
	assert.Equal(t, in.State.Current.Seq, ops[len(ops)-1].Seq)
	assert.Equal(t, "completed", ops[len(ops)-1].Outcome)
	require.NoError(t, second.answer("delete").err)
	assert.Empty(t, w.vms())
}

func TestProxy_newEntityWaitsForTheOperationAnEarlierEntityLeftRunning(t *testing.T) {
	for _, tt := range []struct {
		kind, workflowID   string
		supersededByDelete bool
		outcome            string
	}{
		{proxyvm.OpCreate, core.CreateWorkflowID(uid), true, "cancelled"},
		{proxyvm.OpChange, core.ChangeWorkflowID(uid), true, "cancelled"},
		{proxyvm.OpDelete, core.DeleteWorkflowID(uid), false, "completed"},
	} {
		// The delete is the request that starts the new entity (an Update with start), or one
		// that comes once it follows the operation.
		for _, sentAt := range []time.Duration{0, time.Second} {
			t.Run(fmt.Sprintf("%s/delete at %s", tt.kind, sentAt), func(t *testing.T) {
				w := newWorld(t)
				// The entity that started it was terminated; the operation runs on without it.
				w.runs.start(tt.workflowID, w.clock.Now().Add(-time.Minute))
				p := newProxyEntity(t, w)
				cancelled := false
				p.env.OnRequestCancelExternalWorkflow(mock.Anything, tt.workflowID, mock.Anything).Return(nil).Run(func(mock.Arguments) { cancelled = true })
				p.request(sentAt, core.DeleteUpdate, "delete", deleteInput())
				var waiting proxyvm.ProxyStatus
				p.at(time.Minute, func() { waiting = p.status() })
				p.at(2*time.Minute, func() {
					status := "completed"
					if cancelled {
						status = "canceled"
					}
					w.runs.close(tt.workflowID, status)
				})

				st := p.run()

				require.NotNil(t, waiting.Operation, "the operation found running")
				assert.Equal(t, tt.kind, waiting.Operation.Kind)
				assert.Equal(t, "found running when the entity started", waiting.Operation.Reason)
				assert.Empty(t, waiting.Operations, "nothing else ran meanwhile")
				assert.Equal(t, tt.supersededByDelete, cancelled, "the delete asked it to stop")
				require.NoError(t, p.answer("delete").err)
				assert.Equal(t, []string{tt.kind + ":" + tt.outcome, "delete:completed"}, kinds(st))
				assert.False(t, st.Operations[1].StartedAt.Before(st.Operations[0].ClosedAt), "the delete started once the adopted operation closed")
			})
		}
	}
}

func TestProxy_newEntityAsksAboutItsOperationsByCallsNotActivities(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	var scheduled, calls []string
	p.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		scheduled = append(scheduled, info.ActivityType.Name)
	})
	p.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		calls = append(calls, info.ActivityType.Name)
	})
	p.request(0, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	assert.NotContains(t, scheduled, "DescribeRun", "no DescribeRun activity")
	require.GreaterOrEqual(t, len(calls), 3, "calls: %v", calls)
	assert.Equal(t, []string{"DescribeRun", "DescribeRun", "DescribeRun"}, calls[:3], "the create, change and delete IDs, before anything else")
}

// A worker lost holding an operation's workflow task hands it on within five seconds, not
// Temporal's default ten: the granted create's task that starts its clone holds a clone slot
// that creates queue for.
func TestProxy_theOperationsHandAWorkflowTaskOnWithinFiveSeconds(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	timeouts := map[string]time.Duration{}
	p.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&scheduledSeen{child: func(name string, o workflow.ChildWorkflowOptions) {
		timeouts[name] = o.WorkflowTaskTimeout
	}}}})
	p.request(0, core.CreateUpdate, "create", createInput())
	p.request(10*time.Minute, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	require.NoError(t, p.answer("create").err)
	require.NoError(t, p.answer("delete").err)
	for _, name := range []string{core.CreateProxyName, core.DeleteProxyName} {
		assert.Equal(t, 5*time.Second, timeouts[name], "%s's workflow task timeout", name)
	}
}

// withMachineTypes adds machine types large (4 cores) and xlarge (8 cores) to the world's
// config.
func withMachineTypes(w *world) {
	w.cfg.Proxmox.MachineTypes["large"] = config.MachineType{Cores: 4, MemoryMiB: 4096, DiskGiB: 10}
	w.cfg.Proxmox.MachineTypes["xlarge"] = config.MachineType{Cores: 8, MemoryMiB: 8192, DiskGiB: 20}
}

func TestProxy_changeDuringCreateRunsOnceTheCreateIsDone(t *testing.T) {
	w := newWorld(t)
	withMachineTypes(w)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.request(20*time.Second, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
	var changed pve.VMConfig
	p.at(time.Hour, func() { changed = vmConfig(t, w, p.created().VMID) })
	p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	require.NoError(t, p.answer("create").err)
	res := p.answer("change").result.(proxyvm.ChangeProxyResult)
	assert.Equal(t, []string{"cores 2 -> 4", "memory 2048 -> 4096 MiB"}, res.Changed)
	assert.True(t, res.Restarted)
	assert.NotEmpty(t, res.IPv4)
	assert.Equal(t, "4", changed["cores"])
	assert.Equal(t, []string{"create:completed", "change:completed", "delete:completed"}, kinds(st))
}

func TestProxy_twoChangesInARowTheLaterWins(t *testing.T) {
	w := newWorld(t)
	withMachineTypes(w)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	// Both come while the create runs, so one change serves both.
	p.request(10*time.Second, core.ChangeUpdate, "change-1", proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
	p.request(11*time.Second, core.ChangeUpdate, "change-2", proxyvm.ChangeRequest{UID: uid, MachineType: "xlarge"})
	// This one comes while that change runs (the create ends at about 82 s, its 45 s clone seen
	// at 54 s and its guest's boot; the change reboots it and runs to about 105 s), and runs
	// after it.
	p.request(90*time.Second, core.ChangeUpdate, "change-3", proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
	var final pve.VMConfig
	var desired proxyvm.DesiredState
	p.at(time.Hour, func() {
		final = vmConfig(t, w, p.created().VMID)
		desired = p.status().Desired
	})
	p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	first, second := p.answer("change-1").result.(proxyvm.ChangeProxyResult), p.answer("change-2").result.(proxyvm.ChangeProxyResult)
	assert.Equal(t, first, second, "one change served both")
	assert.Contains(t, second.Changed, "cores 2 -> 8")
	third := p.answer("change-3").result.(proxyvm.ChangeProxyResult)
	assert.Contains(t, third.Changed, "cores 8 -> 4")
	assert.Equal(t, "4", final["cores"])
	assert.Equal(t, "large", desired.MachineType)
	assert.Equal(t, []string{"create:completed", "change:completed", "change:completed", "delete:completed"}, kinds(st))
}

func TestProxy_newUserDataGivesANewSeedWithANewInstanceIDAndAReboot(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	fresh := "#cloud-config\nruncmd: [echo changed]\n"
	p.request(time.Hour, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, UserData: &fresh})
	var seedUserData, seedMeta string
	var desired proxyvm.DesiredState
	p.at(2*time.Hour, func() {
		seedUserData, seedMeta = seedFile(t, w, "user-data"), seedFile(t, w, "meta-data")
		desired = p.status().Desired
	})
	p.request(3*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	res := p.answer("change").result.(proxyvm.ChangeProxyResult)
	assert.True(t, res.Restarted)
	assert.Equal(t, fresh, seedUserData)
	assert.Contains(t, seedMeta, "instance-id: "+uid+".g1\n")
	assert.Equal(t, uid+".g1", desired.InstanceID)
	assert.Equal(t, 1, w.cluster.CallCount("Reboot"))
}

func TestProxy_driftIsReported(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.at(10*time.Minute, func() {
		require.NoError(t, w.cluster.SetVMConfig(context.Background(), p.created().Node, p.created().VMID, pve.VMConfig{"cores": "1"}))
	})
	var drifted proxyvm.ProxyStatus
	p.at(30*time.Minute, func() { drifted = p.status() })
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	assert.Equal(t, []string{"cores 1, spec 2"}, drifted.Observed.Drift)
	assert.Equal(t, proxyvm.ProxyPresent, drifted.Phase)
	assert.Equal(t, []string{"create:completed", "delete:completed"}, kinds(st), "reported, not put back")
}

func TestProxy_nicDriftIsReported(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.MachineTypes["small"] = withNICs(config.NIC{}, config.NIC{Bridge: "vmbr1", VLAN: 20})
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.at(10*time.Minute, func() {
		// Someone took net1 off the VM and put it on net2 by hand.
		require.NoError(t, w.cluster.SetVMConfig(context.Background(), p.created().Node, p.created().VMID,
			pve.VMConfig{"delete": "net1", "net2": "virtio,bridge=vmbr2"}))
	})
	var drifted proxyvm.ProxyStatus
	p.at(30*time.Minute, func() { drifted = p.status() })
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	assert.Equal(t, []string{"net1 missing, spec (vmbr1, tag 20)", "net2 (vmbr2), spec none"}, drifted.Observed.Drift)
}

func TestProxy_aChangeWrittenButNotRebootedIsReportedAsDrift(t *testing.T) {
	w := newWorld(t)
	withMachineTypes(w)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.at(time.Hour-time.Minute, func() { failReboot(w) })
	p.request(time.Hour, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
	var owed proxyvm.ProxyStatus
	p.at(90*time.Minute, func() { owed = p.status() })
	p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	require.Error(t, p.answer("change").err)
	assert.Equal(t, []string{"reboot owed for cores 2 -> 4, memory 2048 -> 4096 MiB"}, owed.Observed.Drift,
		"the config shows the pending cores; the mark tells the guest has not seen them")
}

func TestProxy_driftIsPutBackWhenTheConfigSaysSo(t *testing.T) {
	w := newWorld(t)
	w.cfg.Entity.FixDrift = true
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.at(10*time.Minute, func() {
		require.NoError(t, w.cluster.SetVMConfig(context.Background(), p.created().Node, p.created().VMID, pve.VMConfig{"cores": "1"}))
	})
	var fixed pve.VMConfig
	p.at(50*time.Minute, func() { fixed = vmConfig(t, w, p.created().VMID) })
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	require.Len(t, st.Operations, 3, kinds(st))
	assert.Equal(t, "change", st.Operations[1].Kind)
	assert.Contains(t, st.Operations[1].Reason, "drifted from machine type small: cores 1, spec 2")
	assert.Equal(t, "2", fixed["cores"])
}

func TestProxy_newImageRebuildsTheVMOnTheSameVMID(t *testing.T) {
	w := newWorld(t)
	require.NoError(t, w.cluster.AddVM(pvesim.Template(9002, "pve1", 2)))
	w.cfg.Proxmox.Templates["debian14"] = config.Template{VMID: 9002}
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.request(time.Hour, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, Image: "debian14"})
	var during []proxyvm.ProxyStatus
	for at := time.Hour + 10*time.Second; at < time.Hour+3*time.Minute; at += 20 * time.Second {
		p.at(at, func() {
			if st := p.status(); st.Operation != nil {
				during = append(during, st)
			}
		})
	}
	p.request(3*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	created := p.created()
	res := p.answer("change").result.(proxyvm.ChangeProxyResult)
	assert.True(t, res.Rebuilt)
	assert.Equal(t, []string{`image "debian13" -> "debian14"`}, res.Changed)
	assert.Equal(t, created.VMID, res.VMID, "the proxy's first probe VMID again")
	assert.Equal(t, []string{"9000 on pve1", "9002 on pve1"}, clonedFrom(w))
	assert.Equal(t, []string{"create:completed", "delete:completed", "create:completed", "delete:completed"}, kinds(st))
	assert.Equal(t, `rebuild onto image "debian13" -> "debian14"`, st.Operations[1].Reason)
	require.GreaterOrEqual(t, len(during), 3, "seen while the delete and the create ran")
	for _, s := range during {
		assert.Equal(t, proxyvm.ProxyChanging, s.Phase, "a rebuild is a change throughout: %+v", s.Operation)
	}
}

func TestProxy_aPermanentFailureIsNotHealedUntilARequestComes(t *testing.T) {
	w := newWorld(t)
	require.NoError(t, w.cluster.AddVM(pvesim.VM{Node: "pve1", VMID: 4242, Config: pve.VMConfig{
		"name": proxy.NameFromUID(uid), "description": "a VM someone made by hand",
	}}))
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	var waiting proxyvm.ProxyStatus
	p.at(time.Hour, func() { waiting = p.status() })
	p.request(time.Hour+time.Second, core.DeleteUpdate, "delete", proxyvm.DeleteProxyInput{UID: uid})

	st := p.run()

	assert.Equal(t, core.FailPermanent, failureType(t, p.answer("create").err))
	assert.Equal(t, proxyvm.ProxyFailed, waiting.Phase)
	assert.Equal(t, "absent", waiting.Observed.State, "the checks found no VM of the proxy, and left it so")
	assert.Equal(t, []string{"create:failed", "delete:completed"}, kinds(st))
	assert.Equal(t, []int{4242}, w.vmids(), "the VM without the proxy's mark is left alone")
}

func TestProxy_aRequestAcceptedWhileAnOperationFailsIsServedByTheNext(t *testing.T) {
	type request struct {
		at     time.Duration
		update string
		id     string
		arg    any
	}
	tests := []struct {
		name string
		// fail, at failAt, makes the operation that "first" asks for fail; "later" comes while
		// it runs.
		fail      func(w *world)
		failAt    time.Duration
		requests  []request
		wantKinds []string
	}{
		{
			name:   "change during a create whose clone fails",
			fail:   func(w *world) { w.cluster.FailTask("qmclone", "clone failed: storage gone") },
			failAt: 0,
			requests: []request{
				{0, core.CreateUpdate, "first", createInput()},
				{2 * time.Second, core.ChangeUpdate, "later", proxyvm.ChangeRequest{UID: uid, MachineType: "large"}},
			},
			wantKinds: []string{"create:failed", "create:completed", "delete:completed"},
		},
		{
			name:   "create during a delete whose destroy fails",
			fail:   func(w *world) { w.cluster.FailTask("qmdestroy", "unable to remove disk: storage gone") },
			failAt: time.Hour - time.Second,
			requests: []request{
				{0, core.CreateUpdate, "create", createInput()},
				{time.Hour, core.DeleteUpdate, "first", deleteInput()},
				{time.Hour + 2*time.Second, core.CreateUpdate, "later", createInput()},
			},
			wantKinds: []string{"create:completed", "delete:failed", "create:completed", "delete:completed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			withMachineTypes(w)
			w.cfg.Entity.CheckInterval = 0
			p := newProxyEntity(t, w)
			if tt.failAt == 0 {
				tt.fail(w)
			} else {
				p.at(tt.failAt, func() { tt.fail(w) })
			}
			for _, r := range tt.requests {
				p.request(r.at, r.update, r.id, r.arg)
			}
			var queued []proxyvm.PendingRequest
			p.at(2*time.Hour, func() { queued = p.status().Requests })
			p.request(3*time.Hour, core.DeleteUpdate, "delete", deleteInput())

			st := p.run()

			require.Error(t, p.answer("first").err)
			require.NoError(t, p.answer("later").err, "answered by the operation after the one that failed")
			assert.Empty(t, queued, "no request waits")
			assert.Equal(t, tt.wantKinds, kinds(st))
		})
	}
}

func TestProxy_aChangeThatFailedPermanentIsNotRunAgainAtEveryCheck(t *testing.T) {
	w := newWorld(t)
	w.cfg.Entity.FixDrift = true
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.at(10*time.Minute, func() {
		require.NoError(t, w.cluster.SetVMConfig(context.Background(), p.created().Node, p.created().VMID, pve.VMConfig{"cores": "1"}))
		for range 3 {
			w.cluster.FailNext("SetVMConfig", &pve.APIError{Status: 403, Reason: "Permission check failed (/vms/" + itoa(p.created().VMID) + ", VM.Config.CPU)",
				Message: "Permission check failed (/vms/" + itoa(p.created().VMID) + ", VM.Config.CPU)"})
		}
	})
	var waiting proxyvm.ProxyStatus
	p.at(2*time.Hour-time.Minute, func() { waiting = p.status() })
	p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	assert.Equal(t, []string{"create:completed", "change:failed", "delete:completed"}, kinds(st), "one change, then a person's turn")
	assert.Equal(t, proxyvm.ProxyFailed, waiting.Phase)
	assert.Contains(t, waiting.LastFailure, "VM.Config.CPU")
	assert.Equal(t, []string{"cores 1, spec 2"}, waiting.Observed.Drift, "still checked and reported")
}

func TestProxy_aRequestSentAgainUnderItsUpdateIDAfterAContinueAsNewGetsItsFirstAnswer(t *testing.T) {
	w := newWorld(t)
	withMachineTypes(w)
	first := newProxyEntity(t, w)
	first.request(0, core.CreateUpdate, "create", createInput())
	change := proxyvm.ChangeRequest{UID: uid, MachineType: "large"}
	first.request(time.Hour, core.ChangeUpdate, "change-1", change)
	first.at(2*time.Hour, func() { first.env.SetContinueAsNewSuggested(true) })

	first.env.ExecuteWorkflow(core.ProxyName, proxyvm.ProxyInput{UID: uid})

	var cont *workflow.ContinueAsNewError
	require.ErrorAs(t, first.env.GetWorkflowError(), &cont)
	var in proxyvm.ProxyInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(cont.Input, &in))
	answered := first.answer("change-1").result.(proxyvm.ChangeProxyResult)
	require.NotEmpty(t, answered.Changed)

	// The caller lost the answer (its worker died) and sends the request again, under its ID.
	second := newProxyEntity(t, w)
	second.request(time.Minute, core.ChangeUpdate, "change-1", change)
	second.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())
	second.env.ExecuteWorkflow(core.ProxyName, in)

	require.NoError(t, second.env.GetWorkflowError())
	require.NoError(t, second.answer("change-1").err)
	assert.Equal(t, answered, second.answer("change-1").result, "the first answer, not the empty one of a second change")
	var st proxyvm.ProxyStatus
	require.NoError(t, second.env.GetWorkflowResult(&st))
	assert.Equal(t, []string{"create:completed", "change:completed", "delete:completed"}, kinds(st), "no second change ran")
}

func TestProxy_aChangeAfterACreateThatFailedLateIsMadeOnTheVM(t *testing.T) {
	tests := []struct {
		name          string
		checkInterval time.Duration
		wantKinds     []string
	}{
		// The create that serves the change finds the VM running and makes it the spec's.
		{"no check meanwhile", 0, []string{"create:failed", "create:completed", "delete:completed"}},
		// A check finds the VM the spec's, so the proxy is present and a change serves the change.
		{"checked meanwhile", 5 * time.Minute, []string{"create:failed", "change:completed", "delete:completed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			withMachineTypes(w)
			w.cfg.Entity.CheckInterval = tt.checkInterval
			p := newProxyEntity(t, w)
			// The create's VM runs, and the guest agent is not allowed to be read: the create fails
			// at its last step, with its VM made.
			w.cluster.FailNext("AgentNetworkInterfaces", &pve.APIError{Status: 403, Reason: "Permission check failed (/vms/x, VM.GuestAgent.Audit)",
				Message: "Permission check failed (/vms/x, VM.GuestAgent.Audit)"})
			p.request(0, core.CreateUpdate, "create", createInput())
			var before proxyvm.ProxyStatus
			p.at(29*time.Minute, func() { before = p.status() })
			p.request(30*time.Minute, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
			var cores string
			var after proxyvm.ProxyStatus
			p.at(time.Hour, func() {
				vms := w.vms()
				require.Len(t, vms, 1)
				cores = vms[0].Config["cores"]
				after = p.status()
			})
			p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

			st := p.run()

			require.Error(t, p.answer("create").err)
			require.NoError(t, p.answer("change").err)
			res := p.answer("change").result.(proxyvm.ChangeProxyResult)
			assert.Equal(t, []string{"cores 2 -> 4", "memory 2048 -> 4096 MiB"}, res.Changed)
			assert.True(t, res.Restarted)
			assert.Equal(t, "4", cores, "the VM has the change")
			assert.Equal(t, 1, w.cluster.CallCount("Reboot"), "rebooted to apply it")
			assert.Equal(t, 1, w.cluster.CallCount("Clone"), "the VM the failed create made")
			assert.Equal(t, proxyvm.ProxyPresent, after.Phase)
			if tt.checkInterval > 0 {
				assert.Equal(t, proxyvm.ProxyPresent, before.Phase, "a check found the VM the spec's")
			} else {
				assert.Equal(t, proxyvm.ProxyFailed, before.Phase)
			}
			assert.Equal(t, tt.wantKinds, kinds(st))
		})
	}
}

func TestProxy_aVMThatFailsAtEveryHealIsHealedLessAndLessOften(t *testing.T) {
	w := newWorld(t)
	w.cfg.Entity.CheckJitter = 0
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.at(10*time.Minute, func() {
		_, err := w.cluster.Stop(context.Background(), p.created().Node, p.created().VMID)
		require.NoError(t, err)
		for range 100 {
			w.cluster.FailTask("qmstart", "start failed: QEMU exited with code 1")
		}
	})
	var failing proxyvm.ProxyStatus
	p.at(6*time.Hour-time.Minute, func() { failing = p.status() })
	p.request(6*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	heals := 0
	for _, op := range st.Operations {
		if strings.HasPrefix(op.Reason, "check:") {
			heals++
			assert.Equal(t, "failed", op.Outcome)
		}
	}
	// Checks every 5 minutes for almost 6 hours found the VM stopped: the first heal, and one
	// after each backoff of 5, 10, 20, 40, 80 and 160 minutes, fit in them; not 70.
	assert.Equal(t, 7, heals, kinds(st))
	assert.Equal(t, proxyvm.ProxyFailed, failing.Phase)
	assert.Contains(t, failing.LastFailure, "QEMU exited with code 1")
	assert.True(t, failing.NextHealAt.After(p.env.Now()), "says when it heals next: %v", failing.NextHealAt)
}

func TestProxy_aChangeOfAProxyThatNeverWasIsRefusedOnceItsVMIsLookedFor(t *testing.T) {
	w := newWorld(t)
	p := newProxyEntity(t, w)
	p.request(0, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, MachineType: "small"})
	started := p.env.Now()

	st := p.run()

	a := p.answer("change")
	require.NoError(t, a.rejected, "a fresh entity cannot tell before it looks")
	assert.Equal(t, core.FailRejected, failureType(t, a.err))
	assert.ErrorContains(t, a.err, "the proxy is absent; create it first")
	assert.Empty(t, st.Operations)
	assert.Less(t, p.env.Now().Sub(started), time.Minute, "the entity closed once it had looked")
	assert.Zero(t, w.cluster.CallCount("Clone"))
}

func TestProxy_aFreshEntityRebuildsItsProxyFromTheVMsMarkAndChangesIt(t *testing.T) {
	w := newWorld(t)
	withMachineTypes(w)
	// The proxy was created by an entity that was terminated since, with its state.
	created, err := w.create(createInput())
	require.NoError(t, err)
	w.advance(time.Hour)
	p := newProxyEntity(t, w)
	began := p.env.Now()
	p.request(0, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
	var present proxyvm.ProxyStatus
	p.at(30*time.Minute, func() { present = p.status() })
	p.request(time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	userDataSum := sha256.Sum256([]byte(createInput().UserData))
	require.NoError(t, p.answer("change").err)
	res := p.answer("change").result.(proxyvm.ChangeProxyResult)
	assert.Equal(t, created.VMID, res.VMID)
	assert.Equal(t, []string{"cores 2 -> 4", "memory 2048 -> 4096 MiB"}, res.Changed)
	assert.Equal(t, proxyvm.ProxyPresent, present.Phase)
	assert.Equal(t, proxyvm.DesiredState{Present: true, Name: created.Name, Image: "debian13", MachineType: "large",
		UserDataSHA256: hex.EncodeToString(userDataSum[:]), InstanceID: uid}, present.Desired, "the spec, from the mark, with the change")
	assert.True(t, present.Observed.CheckedAt.After(began.Add(5*time.Minute)), "checked since the change: %v", present.Observed.CheckedAt)
	assert.Equal(t, []string{"change:completed", "delete:completed"}, kinds(st))
	assert.Empty(t, w.vms())
}

func TestProxy_statusNamesTheRequestsItHasYetToAnswer(t *testing.T) {
	w := newWorld(t)
	withMachineTypes(w)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.request(20*time.Second, core.ChangeUpdate, "change", proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
	var during proxyvm.ProxyStatus
	p.at(30*time.Second, func() { during = p.status() })
	p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	assert.Equal(t, []proxyvm.PendingRequest{{Kind: proxyvm.OpCreate, Served: true}, {Kind: proxyvm.OpChange}}, during.Requests,
		"the create that runs answers the create; the change waits for the next operation")
	assert.Empty(t, st.Requests, "every request answered")
}
