package pvesim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestHoldLock_refusesCloneOfTheTemplateUntilItGoes(t *testing.T) {
	c, clk := newCluster(t)
	require.NoError(t, c.HoldLock(9000, "backup", 3*time.Minute))
	params := pve.CloneParams{NewID: 123456, Name: "proxy-a", Full: true}

	_, err := c.Clone(context.Background(), "pve1", 9000, params)

	require.Error(t, err)
	assert.Contains(t, err.Error(), "VM is locked (backup)")
	assert.Equal(t, pve.Locked, pve.Classify(err))

	clk.Advance(3 * time.Minute)
	_, err = c.Clone(context.Background(), "pve1", 9000, params)
	assert.NoError(t, err)
}

func TestHoldLock_refusesAVMLockedAlready(t *testing.T) {
	c, _ := newCluster(t)
	require.NoError(t, c.HoldLock(9000, "backup", time.Minute))

	assert.ErrorContains(t, c.HoldLock(9000, "backup", time.Minute), "locked (backup) already")
	assert.ErrorContains(t, c.HoldLock(4242, "backup", time.Minute), "no such VM")
}
