package starter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

func TestClient_collectGarbageRefusesBeforeCallingTemporal(t *testing.T) {
	c := starter.New(nil, core.DefaultTaskQueue) // a call to Temporal would panic
	lost := errors.New("controller cache not synced")
	tests := []struct {
		name string
		opts starter.GCOptions
		want error
	}{
		{"no source", starter.GCOptions{}, starter.ErrEmptyKeep},
		{"an empty answer", starter.GCOptions{Keep: starter.KeepUIDs()}, starter.ErrEmptyKeep},
		{"KeepNone with a kept set", starter.GCOptions{Keep: starter.KeepUIDs(uid), KeepNone: true}, starter.ErrEmptyKeep},
		{"a UID that is none", starter.GCOptions{Keep: starter.KeepUIDs(uid, "not a uid")}, starter.ErrInvalidUID},
		{"a source that fails", starter.GCOptions{Keep: func(context.Context) ([]string, error) { return nil, lost }}, lost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.CollectGarbage(ctx(t), tt.opts)
			assert.ErrorIs(t, err, tt.want)
		})
	}
}

func TestClient_collectGarbageDryRunThenDeletesTheProxyNotKept(t *testing.T) {
	s := startStack(t, 50*time.Millisecond)
	created, err := s.starter.Create(ctx(t), createInput(uid))
	require.NoError(t, err)
	var vm proxyvm.CreateProxyResult
	require.NoError(t, created.Get(ctx(t), &vm))
	keep := starter.KeepUIDs("0b5a8c3e-another-proxy")

	dry, err := s.starter.CollectGarbage(ctx(t), starter.GCOptions{Keep: keep, DryRun: true, Grace: time.Millisecond})
	require.NoError(t, err)
	require.Len(t, dry.VMs, 1)
	assert.Equal(t, fleet.GarbageVM{UID: uid, VMID: vm.VMID, Node: vm.Node, Name: vm.Name, Outcome: reads.GarbageFound}, dry.VMs[0])
	assert.Len(t, s.cluster.VMs(), 2, "the template and the proxy")

	res, err := s.starter.CollectGarbage(ctx(t), starter.GCOptions{Keep: keep, Grace: time.Millisecond})
	require.NoError(t, err)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, reads.GarbageDeleted, res.VMs[0].Outcome)
	assert.False(t, res.Failed())
	assert.Len(t, s.cluster.VMs(), 1, "the template")
}
