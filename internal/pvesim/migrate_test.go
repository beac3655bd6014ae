package pvesim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

// migrate starts a migration of newID from pve1 and waits for its task.
func migrate(t *testing.T, c *Cluster, clk *ManualClock, p pve.MigrateParams) pve.TaskStatus {
	t.Helper()
	upid, err := c.Migrate(t.Context(), "pve1", newID, p)
	require.NoError(t, err)
	return finish(t, c, clk, upid)
}

func TestMigrate_aRunningVMMovesOnlineWithItsLocalDisks(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	startVM(t, c, clk, newID)
	pid := c.vms[newID].pid

	st := migrate(t, c, clk, pve.MigrateParams{Target: "pve2", Online: true, WithLocalDisks: true})

	require.Equal(t, "OK", st.ExitStatus)
	vm, ok := vmByID(c, newID)
	require.True(t, ok)
	assert.Equal(t, "pve2", vm.Node)
	assert.True(t, vm.Running)
	assert.Equal(t, pid, c.vms[newID].pid, "the same QEMU, moved live")
	assert.NotEmpty(t, c.nodes["pve2"].storages["local-lvm"].volumes["vm-123456-disk-0"])
	_, err := c.VMConfig(t.Context(), "pve1", newID)
	requireFixtureError(t, "err_vm_missing", err)
}

func TestMigrate_aStoppedVMMovesOfflineWithItsLocalDisks(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)

	st := migrate(t, c, clk, pve.MigrateParams{Target: "pve2"})

	require.Equal(t, "OK", st.ExitStatus)
	vm, _ := vmByID(c, newID)
	assert.Equal(t, "pve2", vm.Node)
	assert.False(t, vm.Running)
}

func TestMigrate_theVMIsLockedWhileItMoves(t *testing.T) {
	c, clk := newCluster(t)
	createVM(t, c, clk, newID)
	_, err := c.Migrate(t.Context(), "pve1", newID, pve.MigrateParams{Target: "pve2"})
	require.NoError(t, err)

	upid, err := c.Start(t.Context(), "pve1", newID)
	require.NoError(t, err)
	assert.Equal(t, "VM is locked (migrate)", finish(t, c, clk, upid).ExitStatus)
}

func TestMigrate_refusedAtOnce(t *testing.T) {
	tests := []struct {
		name    string
		running bool
		p       pve.MigrateParams
		fixture string
	}{
		{"running without online", true, pve.MigrateParams{Target: "pve2", WithLocalDisks: true}, "err_migrate_running_not_online"},
		{"to its own node", false, pve.MigrateParams{Target: "pve1"}, "err_migrate_target_local"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newCluster(t)
			createVM(t, c, clk, newID)
			if tt.running {
				startVM(t, c, clk, newID)
			}

			_, err := c.Migrate(t.Context(), "pve1", newID, tt.p)

			requireFixtureError(t, tt.fixture, err)
		})
	}
}

func TestMigrate_taskAbortsOnWhatCannotMove(t *testing.T) {
	tests := []struct {
		name    string
		seed    bool
		p       pve.MigrateParams
		problem string
	}{
		{"the seed ISO on local storage", true, pve.MigrateParams{Target: "pve2", Online: true, WithLocalDisks: true},
			"can't migrate local disk 'local:iso/seed.iso': local cdrom image"},
		{"local disks of a running VM without with-local-disks", false, pve.MigrateParams{Target: "pve2", Online: true},
			"can't migrate local disk 'local-lvm:vm-123456-disk-0': can't live migrate attached local disks without with-local-disks option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newCluster(t)
			var seed []byte
			if tt.seed {
				seed = seedImage(t, "iid-1", pveflowVendorData(t))
			}
			bootWithSeed(t, c, clk, seed)
			assert.Equal(t, tt.problem, c.migrateProblem(c.vms[newID], tt.p))

			st := migrate(t, c, clk, tt.p)

			assert.Equal(t, fixtureExit(t, "task_status_migrate_aborted"), st.ExitStatus)
			vm, _ := vmByID(c, newID)
			assert.Equal(t, "pve1", vm.Node)
			assert.True(t, vm.Running)
		})
	}
}

func TestMigrate_anEjectedSeedDoesNotStopIt(t *testing.T) {
	c, clk := newCluster(t)
	bootWithSeed(t, c, clk, seedImage(t, "iid-1", pveflowVendorData(t)))
	detachSeed(t, c, clk)

	st := migrate(t, c, clk, pve.MigrateParams{Target: "pve2", Online: true, WithLocalDisks: true})

	require.Equal(t, "OK", st.ExitStatus)
	vm, _ := vmByID(c, newID)
	assert.Equal(t, "pve2", vm.Node)
}
