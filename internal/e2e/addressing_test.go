package e2e_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

func TestE2E_aStaticIPv4AndIPv6ProxyGetsExactlyItsAddressesThroughTheRESTAPI(t *testing.T) {
	cluster := newCluster()
	s := startRESTStack(t, cluster)
	in := createInput(uid)
	in.Addresses = proxy.Addresses{IPv4: "192.0.2.10/24", Gateway4: "192.0.2.1", IPv6: "2001:db8::10/64", Gateway6: "fe80::1"}

	res, err := served[proxyvm.CreateProxyResult](t, s.startCreate(in))

	require.NoError(t, err)
	assert.Equal(t, "192.0.2.10", res.IPv4)
	assert.Equal(t, "2001:db8::10", res.IPv6)
	assert.Equal(t, []string{"192.0.2.10/24", "2001:db8::10/64"}, res.Addresses)
	run, err := s.client.ExecuteWorkflow(context.Background(), core.ReadOptions(core.GetProxyWorkflowID(uid, "addressing"), core.DefaultTaskQueue),
		core.GetProxyName, proxyvm.GetProxyInput{UID: uid})
	require.NoError(t, err)
	got, err := result[proxyvm.GetProxyResult](t, run)
	require.NoError(t, err)
	assert.Equal(t, proxy.Running, got.State)
	assert.Equal(t, res.Addresses, got.Addresses)
	st := s.proxyStatus(uid)
	assert.Equal(t, "2001:db8::10", st.Observed.IPv6)
}
