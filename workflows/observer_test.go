package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The UIDs of the proxies an observer watches in these tests, beside uid.
const (
	stoppedUID   = "1a2b3c4d-0000-4000-8000-000000000001"
	destroyedUID = "1a2b3c4d-0000-4000-8000-000000000002"
	renamedUID   = "1a2b3c4d-0000-4000-8000-000000000003"
)

// observing is a world whose entities' words reach an observer, and whose observer's looks
// reach the entities (runs.observing).
func observing(t *testing.T) *world {
	w := newWorld(t)
	w.runs.observing = true
	return w
}

// observe runs an Observer on env for d of virtual time, with the watches sent at time 0 and
// the world's cluster changed by change at their times, and returns its status at the end.
func observe(t *testing.T, w *world, env *testsuite.TestWorkflowEnvironment, d time.Duration, watches []core.WatchRequest) fleet.ObserverStatus {
	t.Helper()
	env.SetTestTimeout(30 * time.Second)
	for _, req := range watches {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(core.WatchSignal, req) }, 0)
	}
	var st fleet.ObserverStatus
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(core.ObserverQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&st))
		env.CancelWorkflow()
	}, d)
	env.ExecuteWorkflow(core.ObserverName, fleet.ObserverState{})
	require.True(t, env.IsWorkflowCompleted())
	return st
}

func TestObserver_wakesOnlyTheEntitiesWhoseVMsChangedOrLookWrong(t *testing.T) {
	w := observing(t)
	var watches []core.WatchRequest
	for _, u := range []string{uid, stoppedUID, destroyedUID, renamedUID} {
		vm := proxyVM(w, u, true)
		w.add(vm)
		watches = append(watches, core.WatchRequest{UID: u, VMID: vm.VMID})
	}
	env := w.env()
	node := "pve1"
	vmid := func(u string) int { return proxyVM(w, u, true).VMID }
	// The first listing, at 5 minutes, takes every VM as it is; these come after it.
	env.RegisterDelayedCallback(func() {
		for _, u := range []string{stoppedUID, destroyedUID} {
			_, err := w.cluster.Stop(context.Background(), node, vmid(u))
			require.NoError(t, err)
		}
		require.NoError(t, w.cluster.SetVMConfig(context.Background(), node, vmid(renamedUID), pve.VMConfig{"name": "renamed-by-hand"}))
	}, 6*time.Minute)
	env.RegisterDelayedCallback(func() {
		_, err := w.cluster.Destroy(context.Background(), node, vmid(destroyedUID))
		require.NoError(t, err)
	}, 7*time.Minute)
	calls := w.cluster.CallCount("ClusterResources")

	st := observe(t, w, env, 11*time.Minute, watches)

	assert.Equal(t, 2, st.Listings)
	assert.Equal(t, 2, w.cluster.CallCount("ClusterResources")-calls, "one call per listing, whatever the fleet")
	assert.Zero(t, w.cluster.CallCount("VMConfig"), "the observer reads no VM")
	assert.Empty(t, w.runs.looks[core.ProxyWorkflowID(uid)], "nothing new: not woken")
	require.Len(t, w.runs.looks[core.ProxyWorkflowID(stoppedUID)], 1)
	assert.Equal(t, "listed stopped on node pve1", w.runs.looks[core.ProxyWorkflowID(stoppedUID)][0].Why)
	require.Len(t, w.runs.looks[core.ProxyWorkflowID(destroyedUID)], 1)
	assert.Equal(t, "not in the cluster's list", w.runs.looks[core.ProxyWorkflowID(destroyedUID)][0].Why)
	require.Len(t, w.runs.looks[core.ProxyWorkflowID(renamedUID)], 1)
	assert.Contains(t, w.runs.looks[core.ProxyWorkflowID(renamedUID)][0].Why, "renamed-by-hand")
	assert.Equal(t, 3, st.Wakes)
}

func TestObserver_aVMThatStaysWrongWakesItsEntityAtEveryListing(t *testing.T) {
	w := observing(t)
	vm := proxyVM(w, uid, false)
	w.add(vm)

	observe(t, w, w.env(), 16*time.Minute, []core.WatchRequest{{UID: uid, VMID: vm.VMID}})

	assert.Len(t, w.runs.looks[core.ProxyWorkflowID(uid)], 3, "stopped at each of the three listings")
}

func TestObserver_anEntitysWordMakesTheNextListingTheNormal(t *testing.T) {
	w := observing(t)
	vm := proxyVM(w, uid, true)
	w.add(vm)
	env := w.env()
	// An operation changes the VM and the entity gives its word again, as an entity does after
	// every operation: the change is its own, and wakes nobody.
	env.RegisterDelayedCallback(func() {
		require.NoError(t, w.cluster.SetVMConfig(context.Background(), vm.Node, vm.VMID, pve.VMConfig{"cores": "4"}))
		env.SignalWorkflow(core.WatchSignal, core.WatchRequest{UID: uid, VMID: vm.VMID})
	}, 7*time.Minute)

	observe(t, w, env, 16*time.Minute, []core.WatchRequest{{UID: uid, VMID: vm.VMID}})

	assert.Empty(t, w.runs.looks[core.ProxyWorkflowID(uid)])
}

func TestObserver_stopsWatchingAProxyWhoseEntitySaysSo(t *testing.T) {
	w := observing(t)
	vm := proxyVM(w, uid, true)
	w.add(vm)
	env := w.env()
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(core.WatchSignal, core.WatchRequest{UID: uid})
		_, err := w.cluster.Stop(context.Background(), vm.Node, vm.VMID)
		require.NoError(t, err)
	}, 7*time.Minute)

	st := observe(t, w, env, 11*time.Minute, []core.WatchRequest{{UID: uid, VMID: vm.VMID}})

	assert.Empty(t, w.runs.looks[core.ProxyWorkflowID(uid)])
	assert.Zero(t, st.Watching)
}

func TestObserver_watchesNothingOfAnEntityThatDoesNotRun(t *testing.T) {
	w := observing(t)
	w.runs.observing = false // SignalRun finds no entity
	vm := proxyVM(w, uid, false)
	w.add(vm)

	st := observe(t, w, w.env(), 6*time.Minute, []core.WatchRequest{{UID: uid, VMID: vm.VMID}})

	assert.Zero(t, st.Watching, "its entity closed: nobody to wake")
	assert.Zero(t, st.Wakes)
}

func TestObserver_continuesAsNewWithWhatItWatches(t *testing.T) {
	w := observing(t)
	vm := proxyVM(w, uid, true)
	w.add(vm)
	env := w.env()
	env.SetTestTimeout(30 * time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(core.WatchSignal, core.WatchRequest{UID: uid, VMID: vm.VMID}) }, 0)
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 6*time.Minute)

	env.ExecuteWorkflow(core.ObserverName, fleet.ObserverState{})

	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	var next fleet.ObserverState
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	assert.Equal(t, map[string]fleet.WatchedVM{uid: {VMID: vm.VMID, Seen: next.Watched[uid].Seen}}, next.Watched)
	assert.NotZero(t, next.Watched[uid].Seen, "with its fingerprint: the next run wakes nobody for what this one saw")
	assert.Positive(t, next.Listings)
}

func TestProxy_aWatchedProxyChecksItselfOnlyAtItsBackstop(t *testing.T) {
	w := observing(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	var start time.Time
	p.at(0, func() { start = p.env.Now() })
	var quiet proxyvm.ProxyStatus
	p.at(12*time.Hour, func() { quiet = p.status() })
	p.request(w.cfg.Entity.BackstopInterval*2, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	assert.Less(t, quiet.Observed.CheckedAt.Sub(start), 10*time.Minute, "twelve quiet hours: no check since the create")
	watched := core.WatchRequest{UID: uid, VMID: p.created().VMID}
	require.GreaterOrEqual(t, len(w.runs.watches), 3, "its word after the create, again at each backstop, withdrawn by the delete")
	for _, req := range w.runs.watches[:len(w.runs.watches)-1] {
		assert.Equal(t, watched, req)
	}
	assert.Equal(t, core.WatchRequest{UID: uid}, w.runs.watches[len(w.runs.watches)-1])
}

func TestProxy_anEntityWhoseWordTheObserverDidNotTakeChecksItselfEveryInterval(t *testing.T) {
	w := newWorld(t) // SignalWithStartRun fails
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	var start time.Time
	p.at(0, func() { start = p.env.Now() })
	var later proxyvm.ProxyStatus
	p.at(time.Hour, func() { later = p.status() })
	p.request(time.Hour+time.Second, core.DeleteUpdate, "delete", deleteInput())

	p.run()

	assert.Greater(t, later.Observed.CheckedAt.Sub(start), 50*time.Minute, "checked every 5 to 6 minutes")
}

func TestProxy_aLookFromTheObserverHealsAtOnce(t *testing.T) {
	w := observing(t)
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	p.at(time.Hour, func() {
		_, err := w.cluster.Stop(context.Background(), p.created().Node, p.created().VMID)
		require.NoError(t, err)
	})
	p.at(time.Hour+time.Minute, func() {
		p.env.SignalWorkflow(core.LookSignal, core.Look{VMID: p.created().VMID, Why: "listed stopped on node pve1"})
	})
	var healed proxyvm.ProxyStatus
	p.at(time.Hour+3*time.Minute, func() { healed = p.status() })
	p.request(2*time.Hour, core.DeleteUpdate, "delete", deleteInput())

	st := p.run()

	require.Len(t, st.Operations, 3, kinds(st))
	assert.Equal(t, "check: VM "+itoa(p.created().VMID)+" on node pve1 was stopped", st.Operations[1].Reason)
	assert.Equal(t, proxyvm.ProxyPresent, healed.Phase, "healed within two minutes of the look")
}
