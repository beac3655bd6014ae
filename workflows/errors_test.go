package workflows_test

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/core"
)

// The message of a failed step names the step once: the activity's message already names its
// call, and the workflow adds only what the activity could not know.
func TestCreate_aFailedStepsMessageHoldsItsStepOnce(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name     string
		fault    func(w *world)
		step     string
		wantType string
	}{
		{"a call refused", func(w *world) {
			w.cluster.FailNext("ClusterResources", &pve.APIError{Status: 403, Reason: "Permission check failed (/, Sys.Audit)"})
		}, "list cluster resources", core.FailPermanent},
		{"a call failing until its budget runs out", func(w *world) {
			w.cfg.Budgets.Unlock = 20 * time.Second
			for range 100 {
				w.cluster.FailNext("ClusterResources", refused)
			}
		}, "list cluster resources", core.FailTransient},
		{"a task that failed", func(w *world) {
			w.cluster.FailTask("qmstart", "start failed: QEMU exited with code 1")
		}, "wait for start of VM", core.FailTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			tt.fault(w)

			_, err := w.create(createInput())

			require.Error(t, err)
			assert.Equal(t, tt.wantType, failureType(t, err))
			assert.Equal(t, 1, strings.Count(err.Error(), tt.step), err.Error())
		})
	}
}
