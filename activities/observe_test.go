package activities_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

func TestObserveVMs_table(t *testing.T) {
	running := pve.VMConfig{"name": "proxy-a", "cores": "2", "memory": "2048"}
	tests := []struct {
		name    string
		vm      *pvesim.VM
		lock    string
		seen    func(fp uint32) uint32
		wantWhy string
		want    bool
	}{
		{name: "first listing, running: the normal, nobody woken", vm: &pvesim.VM{Node: "pve1", VMID: 101, Running: true, Config: running},
			seen: func(uint32) uint32 { return 0 }, want: true},
		{name: "as seen: nothing", vm: &pvesim.VM{Node: "pve1", VMID: 101, Running: true, Config: running},
			seen: func(fp uint32) uint32 { return fp }},
		{name: "changed since", vm: &pvesim.VM{Node: "pve1", VMID: 101, Running: true, Config: running},
			seen: func(fp uint32) uint32 { return fp + 1 }, want: true, wantWhy: `its entry changed: "proxy-a" on node pve1, 2 cores, 2048 MiB, disk 0 GiB`},
		{name: "stopped, however often before", vm: &pvesim.VM{Node: "pve1", VMID: 101, Config: running},
			seen: func(fp uint32) uint32 { return fp }, want: true, wantWhy: "listed stopped on node pve1"},
		{name: "not listed", seen: func(uint32) uint32 { return 7 }, want: true, wantWhy: "not in the cluster's list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			var fp uint32
			if tt.vm != nil {
				require.NoError(t, f.cluster.AddVM(*tt.vm))
				var rs []pve.VMResource
				require.NoError(t, f.run(t, f.acts.ClusterResources, &rs, activities.ResourcesFilter{VMIDs: []int{101}}))
				require.Len(t, rs, 1)
				fp = activities.Fingerprint(rs[0])
			}
			var changes []activities.VMChange
			require.NoError(t, f.run(t, f.acts.ObserveVMs, &changes, activities.ObserveRequest{VMIDs: []int{101}, Seen: []uint32{tt.seen(fp)}}))
			if !tt.want {
				assert.Empty(t, changes)
				return
			}
			assert.Equal(t, []activities.VMChange{{VMID: 101, Fingerprint: fp, Why: tt.wantWhy}}, changes)
		})
	}
}

func TestObserveVMs_refusesFingerprintsThatDoNotMatchTheVMIDs(t *testing.T) {
	f := newFixture(t)

	err := f.run(t, f.acts.ObserveVMs, nil, activities.ObserveRequest{VMIDs: []int{101, 102}, Seen: []uint32{1}})

	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
	assert.Zero(t, f.cluster.CallCount("ClusterResources"))
}
