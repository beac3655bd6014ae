package activities_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

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

func TestPermissions_createsTogetherShareOneReadPerPath(t *testing.T) {
	f := newFixture(t)
	f.acts.Privileges = activities.NewPrivilegeCache(time.Minute, nil)
	req := activities.PermissionsRequest{Paths: []string{"/nodes/pve1", "/vms/9000"}}

	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { // the activity itself: the test environment runs one at a time
			got, err := f.acts.Permissions(t.Context(), req)
			assert.NoError(t, err)
			assert.Contains(t, got["/vms/9000"], "VM.Clone")
		})
	}
	wg.Wait()

	assert.Equal(t, 2, f.cluster.CallCount("Permissions"), "one read per path for ten reads of the same paths")
}

func TestPermissions_aReadOlderThanTheTTLOrAFreshRequestReadsAgain(t *testing.T) {
	f := newFixture(t)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	f.acts.Privileges = activities.NewPrivilegeCache(10*time.Second, func() time.Time { return now })
	req := activities.PermissionsRequest{Paths: []string{"/vms/9000"}}
	read := func(req activities.PermissionsRequest) {
		var got map[string]pve.Privileges
		require.NoError(t, f.run(t, f.acts.Permissions, &got, req))
	}

	read(req)
	now = now.Add(9 * time.Second)
	read(req)
	require.Equal(t, 1, f.cluster.CallCount("Permissions"), "younger than the TTL: reused")
	now = now.Add(time.Second)
	read(req)
	require.Equal(t, 2, f.cluster.CallCount("Permissions"), "as old as the TTL: read again")
	read(activities.PermissionsRequest{Paths: req.Paths, Fresh: true})
	assert.Equal(t, 3, f.cluster.CallCount("Permissions"), "a fresh request, as the health check's, reads past the cache")
}

func TestNetworkAccess_readsTheTemplatesNICsAndTheVnetsZones(t *testing.T) {
	f := newFixture(t, func(o *pvesim.Options) { o.Vnets = []pve.SDNVnet{{Vnet: "vnet1", Zone: "zone1"}} })

	var got activities.NetworkAccess
	require.NoError(t, f.run(t, f.acts.NetworkAccess, &got, activities.NetworkAccessRequest{Templates: []activities.VMRef{{Node: "pve1", VMID: 9000}}}))

	require.Len(t, got.TemplateNICs, 1)
	assert.Contains(t, got.TemplateNICs[9000]["net0"], "bridge=vmbr0")
	assert.Equal(t, map[string]string{"vnet1": "zone1"}, got.Zones)
}
