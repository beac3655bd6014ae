package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// A collection's delete carries the time the collection began to look: the entity refuses it
// while the proxy is wanted by a create or change it accepted after that time, and serves it
// when the proxy was last asked for before.
func TestProxy_refusesACollectionsDeleteOfAProxyCreatedSinceTheCollectionLooked(t *testing.T) {
	w := newWorld(t)
	start := w.clock.Now()
	p := newProxyEntity(t, w)
	p.request(0, core.CreateUpdate, "create", createInput())
	collection := func(lookedAt time.Duration) proxyvm.DeleteProxyInput {
		return proxyvm.DeleteProxyInput{UID: uid, UnlessWantedSince: start.Add(lookedAt)}
	}
	p.request(time.Hour, core.DeleteUpdate, "looked before the create", collection(-time.Minute))
	p.request(2*time.Hour, core.DeleteUpdate, "looked after the create", collection(time.Minute))

	st := p.run()

	refused := p.answer("looked before the create").rejected
	require.Error(t, refused)
	assert.Equal(t, core.FailSuperseded, failureType(t, refused))
	assert.Contains(t, refused.Error(), "the proxy is wanted again")
	require.NoError(t, p.answer("looked after the create").err)
	assert.Equal(t, []string{"create:completed", "delete:completed"}, kinds(st))
	assert.Empty(t, w.vms())
}
