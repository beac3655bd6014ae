package starter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

func TestClient_createTwiceWhileRunningReturnsTheRunningRun(t *testing.T) {
	s := startStack(t, 10*time.Second)
	first, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)

	second, err := s.starter.Create(ctx(t), createInput(uid))

	require.NoError(t, err)
	assert.Equal(t, workflows.CreateWorkflowID(uid), second.GetID())
	assert.Equal(t, first.GetRunID(), second.GetRunID())
}

func TestClient_createResultAfterCompletion(t *testing.T) {
	s := startStack(t, time.Second)
	run, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	require.NoError(t, run.Get(ctx(t), nil))

	res, err := s.starter.CreateResult(ctx(t), uid)

	require.NoError(t, err)
	assert.Equal(t, proxy.FormatProviderID(res.VMID, proxy.NameFromUID(uid)), res.ProviderID)
	assert.Equal(t, "pve1", res.Node)
	assert.NotEmpty(t, res.IPv4)
}

func TestClient_progressWhileTheCloneWaitsShowsTheAttemptAndLastFailure(t *testing.T) {
	s := startStack(t, time.Minute)
	_, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)

	var p starter.Progress
	eventually(t, "the progress shows a clone poll that failed", func() bool {
		p, err = s.starter.Progress(ctx(t), uid, starter.Create)
		return err == nil && p.LastFailure != ""
	})

	assert.Equal(t, workflows.PhaseCloning, p.Phase)
	assert.Contains(t, p.Step, "wait for clone")
	assert.Equal(t, "running", p.State)
	assert.GreaterOrEqual(t, p.ActivityAttempt, int32(1))
	assert.Contains(t, p.LastFailure, "still running")
}

func TestClient_progressDecryptsTheLastFailureWithTheCodecsDataConverter(t *testing.T) {
	path, _ := writeKeyFile(t)
	opts, err := starter.ClientOptions(func(k string) string { return map[string]string{"PVEFLOW_CODEC_KEY_FILE": path}[k] })
	require.NoError(t, err)
	s := startStackWith(t, time.Minute, client.Options{DataConverter: opts.DataConverter, FailureConverter: opts.FailureConverter}, nil)
	_, err = s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)

	var p starter.Progress
	eventually(t, "the progress shows a clone poll that failed", func() bool {
		p, err = s.starter.Progress(ctx(t), uid, starter.Create)
		return err == nil && p.LastFailure != ""
	})

	assert.Contains(t, p.LastFailure, "still running")
	desc, err := s.server.Client().DescribeWorkflowExecution(ctx(t), workflows.CreateWorkflowID(uid), "")
	require.NoError(t, err)
	require.NotEmpty(t, desc.GetPendingActivities())
	assert.Equal(t, "Encoded failure", desc.GetPendingActivities()[0].GetLastFailure().GetMessage(), "what the server holds")

	keyless, _ := codec.KeylessConverters()
	withoutKey := starter.New(s.server.Client(), workflows.DefaultTaskQueue, starter.WithDataConverter(keyless), starter.WithNamespace(s.server.Namespace()))
	p, err = withoutKey.Progress(ctx(t), uid, starter.Create)
	require.NoError(t, err)
	assert.Contains(t, p.LastFailure, "PVEFLOW_CODEC_KEY_FILE is not set", "a client without the key is told what to set")
}

func TestClient_statusOfAProxyWithoutWorkflowNamesIt(t *testing.T) {
	s := startStack(t, time.Second)

	_, err := s.starter.Status(ctx(t), uid, starter.Delete)

	require.Error(t, err)
	assert.Contains(t, err.Error(), "delete of proxy "+uid)
}

func TestClient_listByPhaseFindsTheProxy(t *testing.T) {
	s := startStack(t, time.Minute)
	run, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)

	var found []starter.Proxy
	eventually(t, "the list of cloning proxies holds the create", func() bool {
		found, err = s.starter.List(ctx(t), workflows.PhaseCloning)
		return err == nil && len(found) > 0
	})

	require.Len(t, found, 1)
	assert.Equal(t, starter.Proxy{
		UID:        uid,
		Name:       proxy.NameFromUID(uid),
		Op:         starter.Create,
		Phase:      workflows.PhaseCloning,
		Node:       "pve1",
		VMID:       found[0].VMID,
		Status:     "running",
		WorkflowID: workflows.CreateWorkflowID(uid),
		RunID:      run.GetRunID(),
		StartTime:  found[0].StartTime,
	}, found[0])
	assert.NotZero(t, found[0].VMID)
	others, err := s.starter.List(ctx(t), workflows.PhaseCreated)
	require.NoError(t, err)
	assert.Empty(t, others)
}

func TestClient_listIsNewestFirst(t *testing.T) {
	s := startStack(t, time.Minute)
	uids := []string{"proxy-a", "proxy-b", "proxy-c"}
	for _, u := range uids {
		_, err := s.starter.Create(ctx(t), createInput(u))
		require.NoError(t, err)
	}

	var found []starter.Proxy
	eventually(t, "the list holds every create", func() bool {
		var err error
		found, err = s.starter.List(ctx(t), "")
		return err == nil && len(found) == len(uids)
	})

	got := make([]string, len(found))
	for i, p := range found {
		got[i] = p.UID
	}
	assert.Equal(t, []string{"proxy-c", "proxy-b", "proxy-a"}, got)
}

func TestClient_unknownImageFailsPermanent(t *testing.T) {
	s := startStack(t, time.Second)
	in := createInput(uid)
	in.Image = "no-such-image"
	_, err := s.starter.Create(ctx(t), in)
	require.NoError(t, err)

	_, err = s.starter.CreateResult(ctx(t), uid)

	require.Error(t, err)
	assert.Equal(t, workflows.FailPermanent, starter.FailureType(err))
	assert.Contains(t, err.Error(), "no-such-image")
}

func TestClient_deleteRunsAsItsOwnWorkflowAndCancelsTheCreate(t *testing.T) {
	s := startStack(t, 5*time.Second)
	create, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	eventually(t, "the create waits for its clone", func() bool { return s.cluster.CallCount("TaskStatus") > 0 })

	del, err := s.starter.Delete(ctx(t), workflows.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Equal(t, workflows.DeleteWorkflowID(uid), del.GetID())
	assert.NotEqual(t, create.GetRunID(), del.GetRunID())
	res, err := s.starter.DeleteResult(ctx(t), uid)
	require.NoError(t, err)
	assert.Len(t, res.Destroyed, 1, "the clone the create had started")
	_, err = s.starter.CreateResult(ctx(t), uid)
	assert.Equal(t, starter.FailCanceled, starter.FailureType(err))
}

func TestFailureType(t *testing.T) {
	appErr := func(typ string) error {
		return temporal.NewNonRetryableApplicationError("create proxy x: boom", typ, nil)
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"permanent", appErr(workflows.FailPermanent), workflows.FailPermanent},
		{"transient", appErr(workflows.FailTransient), workflows.FailTransient},
		{"quota exceeded", appErr(workflows.FailQuotaExceeded), workflows.FailQuotaExceeded},
		{"wrapped", fmt.Errorf("create of proxy x: %w", appErr(workflows.FailPermanent)), workflows.FailPermanent},
		{"canceled", fmt.Errorf("create of proxy x: %w", temporal.NewCanceledError()), starter.FailCanceled},
		{"another application error type", appErr("PanicError"), ""},
		{"not a workflow failure", errors.New("connection refused"), ""},
		{"nil", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, starter.FailureType(tt.err))
		})
	}
}

func TestClient_unknownOpIsRefused(t *testing.T) {
	c := starter.New(nil, workflows.DefaultTaskQueue)

	_, err := c.Progress(context.Background(), uid, "resize")

	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown operation "resize"`)
}
