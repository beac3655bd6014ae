package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
)

func TestClient_addressPoolWithStaticAddressesRefusedBeforeTemporal(t *testing.T) {
	c := starter.New(&fakeTemporal{t: t, refuse: true}, core.DefaultTaskQueue)
	in := createInput(uid)
	in.AddressPool, in.Addresses = "egress", proxy.Addresses{IPv4: "192.0.2.5/24"}

	_, err := c.Create(context.Background(), in)

	require.ErrorIs(t, err, starter.ErrInvalidNetwork)
	assert.EqualError(t, err, "create proxy "+uid+`: address pool "egress" and static addresses are both given: choose one`)
}

func TestAddressPools_reconcileStartsAPoolOnlyToRestore(t *testing.T) {
	s := startStack(t, 100*time.Millisecond)
	pools := starter.AddressPools{Client: s.starter}
	rng := config.AddressPool{IPv4: &config.AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.10", Last: "192.0.2.11"}}
	held := activities.AddressHolding{UID: uid, IPv4: "192.0.2.10/24"}
	reconcile := func(r activities.AddressReconcile) (activities.Reconciled, error) {
		r.Range = rng
		return pools.Reconcile(ctx(t), activities.ReconcileRequest{TaskQueue: core.DefaultTaskQueue, Pool: "egress", AddressReconcile: r})
	}

	_, err := reconcile(activities.AddressReconcile{Held: []activities.AddressHolding{held}, DryRun: true})
	assert.Equal(t, pve.NotFound, pve.Classify(err), "a dry run starts no pool: %v", err)
	_, err = s.starter.AddressPool(ctx(t), "egress")
	require.Error(t, err, "no pool runs")

	res, err := reconcile(activities.AddressReconcile{Held: []activities.AddressHolding{held}})
	require.NoError(t, err)
	assert.Equal(t, []activities.AddressHolding{held}, res.Restored)
	other, err := pools.Allocate(ctx(t), activities.AddressRequest{TaskQueue: core.DefaultTaskQueue, Pool: "egress", UID: "uid-other", Range: rng})
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.11/24", other.IPv4, "the restored address is nobody else's")

	res, err = reconcile(activities.AddressReconcile{Free: []string{uid}, Before: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	assert.Equal(t, []activities.AddressHolding{held}, res.Freed)
	st, err := s.starter.AddressPool(ctx(t), "egress")
	require.NoError(t, err)
	require.Len(t, st.Allocations, 1)
	assert.Equal(t, "uid-other", st.Allocations[0].UID)
}
