package e2e_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// carriedOperation is the operation that the current run of the entity of uid was started
// with, carried by a continue-as-new of the run before; nil when there is none.
func carriedOperation(t *testing.T, s *stack, uid string) *proxyvm.OperationRecord {
	t.Helper()
	iter := s.client.GetWorkflowHistory(context.Background(), core.ProxyWorkflowID(uid), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	require.True(t, iter.HasNext())
	first, err := iter.Next()
	require.NoError(t, err)
	var in proxyvm.ProxyInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(first.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in))
	if in.State == nil {
		return nil
	}
	return in.State.Current
}

// seedISO is the content of the seed that VM vmid's guest booted with last on the simulator,
// its files one after another. It is read from the guest: pveflow deletes the seed ISO once the
// guest consumed it.
func seedISO(t *testing.T, c *pvesim.Cluster, vmid int) string {
	t.Helper()
	files, ok := c.GuestSeed(vmid)
	require.True(t, ok, "VM %d", vmid)
	require.NotEmpty(t, files, "VM %d booted without a seed", vmid)
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(files)) {
		b.WriteString(files[name])
	}
	return b.String()
}

func TestE2E_aProxyThroughCreateChangesOfUserDataAndMachineTypeAndDeleteOverTheRESTAPI(t *testing.T) {
	cluster := newCluster()
	s := startRESTStack(t, cluster)
	created, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
	require.NoError(t, err)

	userData := "#cloud-config\nhostname: changed-by-update\n"
	reseeded, err := served[proxyvm.ChangeProxyResult](t, s.startChange(proxyvm.ChangeRequest{UID: uid, UserData: &userData}))
	require.NoError(t, err)
	seed := seedISO(t, cluster, created.VMID)
	resized, err := served[proxyvm.ChangeProxyResult](t, s.startChange(proxyvm.ChangeRequest{UID: uid, MachineType: "large"}))
	require.NoError(t, err)
	vm := markedVM(t, cluster, uid)
	deleted, err := served[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))
	require.NoError(t, err)

	assert.Equal(t, created.VMID, reseeded.VMID, "the same VM")
	assert.True(t, reseeded.Restarted, "cloud-init runs new user-data at a boot")
	assert.Contains(t, seed, "hostname: changed-by-update", "the seed ISO holds the new user-data")
	assert.Contains(t, seed, uid+".g1", "the seed ISO holds the new instance-id")
	assert.Equal(t, created.VMID, resized.VMID, "the same VM")
	assert.Equal(t, "4", vm.Config["cores"])
	assert.Equal(t, "4096", vm.Config["memory"])
	assert.Len(t, deleted.Destroyed, 1)
	assert.Empty(t, leftovers(cluster))
	for _, op := range []string{proxyvm.OpCreate, proxyvm.OpChange, proxyvm.OpDelete} {
		assertNoFailureEvents(t, s, s.operation(uid, op))
	}
}

func TestE2E_anEntityThatContinuesAsNewWhileItHealsFollowsTheHealInItsNextRun(t *testing.T) {
	// A heal's create waits seconds for the guest agent: the entity continues as new meanwhile.
	cluster := newCluster(func(o *pvesim.Options) { o.AgentBootDelay = 3 * time.Second })
	cfg := fastConfig(t)
	cfg.Entity.HistoryEvents = 100
	// The entity checks itself every second, with no observer, so that its history grows.
	cfg.Entity.CheckInterval, cfg.Entity.CheckJitter, cfg.Entity.BackstopInterval = time.Second, 0, 0
	s := startStack(t, cluster, cfg)
	created, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
	require.NoError(t, err)

	// A request in flight holds the run, so the operation carried is a heal's: the VM is
	// stopped when the entity is idle and near its history's bound, so that the check that
	// finds it stopped starts a create during which the bound is passed. A run whose bound fell
	// between two checks continues as new idle; the next one is tried.
	var carried *proxyvm.OperationRecord
	require.Eventually(t, func() bool {
		if carried = carriedOperation(t, s, uid); carried != nil {
			return true
		}
		desc, err := s.client.DescribeWorkflowExecution(context.Background(), core.ProxyWorkflowID(uid), "")
		require.NoError(t, err)
		length := desc.GetWorkflowExecutionInfo().GetHistoryLength()
		st := s.proxyStatus(uid)
		vm, _ := vmByID(cluster.VMs(), created.VMID)
		if st.Operation == nil && vm.Running && length >= 80 {
			_, err := cluster.Stop(context.Background(), created.Node, created.VMID)
			require.NoError(t, err)
		}
		return false
	}, 2*time.Minute, 100*time.Millisecond, "a run continued as new while an operation ran")

	var final proxyvm.ProxyStatus
	eventually(t, "the next run follows the heal to its end", func() bool {
		final = s.proxyStatus(uid)
		return final.Operation == nil && len(final.Operations) > 0 && final.Operations[len(final.Operations)-1].RunID == carried.RunID
	})
	assert.Equal(t, proxyvm.OpCreate, carried.Kind)
	assert.Contains(t, carried.Reason, "was stopped")
	assert.Equal(t, "completed", final.Operations[len(final.Operations)-1].Outcome)
	assert.Equal(t, proxyvm.ProxyPresent, final.Phase)
	vm := markedVM(t, cluster, uid)
	assert.Equal(t, created.VMID, vm.VMID, "the one VM, healed")
	assert.True(t, vm.Running)
}

// timerSummaries are the summaries of the timers a run started, in order, as the UI shows them.
func timerSummaries(t *testing.T, s *stack, workflowID string) []string {
	t.Helper()
	var out []string
	for _, ev := range history(t, s.client, workflowID, "") {
		if ev.GetTimerStartedEventAttributes() == nil {
			continue
		}
		var summary string
		if p := ev.GetUserMetadata().GetSummary(); p != nil {
			require.NoError(t, converter.GetDefaultDataConverter().FromPayload(p, &summary))
		}
		out = append(out, summary)
	}
	return out
}

func TestE2E_theEntitysTimerSaysWhatItWaitsFor(t *testing.T) {
	s := startStack(t, newCluster(), fastConfig(t))
	serve[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
	eventually(t, "a present proxy's entity waits for its next check", func() bool {
		return slices.Contains(timerSummaries(t, s, core.ProxyWorkflowID(uid)), "next check")
	})

	serve[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))

	eventually(t, "an absent proxy's entity waits to close", func() bool {
		return slices.Contains(timerSummaries(t, s, core.ProxyWorkflowID(uid)), "close if no request comes")
	})
	assert.NotContains(t, timerSummaries(t, s, core.ProxyWorkflowID(uid)), "Sleep", "no timer reads as a bare sleep")
}
