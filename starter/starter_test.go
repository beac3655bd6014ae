package starter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

func TestClient_createResultAfterCompletion(t *testing.T) {
	s := startStack(t, time.Second)
	req, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	var served proxyvm.CreateProxyResult
	require.NoError(t, req.Get(ctx(t), &served))

	res, err := s.starter.CreateResult(ctx(t), uid)

	require.NoError(t, err)
	assert.Equal(t, served, res, "the result of the CreateProxy that served the request")
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

	assert.Equal(t, core.PhaseCloning, p.Phase)
	assert.Contains(t, p.Step, "wait for clone")
	assert.Equal(t, "running", p.State)
	assert.GreaterOrEqual(t, p.ActivityAttempt, int32(1))
	assert.Contains(t, p.LastFailure, "still running")
}

func TestClient_progressShowsTheLastFailurePlainWithTheCodecOn(t *testing.T) {
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
	desc, err := s.server.Client().DescribeWorkflowExecution(ctx(t), core.CreateWorkflowID(uid), "")
	require.NoError(t, err)
	require.NotEmpty(t, desc.GetPendingActivities())
	assert.Contains(t, desc.GetPendingActivities()[0].GetLastFailure().GetMessage(), "still running", "what the server holds, and the UI shows")
	keyless, _ := codec.KeylessConverters()
	withoutKey := starter.New(s.server.Client(), core.DefaultTaskQueue, starter.WithDataConverter(keyless), starter.WithNamespace(s.server.Namespace()))
	p, err = withoutKey.Progress(ctx(t), uid, starter.Create)
	require.NoError(t, err)
	assert.Contains(t, p.LastFailure, "still running", "a client without the key reads it too")
}

func TestClient_statusOfAProxyWithoutWorkflowNamesIt(t *testing.T) {
	s := startStack(t, time.Second)

	_, err := s.starter.Status(ctx(t), uid, starter.Delete)

	require.Error(t, err)
	assert.Contains(t, err.Error(), "delete of proxy "+uid)
}

func TestClient_listByPhaseFindsTheProxy(t *testing.T) {
	s := startStack(t, time.Second)
	req, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	var created proxyvm.CreateProxyResult
	require.NoError(t, req.Get(ctx(t), &created))

	var found []starter.Proxy
	eventually(t, "the list of present proxies holds the proxy", func() bool {
		found, err = s.starter.List(ctx(t), proxyvm.ProxyPresent)
		return err == nil && len(found) > 0 && found[0].VMID != 0
	})

	require.Len(t, found, 1)
	assert.Equal(t, starter.Proxy{
		UID:        uid,
		Name:       created.Name,
		Phase:      proxyvm.ProxyPresent,
		Node:       "pve1",
		VMID:       created.VMID,
		Status:     "running",
		WorkflowID: core.ProxyWorkflowID(uid),
		RunID:      found[0].RunID,
		StartTime:  found[0].StartTime,
	}, found[0])
	others, err := s.starter.List(ctx(t), proxyvm.ProxyCreating)
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
	eventually(t, "the list holds every proxy", func() bool {
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

func TestClient_aCreateOfAnUnknownImageIsRefusedAtOnce(t *testing.T) {
	s := startStack(t, time.Second)
	in := createInput(uid)
	in.Image = "no-such-image"

	_, err := s.starter.Create(ctx(t), in)

	require.ErrorIs(t, err, starter.ErrRejected)
	assert.Contains(t, err.Error(), "create of proxy "+uid+" refused: ")
	assert.Contains(t, err.Error(), "no-such-image")
	assert.NotContains(t, err.Error(), "\n", "one line")
	_, err = s.server.Client().DescribeWorkflowExecution(ctx(t), core.CreateWorkflowID(uid), "")
	assert.ErrorAs(t, err, new(*serviceerror.NotFound), "no CreateProxy ran")
}

func TestClient_aDeleteSupersedesTheRunningCreate(t *testing.T) {
	s := startStack(t, 5*time.Second)
	create, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	eventually(t, "the create waits for its clone", func() bool { return s.cluster.CallCount("TaskStatus") > 0 })

	del, err := s.starter.Delete(ctx(t), proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Equal(t, core.DeleteWorkflowID(uid), del.WorkflowID())
	var res proxyvm.DeleteProxyResult
	require.NoError(t, del.Get(ctx(t), &res))
	assert.Len(t, res.Destroyed, 1, "the clone the create had started")
	err = create.Get(ctx(t), nil)
	assert.Equal(t, starter.FailSuperseded, starter.FailureType(err), "%v", err)
	assert.Len(t, s.cluster.VMs(), 1, "the template alone")
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
		{"permanent", appErr(core.FailPermanent), core.FailPermanent},
		{"transient", appErr(core.FailTransient), core.FailTransient},
		{"quota exceeded", appErr(core.FailQuotaExceeded), core.FailQuotaExceeded},
		{"wrapped", fmt.Errorf("create of proxy x: %w", appErr(core.FailPermanent)), core.FailPermanent},
		{"canceled", fmt.Errorf("create of proxy x: %w", temporal.NewCanceledError()), starter.FailCanceled},
		{"superseded", fmt.Errorf("create of proxy x: %w", appErr(starter.FailSuperseded)), starter.FailSuperseded},
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
	c := starter.New(nil, core.DefaultTaskQueue)

	_, err := c.Progress(context.Background(), uid, "resize")

	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown operation "resize"`)
}
