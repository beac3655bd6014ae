package activities_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

func TestTaskStatus_warningsAreReadFromTheTaskLog(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.cluster.BusyVolume(fmt.Sprintf("local-lvm:vm-%d-disk-1", ref.VMID))
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Destroy, &upid, ref))

	res, err := f.waitTask(t, upid)

	require.NoError(t, err)
	assert.Equal(t, 1, res.Warnings)
	assert.Equal(t, []string{fmt.Sprintf("destroy task %s on node pve1: Could not remove disk 'local-lvm:vm-%d-disk-1', check manually: "+
		"lvremove 'pve/vm-%d-disk-1' error:   Logical volume pve/vm-%d-disk-1 in use.", upid, ref.VMID, ref.VMID, ref.VMID)}, res.WarningTexts)
}

func TestTaskStatus_warningsWithoutALogLineAreTheExitStatus(t *testing.T) {
	f := newFixture(t)
	ref := f.clone(t)
	f.cluster.FailTask("qmstart", "WARNINGS: 1")
	var upid pve.UPID
	require.NoError(t, f.run(t, f.acts.Start, &upid, ref))

	res, err := f.waitTask(t, upid)

	require.NoError(t, err)
	assert.Equal(t, []string{fmt.Sprintf("start task %s on node pve1: WARNINGS: 1", upid)}, res.WarningTexts)
}

func TestPermissions_readsEachPath(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.DenyPrivileges = []string{"Sys.Audit"} })

	var got map[string]pve.Privileges
	require.NoError(t, f.run(t, f.acts.Permissions, &got, activities.PermissionsRequest{Paths: []string{"/nodes/pve1", "/vms/9000"}}))

	assert.Len(t, got, 2)
	assert.NotContains(t, got["/nodes/pve1"], "Sys.Audit")
	assert.Contains(t, got["/vms/9000"], "VM.Clone")
	assert.Equal(t, 2, f.cluster.CallCount("Permissions"))
}
