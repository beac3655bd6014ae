package pve_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestClient_taskLogReadsTheWholeLog(t *testing.T) {
	var query string
	fixture := serveFixture(t, "task_log_destroy_warnings")
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		fixture(w, r)
	})
	c := newClient(t, ts)

	lines, err := c.TaskLog(t.Context(), "pve1", "UPID:pve1:000C0A88:0A4D4B24:6B00613B:qmdestroy:123456:pveflow@pve!worker:")

	require.NoError(t, err)
	assert.Equal(t, "limit=0", query, "PVE reads a limit of 0 as to the end; its default is 50 lines")
	require.Len(t, lines, 3)
	assert.Equal(t, pve.TaskLogLine{N: 3, T: "TASK WARNINGS: 2"}, lines[2])
}

func TestTaskWarnings_areTheWARNLinesWithoutThePrefix(t *testing.T) {
	log := []pve.TaskLogLine{
		{N: 1, T: "  Logical volume \"vm-123456-disk-1\" successfully removed."},
		{N: 2, T: "WARN: Could not remove disk 'local-lvm:vm-123456-disk-0', check manually: lvremove 'pve/vm-123456-disk-0' error:   Logical volume pve/vm-123456-disk-0 in use."},
		{N: 3, T: "disk image '/var/lib/vz/images/123456/vm-123456-disk-2.qcow2' does not exist"},
		{N: 4, T: "TASK WARNINGS: 1"},
	}

	assert.Equal(t, []string{
		"Could not remove disk 'local-lvm:vm-123456-disk-0', check manually: lvremove 'pve/vm-123456-disk-0' error:   Logical volume pve/vm-123456-disk-0 in use.",
	}, pve.TaskWarnings(log))
}

func TestClient_permissionsArePathsPrivilegesWhateverTheyPropagate(t *testing.T) {
	var query string
	fixture := serveFixture(t, "permissions_storage")
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.Query().Get("path")
		fixture(w, r)
	})
	c := newClient(t, ts)

	privs, err := c.Permissions(t.Context(), "/storage/local-lvm")

	require.NoError(t, err)
	assert.Equal(t, "/storage/local-lvm", query)
	assert.Equal(t, pve.Privileges{"Datastore.AllocateSpace": false, "Datastore.Audit": false}, privs,
		"a privilege that does not propagate (0) is held all the same")
}

func TestClient_permissionsOfAPathWithNothingAreEmpty(t *testing.T) {
	ts := newServer(t, serveJSON(`{"data":{}}`))
	c := newClient(t, ts)

	privs, err := c.Permissions(t.Context(), "/nodes/pve1")

	require.NoError(t, err)
	assert.Empty(t, privs)
	assert.NotNil(t, privs)
}
