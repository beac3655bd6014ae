package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows"
)

// A wait that needs more than its budget is answered by starting the create again: the run
// fails Transient, and the next one resumes on the VM the first cloned.
func TestCreate_aWaitOutOfBudgetFailsTransientAndANewStartResumesOnTheSameVM(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": 5 * time.Minute, "qmstart": 3 * time.Second}
	})
	w.cfg.Budgets.Clone = 2 * time.Minute

	_, err := w.create(createInput())
	require.Error(t, err)
	assert.Equal(t, workflows.FailTransient, failureType(t, err))
	cloned := w.vms()
	require.Len(t, cloned, 1)
	w.advance(5 * time.Minute)
	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, cloned[0].VMID, res.VMID)
	assert.Len(t, w.vms(), 1)
	assert.Equal(t, 1, w.cluster.CallCount("Clone"))
}
