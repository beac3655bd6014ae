package e2e_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// losesAPoll is a Proxmox API whose first poll of a task of type typ is lost, as an attempt
// whose worker is killed during it: no answer comes, and Temporal sees the attempt end only
// when its StartToClose does.
type losesAPoll struct {
	pve.API
	typ   string
	polls atomic.Int32
}

func (l *losesAPoll) TaskStatus(ctx context.Context, node string, upid pve.UPID) (pve.TaskStatus, error) {
	if info, err := pve.ParseUPID(upid); err == nil && info.Type == l.typ && l.polls.Add(1) == 1 {
		<-ctx.Done()
		return pve.TaskStatus{}, ctx.Err()
	}
	return l.API.TaskStatus(ctx, node, upid)
}

func TestDelete_aLostAttemptDoesNotSpendTheSeedISOWait(t *testing.T) {
	cluster := newCluster()
	api := &losesAPoll{API: cluster, typ: "imgdel"}
	cfg := fastConfig(t)
	// The seed ISO's deletion is waited for within budgets.request, which also bounds one
	// attempt of a call; short, so that the test is.
	cfg.Budgets.Request = 3 * time.Second
	s := startStack(t, api, cfg)
	_, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
	require.NoError(t, err)

	_, err = served[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))

	require.NoError(t, err)
	assert.GreaterOrEqual(t, api.polls.Load(), int32(2), "the lost poll, and one after it")
	assert.Empty(t, leftovers(cluster))
}
