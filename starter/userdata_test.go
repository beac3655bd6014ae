package starter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

func TestClient_userDataOverTheLimitRefusedBeforeTemporal(t *testing.T) {
	c := starter.New(&fakeTemporal{t: t, refuse: true}, core.DefaultTaskQueue)
	in := createInput(uid)
	in.UserData = "#cloud-config\n" + strings.Repeat("x", proxyvm.MaxUserDataBytes)

	_, err := c.Create(context.Background(), in)

	require.ErrorIs(t, err, starter.ErrUserDataTooLarge)
	assert.NotErrorIs(t, err, starter.ErrInvalidUID)
	assert.EqualError(t, err, "create proxy "+uid+": user-data is 65550 bytes, more than the limit of 65536 (proxyvm.MaxUserDataBytes)")
}

func TestClient_userDataAtTheLimitReachesTemporal(t *testing.T) {
	temporal := &fakeTemporal{t: t}
	c := starter.New(temporal, core.DefaultTaskQueue)
	in := createInput(uid)
	in.UserData = strings.Repeat("x", proxyvm.MaxUserDataBytes)

	_, err := c.Create(context.Background(), in)

	require.ErrorIs(t, err, errTemporalUnavailable)
	assert.NotErrorIs(t, err, starter.ErrUserDataTooLarge)
	assert.Equal(t, []string{core.ProxyWorkflowID(uid)}, temporal.called)
}

func TestClient_changeWithUserDataOverTheLimitRefusedBeforeTemporal(t *testing.T) {
	c := starter.New(&fakeTemporal{t: t, refuse: true}, core.DefaultTaskQueue)
	big := strings.Repeat("x", proxyvm.MaxUserDataBytes+1)

	_, err := c.Change(context.Background(), proxyvm.ChangeRequest{UID: uid, UserData: &big})

	require.ErrorIs(t, err, starter.ErrUserDataTooLarge)
	assert.EqualError(t, err, "change proxy "+uid+": user-data is 65537 bytes, more than the limit of 65536 (proxyvm.MaxUserDataBytes)")
}

func TestClient_nameThatIsNotADNSLabelRefusedBeforeTemporal(t *testing.T) {
	c := starter.New(&fakeTemporal{t: t, refuse: true}, core.DefaultTaskQueue)
	in := createInput(uid)
	in.Name = "egress.eu-1"

	_, err := c.Create(context.Background(), in)

	require.ErrorIs(t, err, starter.ErrInvalidName)
	assert.ErrorContains(t, err, `create proxy `+uid+`: name "egress.eu-1" is not a DNS label`)
}

func TestClient_invalidAddressesRefusedBeforeTemporal(t *testing.T) {
	c := starter.New(&fakeTemporal{t: t, refuse: true}, core.DefaultTaskQueue)
	in := createInput(uid)
	in.Addresses = proxy.Addresses{IPv4: "192.0.2.10/24", Gateway4: "198.51.100.1"}

	_, err := c.Create(context.Background(), in)

	require.ErrorIs(t, err, starter.ErrInvalidNetwork)
	assert.ErrorContains(t, err, "create proxy "+uid+": addresses: ipv4: gateway 198.51.100.1 is outside 192.0.2.0/24")
}
