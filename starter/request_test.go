package starter_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// get is what waits for the result of a request that Create, Change or Delete sent.
func get[T any](t *testing.T) func(*starter.Request, error) T {
	return func(req *starter.Request, err error) T {
		t.Helper()
		require.NoError(t, err)
		var res T
		require.NoError(t, req.Get(ctx(t), &res))
		return res
	}
}

// seedISO is the content of the seed the guest of VM vmid booted with last on the simulator,
// its files one after another.
func (s *stack) seedISO(t *testing.T, vmid int) []byte {
	t.Helper()
	// Read from the guest: pveflow deletes the seed ISO once the guest consumed it.
	files, ok := s.cluster.GuestSeed(vmid)
	if !ok || files == nil {
		t.Fatalf("VM %d booted without a seed", vmid)
	}
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(files)) {
		b.WriteString(files[name])
	}
	return b.Bytes()
}

func TestClient_aProxyThroughCreateChangesAndDelete(t *testing.T) {
	s := startStack(t, 200*time.Millisecond)

	created := get[proxyvm.CreateProxyResult](t)(s.starter.Create(ctx(t), createInput(uid)))
	before, err := s.starter.ProxyStatus(ctx(t), uid)
	require.NoError(t, err)

	const userData = "#cloud-config\nhostname: changed-by-update\n"
	newUserData := userData
	reseeded := get[proxyvm.ChangeProxyResult](t)(s.starter.Change(ctx(t), proxyvm.ChangeRequest{UID: uid, UserData: &newUserData}))
	afterReseed, err := s.starter.ProxyStatus(ctx(t), uid)
	require.NoError(t, err)
	seed := s.seedISO(t, created.VMID)

	resized := get[proxyvm.ChangeProxyResult](t)(s.starter.Change(ctx(t), proxyvm.ChangeRequest{UID: uid, MachineType: "large"}))
	afterResize, err := s.starter.ProxyStatus(ctx(t), uid)
	require.NoError(t, err)
	var cores string
	for _, vm := range s.cluster.VMs() {
		if vm.VMID == created.VMID {
			cores = vm.Config["cores"]
		}
	}

	deleted := get[proxyvm.DeleteProxyResult](t)(s.starter.Delete(ctx(t), proxyvm.DeleteProxyInput{UID: uid}))
	final, err := s.starter.ProxyStatus(ctx(t), uid)
	require.NoError(t, err)

	assert.Equal(t, created.VMID, reseeded.VMID, "the same VM")
	assert.NotEmpty(t, reseeded.Changed)
	assert.True(t, reseeded.Restarted, "cloud-init runs new user-data at a boot")
	sum := sha256.Sum256([]byte(userData))
	assert.Equal(t, hex.EncodeToString(sum[:]), afterReseed.Desired.UserDataSHA256)
	assert.NotEqual(t, before.Desired.InstanceID, afterReseed.Desired.InstanceID, "a new instance-id")
	assert.True(t, bytes.Contains(seed, []byte("hostname: changed-by-update")), "the seed ISO holds the new user-data")
	assert.True(t, bytes.Contains(seed, []byte(afterReseed.Desired.InstanceID)), "the seed ISO holds the new instance-id")

	assert.Equal(t, created.VMID, resized.VMID, "the same VM")
	assert.NotEmpty(t, resized.Changed)
	assert.Equal(t, "4", cores)
	assert.Equal(t, "large", afterResize.Desired.MachineType)

	assert.Len(t, deleted.Destroyed, 1)
	assert.Len(t, s.cluster.VMs(), 1, "the template alone")
	assert.Equal(t, proxyvm.ProxyAbsent, final.Phase)
	assert.False(t, final.Desired.Present)
}

func TestClient_aChangeToAnUnknownMachineTypeIsRefusedAtOnce(t *testing.T) {
	s := startStack(t, 200*time.Millisecond)
	get[proxyvm.CreateProxyResult](t)(s.starter.Create(ctx(t), createInput(uid)))
	sent := time.Now()

	_, err := s.starter.Change(ctx(t), proxyvm.ChangeRequest{UID: uid, MachineType: "huge"})

	require.ErrorIs(t, err, starter.ErrRejected)
	assert.Less(t, time.Since(sent), 5*time.Second, "refused by the validator, not after an operation")
	assert.EqualError(t, err, "change of proxy "+uid+` refused: machineType: "huge" is not a configured machine type (choices: large, small)`,
		"the validator's message alone, in one line")
	st, err := s.starter.ProxyStatus(ctx(t), uid)
	require.NoError(t, err)
	assert.Equal(t, "small", st.Desired.MachineType, "nothing recorded")
}

func TestClient_aChangeOfAProxyNeverCreatedIsRefusedAndLeavesNoEntityRunning(t *testing.T) {
	s := startStack(t, 200*time.Millisecond)

	// The entity cannot tell before it has looked for the proxy's VM: the refusal comes with
	// the request's outcome.
	req, err := s.starter.Change(ctx(t), proxyvm.ChangeRequest{UID: uid, MachineType: "small"})
	require.NoError(t, err)
	err = req.Get(ctx(t), new(proxyvm.ChangeProxyResult))

	assert.ErrorIs(t, err, starter.ErrRejected)
	assert.EqualError(t, err, "change of proxy "+uid+" refused: the proxy is absent; create it first")
	// The request started the entity, which holds nothing: it closes at once, not an hour later.
	eventually(t, "the entity the refused request started has closed", func() bool {
		desc, err := s.server.Client().DescribeWorkflowExecution(ctx(t), core.ProxyWorkflowID(uid), "")
		return err == nil && desc.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
}

func TestClient_aRequestSentAgainAfterItsOperationFailedGetsTheFailureNotARefusal(t *testing.T) {
	s := startStack(t, 200*time.Millisecond)
	s.cluster.FailTask("qmclone", "clone failed: storage gone")
	first, err := s.starter.Create(ctx(t), createInput(uid), starter.WithUpdateID("create-1"))
	require.NoError(t, err)
	require.Error(t, first.Get(ctx(t), new(proxyvm.CreateProxyResult)))

	again, err := s.starter.Create(ctx(t), createInput(uid), starter.WithUpdateID("create-1"))

	require.NoError(t, err, "the entity accepted it once; it is not refused")
	err = again.Get(ctx(t), new(proxyvm.CreateProxyResult))
	assert.Equal(t, core.FailTransient, starter.FailureType(err), "the operation's failure: %v", err)
	assert.ErrorContains(t, err, "storage gone")
	assert.Len(t, s.cluster.CloneRuns(), 1, "one clone ran, for the one request")
}

func TestClient_aRequestSentAgainUnderItsUpdateIDIsTheSameRequest(t *testing.T) {
	s := startStack(t, 2*time.Second)

	first, err := s.starter.Create(ctx(t), createInput(uid), starter.WithUpdateID("create-1"))
	require.NoError(t, err)
	again, err := s.starter.Create(ctx(t), createInput(uid), starter.WithUpdateID("create-1"))
	require.NoError(t, err)

	assert.Equal(t, "create-1", first.UpdateID)
	assert.Equal(t, "create-1", again.UpdateID)
	var a, b proxyvm.CreateProxyResult
	require.NoError(t, first.Get(ctx(t), &a))
	require.NoError(t, again.Get(ctx(t), &b))
	assert.Equal(t, a, b)
	assert.Len(t, s.cluster.CloneRuns(), 1, "one create")
	st, err := s.starter.ProxyStatus(ctx(t), uid)
	require.NoError(t, err)
	assert.Len(t, st.Operations, 1, "one operation")
}

func TestClient_proxyProgressFollowsTheOperationThatRuns(t *testing.T) {
	s := startStack(t, time.Minute)
	req, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)

	var p starter.ProxyProgress
	eventually(t, "the proxy's progress shows its create polling the clone", func() bool {
		p, err = s.starter.ProxyProgress(ctx(t), uid)
		return err == nil && p.OperationProgress != nil && p.OperationProgress.LastFailure != ""
	})

	assert.Equal(t, starter.SourceQuery, p.Source)
	assert.Equal(t, proxyvm.ProxyCreating, p.Phase)
	require.NotNil(t, p.Operation)
	assert.Equal(t, proxyvm.OpCreate, p.Operation.Kind)
	assert.Equal(t, req.WorkflowID(), p.Operation.WorkflowID)
	assert.Equal(t, core.PhaseCloning, p.OperationProgress.Phase)
	assert.Equal(t, "TaskStatus", p.OperationProgress.ActivityType)
}

func TestClient_proxyProgressWithTheWorkerStoppedDescribesTheRunningOperation(t *testing.T) {
	s := startStack(t, time.Minute)
	s.awaitCloneWait(t)
	s.stopWorker()

	p, err := s.starter.ProxyProgress(ctx(t), uid)

	require.NoError(t, err)
	assert.Equal(t, starter.SourceDescribed, p.Source)
	assert.Equal(t, "no worker answered the status query within 3s", p.QueryError)
	require.NotNil(t, p.Operation, "the entity's pending child")
	assert.Equal(t, core.CreateWorkflowID(uid), p.Operation.WorkflowID)
	require.NotNil(t, p.OperationProgress)
	assert.Equal(t, "TaskStatus", p.OperationProgress.ActivityType)
	assert.Contains(t, p.OperationProgress.LastFailure, "still running")
}

func TestClient_proxyProgressOfAUIDWithoutRequestIsErrNoProxy(t *testing.T) {
	s := startStack(t, time.Second)

	_, err := s.starter.ProxyProgress(ctx(t), uid)

	assert.ErrorIs(t, err, starter.ErrNoProxy)
}
