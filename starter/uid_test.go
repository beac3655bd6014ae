package starter_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// errTemporalUnavailable is what fakeTemporal answers every call with.
var errTemporalUnavailable = errors.New("temporal unavailable")

// fakeTemporal is a Temporal client that answers the calls Client makes with
// errTemporalUnavailable and records the workflow IDs they name. With refuse set, any call fails
// the test. A call Client does not make reaches the nil embedded interface and panics.
type fakeTemporal struct {
	client.Client
	t      *testing.T
	refuse bool
	called []string
}

func (f *fakeTemporal) call(what, workflowID string) error {
	f.t.Helper()
	if f.refuse {
		f.t.Errorf("Temporal was called: %s %q", what, workflowID)
	}
	f.called = append(f.called, workflowID)
	return errTemporalUnavailable
}

// startOperation is the start of an UpdateWithStart: the workflow ID it starts.
type startOperation struct {
	client.WithStartWorkflowOperation
	id string
}

func (f *fakeTemporal) NewWithStartWorkflowOperation(opts client.StartWorkflowOptions, _ any, _ ...any) client.WithStartWorkflowOperation {
	return startOperation{id: opts.ID}
}

func (f *fakeTemporal) UpdateWithStartWorkflow(_ context.Context, opts client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return nil, f.call("UpdateWithStartWorkflow", opts.StartWorkflowOperation.(startOperation).id)
}

func (f *fakeTemporal) GetWorkflow(_ context.Context, workflowID, _ string) client.WorkflowRun {
	return failedRun{err: f.call("GetWorkflow", workflowID)}
}

func (f *fakeTemporal) QueryWorkflow(_ context.Context, workflowID, _, _ string, _ ...any) (converter.EncodedValue, error) {
	return nil, f.call("QueryWorkflow", workflowID)
}

func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, f.call("DescribeWorkflowExecution", workflowID)
}

// failedRun is a workflow run whose result is err.
type failedRun struct {
	client.WorkflowRun
	err error
}

func (r failedRun) Get(context.Context, any) error { return r.err }

// uidCall is one Client method keyed by a UID, and the workflow ID it acts on.
type uidCall struct {
	name       string
	call       func(*starter.Client, string) error
	workflowID func(string) string
}

var uidCalls = []uidCall{
	{"Create", func(c *starter.Client, uid string) error {
		_, err := c.Create(context.Background(), createInput(uid))
		return err
	}, core.ProxyWorkflowID},
	{"Change", func(c *starter.Client, uid string) error {
		_, err := c.Change(context.Background(), proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
		return err
	}, core.ProxyWorkflowID},
	{"Delete", func(c *starter.Client, uid string) error {
		_, err := c.Delete(context.Background(), proxyvm.DeleteProxyInput{UID: uid})
		return err
	}, core.ProxyWorkflowID},
	{"ProxyStatus", func(c *starter.Client, uid string) error {
		_, err := c.ProxyStatus(context.Background(), uid)
		return err
	}, core.ProxyWorkflowID},
	{"ProxyProgress", func(c *starter.Client, uid string) error {
		_, err := c.ProxyProgress(context.Background(), uid)
		return err
	}, core.ProxyWorkflowID},
	{"CreateResult", func(c *starter.Client, uid string) error {
		_, err := c.CreateResult(context.Background(), uid)
		return err
	}, core.CreateWorkflowID},
	{"DeleteResult", func(c *starter.Client, uid string) error {
		_, err := c.DeleteResult(context.Background(), uid)
		return err
	}, core.DeleteWorkflowID},
	{"Status of create", func(c *starter.Client, uid string) error {
		_, err := c.Status(context.Background(), uid, starter.Create)
		return err
	}, core.CreateWorkflowID},
	{"Status of delete", func(c *starter.Client, uid string) error {
		_, err := c.Status(context.Background(), uid, starter.Delete)
		return err
	}, core.DeleteWorkflowID},
	{"Progress of create", func(c *starter.Client, uid string) error {
		_, err := c.Progress(context.Background(), uid, starter.Create)
		return err
	}, core.CreateWorkflowID},
	{"Progress of change", func(c *starter.Client, uid string) error {
		_, err := c.Progress(context.Background(), uid, starter.Change)
		return err
	}, core.ChangeWorkflowID},
	{"Progress of delete", func(c *starter.Client, uid string) error {
		_, err := c.Progress(context.Background(), uid, starter.Delete)
		return err
	}, core.DeleteWorkflowID},
}

var invalidUIDs = []struct{ name, uid string }{
	{"empty", ""},
	{"space inside", "proxy a"},
	{"trailing space", uid + " "},
	{"leading space", " " + uid},
	{"line break", uid + "\nproxy-operator-managed=true"},
	{"slash", "team/proxy"},
	{"equals sign", "proxy=a"},
	{"leading dash", "-proxy"},
	{"leading dot", ".proxy"},
	{"leading underscore", "_proxy"},
	{"non-ASCII letter", "próxy"},
	{"NUL byte", "proxy\x00"},
	{"one byte too long", strings.Repeat("a", proxy.MaxUIDLength+1)},
}

func TestClient_invalidUIDRefusedBeforeTemporal(t *testing.T) {
	for _, call := range uidCalls {
		for _, bad := range invalidUIDs {
			t.Run(call.name+"/"+bad.name, func(t *testing.T) {
				c := starter.New(&fakeTemporal{t: t, refuse: true}, core.DefaultTaskQueue)

				err := call.call(c, bad.uid)

				require.ErrorIs(t, err, starter.ErrInvalidUID)
				assert.NotErrorIs(t, err, errTemporalUnavailable)
			})
		}
	}
}

func TestClient_invalidUIDErrorIsTheValidationMessage(t *testing.T) {
	c := starter.New(&fakeTemporal{t: t, refuse: true}, core.DefaultTaskQueue)

	_, err := c.Create(context.Background(), createInput("proxy a\n"))

	require.ErrorIs(t, err, starter.ErrInvalidUID)
	assert.EqualError(t, err, `create proxy: proxy UID "proxy a\n": only ASCII letters, digits, '-', '_' and '.' are allowed, starting with a letter or digit`)
}

func TestClient_invalidUIDRefusedBeforeAnUnknownOp(t *testing.T) {
	c := starter.New(&fakeTemporal{t: t, refuse: true}, core.DefaultTaskQueue)

	_, err := c.Status(context.Background(), "a/b", "resize")

	assert.ErrorIs(t, err, starter.ErrInvalidUID)
}

func TestClient_validUIDsReachTemporal(t *testing.T) {
	valid := []struct{ name, uid string }{
		{"Kubernetes UID", "5d2c8a41-7e3b-4f9a-b06c-1e8d9f2a3b47"},
		{"upper-case UUID", "5D2C8A41-7E3B-4F9A-B06C-1E8D9F2A3B47"},
		{"ULID", "01ARZ3NDEKTSV4RRFFQ69G5FAV"},
		{"Kubernetes object name", "egress-proxy.team-a"},
		{"underscore", "proxy_1"},
		{"one character", "a"},
		{"starts with a digit", "0f5b1c9e"},
		{"longest", strings.Repeat("a", proxy.MaxUIDLength)},
	}
	for _, call := range uidCalls {
		for _, good := range valid {
			t.Run(call.name+"/"+good.name, func(t *testing.T) {
				temporal := &fakeTemporal{t: t}
				c := starter.New(temporal, core.DefaultTaskQueue)

				err := call.call(c, good.uid)

				require.ErrorIs(t, err, errTemporalUnavailable)
				assert.NotErrorIs(t, err, starter.ErrInvalidUID)
				assert.Equal(t, call.workflowID(good.uid), temporal.called[0])
			})
		}
	}
}
