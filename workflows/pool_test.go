package workflows_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/workflows/core"
)

// A clone into a pool that does not exist is PVE's 403 "Permission check failed (pool '<pool>'
// does not exist)" (qemu-server clone_vm, RPCEnvironment::check_pool_exist): the create fails
// Permanent at the first clone, instead of retrying it for the whole clone budget.
func TestFleet_cloneIntoAMissingPoolFailsPermanentAtOnce(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.Pool = "proxies"

	_, err := w.create(createInput())

	assert.Equal(t, core.FailPermanent, failureType(t, err))
	assert.Contains(t, err.Error(), "Permission check failed (pool 'proxies' does not exist)")
	assert.Equal(t, 1, w.cluster.CallCount("Clone"))
}
