package workflows_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows"
)

// A create's clone lease goes back from the clone's wait itself, the look that sees the clone
// end, and not from the create's next workflow task: a worker's death holds that up for seconds
// (internal/chaos, TestLease_...). What the real server shows of the timing, the test
// environment cannot; what goes where, it can.
func TestCreate_theClonesWaitGivesTheLeaseBackWithTheLookThatSeesTheCloneEnd(t *testing.T) {
	w := newWorld(t)
	w.cfg.Clones.PerStorage = 1
	admissionID := workflows.CloneAdmissionWorkflowID("default-test-taskqueue", "pve1/local-lvm")
	var mu sync.Mutex
	var releases []string
	// A signal from an activity goes nowhere in a test environment: the releases are recorded,
	// and the admission finds the create gone at its next check.
	w.runs.signal = func(ctx context.Context, workflowID, signal string) error {
		if signal != "clone-release" {
			return pve.Classified(pve.NotFound, errors.New("a test environment takes no signal from an activity"))
		}
		mu.Lock()
		defer mu.Unlock()
		releases = append(releases, activity.GetInfo(ctx).ActivityType.Name+" to "+workflowID)
		return nil
	}
	env := w.env()
	var cloneLooks []*activity.Info // the attempts of the clone's wait
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		var req activities.TaskStatusRequest
		if info.ActivityType.Name != "TaskStatus" || args.Get(&req) != nil {
			return
		}
		if task, err := pve.ParseUPID(req.UPID); err == nil && task.Type == "qmclone" {
			mu.Lock()
			defer mu.Unlock()
			cloneLooks = append(cloneLooks, info)
		}
	})
	env.RegisterDelayedCallback(func() { env.CancelWorkflowByID(admissionID, "") }, 30*time.Minute)

	runOp(env, workflows.CreateProxyName, createInput())

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	assert.Equal(t, []string{"TaskStatus to " + admissionID}, releases,
		"the lease went back once, from the clone's wait: the create sent no release of its own")
	require.NotEmpty(t, cloneLooks)
	for _, info := range cloneLooks {
		assert.False(t, info.IsLocalActivity, "the clone's wait is an activity from its first look")
		assert.Equal(t, 5*time.Second, info.HeartbeatTimeout,
			"an attempt of the clone's wait lost with its worker is seen within seconds: it heartbeats while it waits for PVE")
	}
}
