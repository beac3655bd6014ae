package activities_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/activities"
)

// proxies stands for the Proxy entities on Temporal's side: it answers every request with
// outcome, or with err, and keeps the requests.
type proxies struct {
	changed   activities.ProxyChangeOutcome
	destroyed activities.ProxyDeleteOutcome
	err       error
	changes   []activities.ProxyChange
	deletes   []activities.ProxyDelete
}

func (p *proxies) ChangeProxy(_ context.Context, req activities.ProxyChange) (activities.ProxyChangeOutcome, error) {
	p.changes = append(p.changes, req)
	return p.changed, p.err
}

func (p *proxies) DeleteProxy(_ context.Context, req activities.ProxyDelete) (activities.ProxyDeleteOutcome, error) {
	p.deletes = append(p.deletes, req)
	return p.destroyed, p.err
}

func TestRequestChange_returnsTheEntitysOutcome(t *testing.T) {
	f := newFixture(t)
	want := activities.ProxyChangeOutcome{VMID: 123456, Node: "pve1", IPv4: "192.0.2.10", Changed: []string{"image debian12 -> debian13"}, Restarted: true, Rebuilt: true}
	p := &proxies{changed: want}
	f.acts.Proxies = p
	req := activities.ProxyChange{UID: "u-1", Image: "debian13", RequestID: "rollout/r1/1"}
	var got activities.ProxyChangeOutcome

	err := f.run(t, f.acts.RequestChange, &got, req)

	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, []activities.ProxyChange{req}, p.changes)
}

func TestRequestDelete_returnsTheEntitysOutcome(t *testing.T) {
	f := newFixture(t)
	want := activities.ProxyDeleteOutcome{Destroyed: []activities.VMRef{{Node: "pve1", VMID: 123456}}}
	p := &proxies{destroyed: want}
	f.acts.Proxies = p
	req := activities.ProxyDelete{UID: "u-1", RequestID: "collect-garbage/r1/u-1"}
	var got activities.ProxyDeleteOutcome

	err := f.run(t, f.acts.RequestDelete, &got, req)

	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, []activities.ProxyDelete{req}, p.deletes)
}

func TestRequest_failures(t *testing.T) {
	tests := []struct {
		name          string
		err           error
		wantType      string
		wantRetryable bool
		wantMessage   string
	}{
		{"a request the validator refused", temporal.NewApplicationError("proxy u-1 is absent: nothing to change", "*errors.errorString"),
			activities.ErrPermanent, false, "proxy u-1 is absent"},
		{"a Permanent failure of the operation", temporal.NewNonRetryableApplicationError("image debian99 is not configured", activities.ErrPermanent, nil),
			activities.ErrPermanent, false, "image debian99"},
		{"a superseded request", temporal.NewNonRetryableApplicationError("a delete superseded it", activities.ErrSuperseded, nil),
			activities.ErrSuperseded, false, "a delete superseded it"},
		// Asking again with the same update ID would answer the same failure.
		{"a Transient failure of the operation", temporal.NewNonRetryableApplicationError("wait for IPv4 did not finish within its budget", activities.ErrTransient, nil),
			activities.ErrTransient, false, "wait for IPv4"},
		{"a cancelled operation", temporal.NewCanceledError(),
			activities.ErrPermanent, false, "canceled"},
		{"Temporal unavailable on the way", serviceerror.NewUnavailable("connection refused"),
			activities.ErrTransient, true, "connection refused"},
	}
	for _, tt := range tests {
		for name, request := range map[string]func(*fixture, *testing.T) error{
			"change": func(f *fixture, t *testing.T) error {
				return f.run(t, f.acts.RequestChange, nil, activities.ProxyChange{UID: "u-1", Image: "debian13", RequestID: "r-1"})
			},
			"delete": func(f *fixture, t *testing.T) error {
				return f.run(t, f.acts.RequestDelete, nil, activities.ProxyDelete{UID: "u-1", RequestID: "r-1"})
			},
		} {
			t.Run(tt.name+" of a "+name, func(t *testing.T) {
				f := newFixture(t)
				f.acts.Proxies = &proxies{err: tt.err}

				appErr := appError(t, request(f, t))

				assert.Equal(t, tt.wantType, appErr.Type())
				assert.Equal(t, tt.wantRetryable, !appErr.NonRetryable())
				assert.Contains(t, appErr.Message(), name+" of proxy u-1 (request r-1): ")
				assert.Contains(t, appErr.Message(), tt.wantMessage)
			})
		}
	}
}

func TestRequest_answerInsideAChildWorkflowErrorKeepsItsType(t *testing.T) {
	f := newFixture(t)
	cause := temporal.NewNonRetryableApplicationError("storage local-lvm is full", activities.ErrQuotaExceeded, nil)
	// As the SDK's ChildWorkflowExecutionError wraps the child's failure.
	f.acts.Proxies = &proxies{err: fmt.Errorf("child workflow execution error (type: ChangeProxy, workflowID: proxy/u-1/change): %w", cause)}

	appErr := appError(t, f.run(t, f.acts.RequestChange, nil, activities.ProxyChange{UID: "u-1", MachineType: "large", RequestID: "r-1"}))

	assert.Equal(t, activities.ErrQuotaExceeded, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "storage local-lvm is full")
}

func TestRequest_workerWithoutProxiesIsPermanent(t *testing.T) {
	f := newFixture(t)

	appErr := appError(t, f.run(t, f.acts.RequestDelete, nil, activities.ProxyDelete{UID: "u-1", RequestID: "r-1"}))

	assert.Equal(t, activities.ErrPermanent, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "Activities.Proxies")
}
