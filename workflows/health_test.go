package workflows_test

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/reads"
)

func (w *world) check() reads.CheckHealthResult {
	w.t.Helper()
	env := w.env()
	env.ExecuteWorkflow(core.CheckHealthName)
	require.True(w.t, env.IsWorkflowCompleted())
	require.NoError(w.t, env.GetWorkflowError())
	var res reads.CheckHealthResult
	require.NoError(w.t, env.GetWorkflowResult(&res))
	return res
}

// bothNodes configures pve2 before pve1, each with a template of its own, and puts pve2's on
// the cluster.
func bothNodes(w *world) {
	w.cfg.Proxmox.Nodes = []string{"pve2", "pve1"}
	w.cfg.Proxmox.Templates["debian13"] = config.Template{Nodes: map[string]int{"pve1": 9000, "pve2": 9001}}
	w.add(pvesim.Template(9001, "pve2", 1))
}

func TestCheck_oneEntryPerNodeInConfigOrder(t *testing.T) {
	w := newWorld(t)
	bothNodes(w)

	res := w.check()

	require.Len(t, res.Nodes, 2)
	assert.Equal(t, "pve2", res.Nodes[0].Name)
	assert.Equal(t, "pve1", res.Nodes[1].Name)
	assert.True(t, res.Healthy(), "%+v", res.Nodes)
	assert.Equal(t, 1, w.cluster.CallCount("Version"), "the version is the cluster's, read once")
	assert.Equal(t, 1, w.cluster.CallCount("ClusterResources"), "the templates are read once")
}

func TestCheck_detailsOfAHealthyNode(t *testing.T) {
	w := newWorld(t)

	res := w.check()

	require.Len(t, res.Nodes, 1)
	n := res.Nodes[0]
	assert.True(t, n.Healthy)
	assert.Empty(t, n.Reason)
	assert.Equal(t, map[string]string{
		"pveVersion":         "9.2.11",
		"kernel":             "Linux 6.17.2-1-pve #1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2026-10-14T09:12Z)",
		"isoStorage":         "local",
		"isoStorageAvailGiB": "85",
		"templates":          "1/1",
	}, n.Details)
	assert.True(t, w.clock.Now().Equal(res.CheckedAt), "checked at %s", res.CheckedAt)
}

func TestCheck_nodesCheckedConcurrently(t *testing.T) {
	w := newWorld(t)
	bothNodes(w)
	release := w.cluster.Block("NodeStatus")
	sawBoth := make(chan bool, 1)
	go func() {
		// A failsafe, not a measurement: sequential checks would never get here.
		deadline := time.Now().Add(10 * time.Second)
		for w.cluster.CallCount("NodeStatus") < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		sawBoth <- w.cluster.CallCount("NodeStatus") == 2
		release()
	}()

	res := w.check()

	assert.True(t, <-sawBoth, "both nodes' status reads were in flight at once")
	assert.True(t, res.Healthy())
}

// dialRefused is what a client meets when nothing listens on the API's port.
var dialRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

func TestCheck_reasonsTable(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(w *world)
		wantReason  string
		wantMessage string
	}{
		{"unauthorized", func(w *world) {
			w.cluster.FailNext("Version", &pve.APIError{Status: 401, Reason: "authentication failure"})
		}, reads.ReasonUnauthorized, "401 authentication failure"},
		{"forbidden", func(w *world) {
			w.cluster.FailNext("NodeStatus", &pve.APIError{Status: 403, Reason: "Permission check failed (/nodes/pve1, Sys.Audit)"})
		}, reads.ReasonForbidden, "Sys.Audit"},
		{"unreachable", func(w *world) {
			w.cluster.FailNext("Version", dialRefused)
			w.cluster.FailNext("Version", dialRefused)
		}, reads.ReasonUnreachable, "connection refused"},
		{"request timeout", func(w *world) {
			for range 2 {
				w.cluster.FailNext("NodeStatus", fmt.Errorf("no answer within 30s: %w", context.DeadlineExceeded))
			}
		}, reads.ReasonTimeout, "no answer within 30s"},
		{"other API error", func(w *world) {
			for range 2 {
				w.cluster.FailNext("NodeStatus", &pve.APIError{Status: 500, Reason: "got no worker"})
			}
		}, reads.ReasonAPIError, "got no worker"},
		{"storage not on the node", func(w *world) {
			w.cfg.Proxmox.ISOStorage = "cephfs-iso"
		}, reads.ReasonStorageNotFound, "No such storage."},
		{"storage without ISO content", func(w *world) {
			w.cfg.Proxmox.ISOStorage = "local-lvm"
		}, reads.ReasonStorageNotFound, "does not hold ISO images (content: images,rootdir)"},
		{"template missing", func(w *world) {
			w.cfg.Proxmox.Templates["debian13"] = config.Template{VMID: 9100}
		}, reads.ReasonTemplateNotFound, "no template debian13 (VMID 9100)"},
		{"template is a VM, not a template", func(w *world) {
			w.cfg.Proxmox.Templates["debian13"] = config.Template{VMID: 4000}
			w.add(pvesim.VM{Node: "pve1", VMID: 4000, Config: pve.VMConfig{"name": "not-a-template"}})
		}, reads.ReasonTemplateNotFound, "no template debian13 (VMID 4000)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			tt.setup(w)

			res := w.check()

			require.Len(t, res.Nodes, 1)
			n := res.Nodes[0]
			assert.False(t, n.Healthy)
			assert.Equal(t, tt.wantReason, n.Reason)
			assert.Contains(t, n.Message, tt.wantMessage)
		})
	}
}

func TestCheck_nodesOwnTemplateMustBeOnTheNode(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.Nodes = []string{"pve1", "pve2"}
	w.cfg.Proxmox.Templates["debian13"] = config.Template{Nodes: map[string]int{"pve1": 9000, "pve2": 9000}}

	res := w.check()

	require.Len(t, res.Nodes, 2)
	assert.True(t, res.Nodes[0].Healthy)
	assert.Equal(t, reads.ReasonTemplateNotFound, res.Nodes[1].Reason)
	assert.Equal(t, "no template debian13 (VMID 9000 on node pve2)", res.Nodes[1].Message)
	assert.Equal(t, "0/1", res.Nodes[1].Details["templates"])
}

func TestCheck_detailsAsFarAsTheChecksGot(t *testing.T) {
	w := newWorld(t)
	w.cfg.Proxmox.ISOStorage = "local-lvm"

	res := w.check()

	assert.Equal(t, map[string]string{
		"pveVersion":         "9.2.11",
		"kernel":             "Linux 6.17.2-1-pve #1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2026-10-14T09:12Z)",
		"isoStorage":         "local-lvm",
		"isoStorageAvailGiB": "1613",
	}, res.Nodes[0].Details)
}

func TestCheck_logsVerdictPerNode(t *testing.T) {
	w := newWorld(t)
	bothNodes(w)
	w.cfg.Proxmox.Templates["debian13"] = config.Template{Nodes: map[string]int{"pve1": 9000}}

	w.check()

	assert.Regexp(t, `msg="node checked".*node=pve2 healthy=true`, w.log.String())
	assert.Regexp(t, `msg="node checked".*node=pve1 healthy=true`, w.log.String())
}
