package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/addresspool"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// poolOf200 is a pool of two hundred addresses of each family.
var poolOf200 = config.AddressPool{
	IPv4: &config.AddressRange{Subnet: "192.0.2.0/24", First: "192.0.2.10", Last: "192.0.2.209", Gateway: "192.0.2.1"},
	IPv6: &config.AddressRange{Subnet: "2001:db8::/64", First: "2001:db8::10", Last: "2001:db8::d7", Gateway: "2001:db8::1"},
}

func TestE2E_twoHundredProxiesFromAPoolOfTwoHundredNeverShareAnAddressAndADeleteFreesOne(t *testing.T) {
	cfg := fastConfig(t)
	cfg.Proxmox.AddressPools = map[string]config.AddressPool{"egress": poolOf200}
	s := startStack(t, newCluster(), cfg)
	pools := starter.AddressPools{Client: s.starter}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	allocate := func(uid string) (proxy.Addresses, error) {
		return pools.Allocate(ctx, activities.AddressRequest{TaskQueue: core.DefaultTaskQueue, Pool: "egress", UID: uid, Range: poolOf200})
	}

	// One proxy made by pveflow and 199 allocations at once, as 199 creates would ask.
	in := createInput(uid)
	in.AddressPool = "egress"
	created := s.startCreate(in)
	var wg sync.WaitGroup
	errs := make([]error, 199)
	const senders = 10
	for s := range senders {
		wg.Go(func() {
			for i := s; i < len(errs); i += senders {
				_, errs[i] = allocate(fmt.Sprintf("pool-%03d", i))
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "pool-%03d", i)
	}
	res, err := served[proxyvm.CreateProxyResult](t, created)
	require.NoError(t, err)
	assert.Equal(t, "egress", res.AddressPool)

	st, err := s.starter.AddressPool(ctx, "egress")
	require.NoError(t, err)
	require.Len(t, st.Allocations, 200)
	owners := map[string]string{}
	for _, a := range st.Allocations {
		for _, addr := range []string{a.IPv4, a.IPv6} {
			require.NotContains(t, owners, addr, "%s holds %s, which %s holds", a.UID, addr, owners[addr])
			owners[addr] = a.UID
		}
	}
	ours, err := allocate(uid)
	require.NoError(t, err, "the proxy's own allocation is answered again")
	assert.Equal(t, uid, owners[ours.IPv4])
	_, err = allocate("one-too-many")
	require.Error(t, err)
	assert.Equal(t, core.FailQuotaExceeded, starter.FailureType(err))

	serve[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))

	st, err = s.starter.AddressPool(ctx, "egress")
	require.NoError(t, err)
	assert.Len(t, st.Allocations, 199, "the delete freed the proxy's addresses")
	next, err := allocate("one-too-many")
	require.NoError(t, err)
	assert.Equal(t, ours, next, "and the next proxy gets them")
}

func TestE2E_aPoolContinuesAsNewWithItsAllocationsWhileAllocationsComeIn(t *testing.T) {
	cfg := fastConfig(t)
	s := startStack(t, newCluster(), cfg)
	pools := starter.AddressPools{Client: s.starter}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A short history: the pool continues as new a few times over the allocations.
	first, err := s.client.ExecuteWorkflow(ctx, addresspool.AddressPoolOptions(core.DefaultTaskQueue, "egress"), addresspool.AddressPoolName,
		addresspool.AddressPoolState{Pool: "egress", HistoryEvents: 40})
	require.NoError(t, err)

	var wg sync.WaitGroup
	got := make([]proxy.Addresses, 40)
	errs := make([]error, len(got))
	const senders = 4
	for s := range senders {
		wg.Go(func() {
			for i := s; i < len(got); i += senders {
				got[i], errs[i] = pools.Allocate(ctx, activities.AddressRequest{TaskQueue: core.DefaultTaskQueue, Pool: "egress", UID: fmt.Sprintf("pool-%03d", i), Range: poolOf200})
			}
		})
	}
	wg.Wait()

	for i, err := range errs {
		require.NoError(t, err, "pool-%03d", i)
	}
	require.ErrorAs(t, first.GetWithOptions(ctx, nil, client.WorkflowRunGetOptions{DisableFollowingRuns: true}), new(*workflow.ContinueAsNewError))
	st, err := s.starter.AddressPool(ctx, "egress")
	require.NoError(t, err)
	require.Len(t, st.Allocations, len(got), "every allocation is in the latest run")
	for _, a := range st.Allocations {
		var i int
		_, err := fmt.Sscanf(a.UID, "pool-%03d", &i)
		require.NoError(t, err)
		assert.Equal(t, got[i].IPv4, a.IPv4, "%s holds what it was answered", a.UID)
	}
}
