package starter_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

func TestClient_addressPoolWithStaticAddressesRefusedBeforeTemporal(t *testing.T) {
	c := starter.New(&fakeTemporal{t: t, refuse: true}, workflows.DefaultTaskQueue)
	in := createInput(uid)
	in.AddressPool, in.Addresses = "egress", proxy.Addresses{IPv4: "192.0.2.5/24"}

	_, err := c.Create(context.Background(), in)

	require.ErrorIs(t, err, starter.ErrInvalidNetwork)
	assert.EqualError(t, err, "create proxy "+uid+`: address pool "egress" and static addresses are both given: choose one`)
}
