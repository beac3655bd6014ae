package activities_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

func cloudInitFixture(t *testing.T) *fixture {
	return newFixture(t, func(o *pvesim.Options) { o.CloudInitDuration = 30 * time.Second })
}

func TestCloudInitResult_agentNotAnsweringYetIsRetryableAtTheWaitsPace(t *testing.T) {
	f := cloudInitFixture(t)
	ref := f.clone(t)
	f.start(t, ref)
	pace := &activities.Pace{Since: f.clock.Now().Add(-time.Minute), Poll: config.Default().Poll}

	err := f.run(t, f.acts.CloudInitResult, nil, activities.CloudInitRequest{VMRef: ref, Pace: pace})

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrAgentNotRunning, appErr.Type())
	assert.False(t, appErr.NonRetryable())
	assert.Equal(t, 10*time.Second, appErr.NextRetryDelay())
}

func TestCloudInitResult_noResultYetIsNotReadyAtTheWaitsPace(t *testing.T) {
	f := cloudInitFixture(t)
	ref := f.clone(t)
	f.start(t, ref)
	f.clock.Advance(10 * time.Second) // the agent answers; cloud-init runs on
	pace := &activities.Pace{Since: f.clock.Now().Add(-time.Minute), Poll: config.Default().Poll}

	err := f.run(t, f.acts.CloudInitResult, nil, activities.CloudInitRequest{VMRef: ref, Pace: pace})

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrNotReady, appErr.Type())
	assert.False(t, appErr.NonRetryable())
	assert.Equal(t, temporal.ApplicationErrorCategoryBenign, appErr.Category())
	assert.Equal(t, 10*time.Second, appErr.NextRetryDelay())
	assert.Contains(t, appErr.Message(), "cloud-init of VM 123456 on node pve1 has not finished yet")
}

func TestCloudInitResult_finishedWithoutErrorsNamesTheDatasource(t *testing.T) {
	f := cloudInitFixture(t)
	ref := f.clone(t)
	f.start(t, ref)
	f.clock.Advance(time.Minute)

	var done activities.CloudInitDone
	require.NoError(t, f.run(t, f.acts.CloudInitResult, &done, activities.CloudInitRequest{VMRef: ref}))

	assert.NotEmpty(t, done.Datasource)
}

func TestCloudInitResult_errorsAreAPermanentFailureCarryingThem(t *testing.T) {
	f := cloudInitFixture(t)
	ref := f.clone(t)
	f.cluster.FailCloudInit(ref.VMID, "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))", "('write_files', KeyError('content'))")
	f.start(t, ref)
	f.clock.Advance(time.Minute)

	err := f.run(t, f.acts.CloudInitResult, nil, activities.CloudInitRequest{VMRef: ref})

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrPermanent, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, "cloud-init of VM 123456 on node pve1 finished with 2 error(s): ('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands')); ('write_files', KeyError('content'))", appErr.Message())
	var details activities.CloudInitErrors
	require.NoError(t, appErr.Details(&details))
	assert.Len(t, details.Errors, 2)
}

func TestCloudInitResult_aFileThatIsNotCloudInitsResultIsPermanentWithoutQuotingIt(t *testing.T) {
	f := newFixture(t)
	ref := activities.VMRef{Node: "pve1", VMID: 123456}
	f.acts.API = fileAPI{API: f.cluster, content: "hunter2 not json"}

	err := f.run(t, f.acts.CloudInitResult, nil, activities.CloudInitRequest{VMRef: ref})

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrPermanent, appErr.Type())
	assert.Contains(t, appErr.Message(), "is not cloud-init's result")
	assert.NotContains(t, appErr.Message(), "hunter2")
}

func TestCloudInitResult_aTokenWithoutFileReadIsPermanent(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.DenyPrivileges = []string{"VM.GuestAgent.FileRead"} })
	ref := f.clone(t)
	f.start(t, ref)
	f.clock.Advance(time.Minute)

	err := f.run(t, f.acts.CloudInitResult, nil, activities.CloudInitRequest{VMRef: ref})

	appErr := appError(t, err)
	assert.Equal(t, activities.ErrPermanent, appErr.Type())
	assert.Contains(t, appErr.Message(), "VM.GuestAgent.FileRead|VM.GuestAgent.Unrestricted")
}

// fileAPI answers every file read with content.
type fileAPI struct {
	pve.API
	content string
}

func (a fileAPI) AgentFileRead(context.Context, string, int, string) (string, error) {
	return a.content, nil
}

func TestCloudInitResult_qemuGAsOtherWordingOfAMissingFileIsNotReadyToo(t *testing.T) {
	f := newFixture(t)
	f.acts.API = missingFileAPI{API: f.cluster}

	err := f.run(t, f.acts.CloudInitResult, nil, activities.CloudInitRequest{VMRef: activities.VMRef{Node: "pve1", VMID: 123456}})

	assert.Equal(t, activities.ErrNotReady, appError(t, err).Type())
}

// missingFileAPI answers every file read as a qemu-ga that words its error otherwise.
type missingFileAPI struct{ pve.API }

func (missingFileAPI) AgentFileRead(context.Context, string, int, string) (string, error) {
	msg := "Agent error: Failed to open file '/run/cloud-init/result.json': No such file or directory"
	return "", &pve.APIError{Status: 500, Reason: msg, Message: msg}
}
