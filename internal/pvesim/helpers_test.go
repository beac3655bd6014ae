package pvesim

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pve/pvefixture"
)

// The fixtures in testdata/pve use these: node pve1, template 9000, the proxy VM 123456.
const (
	tmplID = 9000
	newID  = 123456
)

var t0 = time.Date(2026, 11, 20, 14, 3, 12, 0, time.UTC)

// newCluster is Default() on a manual clock, changed by edits.
func newCluster(t *testing.T, edits ...func(*Options)) (*Cluster, *ManualClock) {
	t.Helper()
	clk := NewManualClock(t0)
	opts := Default()
	opts.Clock = clk
	for _, edit := range edits {
		edit(&opts)
	}
	return New(opts), clk
}

// cloneParams is the clone pveflow asks for.
func cloneParams(newid int) pve.CloneParams {
	return pve.CloneParams{
		NewID:       newid,
		Name:        "proxy-3k7q2m9x4w8p1r5t",
		Description: "proxy-operator-managed=true\nproxy-operator-uid=5f0c2a4e-8b1d-4c3a-9e7f-2d6b1a0c9e43\nproxy-operator-created-at=2026-11-20T14:03:11Z",
		Full:        true,
		Storage:     "local-lvm",
	}
}

func startClone(t *testing.T, c *Cluster, newid int) pve.UPID {
	t.Helper()
	upid, err := c.Clone(t.Context(), "pve1", tmplID, cloneParams(newid))
	require.NoError(t, err)
	return upid
}

// finish moves the clock to the end of a task of the default duration and returns the task's
// final status.
func finish(t *testing.T, c *Cluster, clk *ManualClock, upid pve.UPID) pve.TaskStatus {
	t.Helper()
	info, err := pve.ParseUPID(upid)
	require.NoError(t, err)
	clk.Advance(defaultTaskDurations[info.Type])
	st, err := c.TaskStatus(t.Context(), upid.Node(), upid)
	require.NoError(t, err)
	require.Equal(t, pve.TaskStopped, st.Status)
	return st
}

// createVM clones the template into newid and waits for the clone.
func createVM(t *testing.T, c *Cluster, clk *ManualClock, newid int) {
	t.Helper()
	require.Equal(t, "OK", finish(t, c, clk, startClone(t, c, newid)).ExitStatus)
}

// startVM starts a VM on pve1 and waits for the start.
func startVM(t *testing.T, c *Cluster, clk *ManualClock, vmid int) {
	t.Helper()
	upid, err := c.Start(t.Context(), "pve1", vmid)
	require.NoError(t, err)
	require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
}

// requireFixtureError asserts that err is exactly the error a client makes of fixture name.
func requireFixtureError(t *testing.T, name string, err error) {
	t.Helper()
	var got *pve.APIError
	require.ErrorAs(t, err, &got)
	assert.Equal(t, pvefixture.Load(t, name).APIError(), got)
}

// fixtureExit is the exit status of a task-status fixture.
func fixtureExit(t *testing.T, name string) string {
	t.Helper()
	var body struct {
		Data pve.TaskStatus `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(pvefixture.Load(t, name).Body), &body))
	return body.Data.ExitStatus
}

// fixtureData decodes a fixture's data object.
func fixtureData(t *testing.T, name string) map[string]any {
	t.Helper()
	var body struct {
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(pvefixture.Load(t, name).Body), &body))
	return body.Data
}

// vmByID is the VM with vmid, as VMs reports it.
func vmByID(c *Cluster, vmid int) (VM, bool) {
	for _, v := range c.VMs() {
		if v.VMID == vmid {
			return v, true
		}
	}
	return VM{}, false
}

// volumesOf lists the volume IDs of vmid's disks.
func volumesOf(c *Cluster, vmid int) []string {
	var out []string
	for _, v := range c.Volumes() {
		if _, name, _ := strings.Cut(v.VolID, ":"); volumeOwner(name) == vmid {
			out = append(out, v.VolID)
		}
	}
	return out
}

// upload stores an ISO on pve1's local storage and waits for the task.
func upload(t *testing.T, c *Cluster, clk *ManualClock, name string, data []byte) {
	t.Helper()
	upid, err := c.UploadISO(t.Context(), "pve1", "local", name, bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	require.Equal(t, "OK", finish(t, c, clk, upid).ExitStatus)
}

// isoNames lists the volume IDs of every ISO.
func isoNames(c *Cluster) []string {
	var out []string
	for _, v := range c.Volumes() {
		if strings.Contains(v.VolID, ":iso/") {
			out = append(out, v.VolID)
		}
	}
	return out
}
