package simserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

// conformanceStep is one call of a scenario; it returns the call's result (nil for none) and error.
type conformanceStep struct {
	name string
	call func(ctx context.Context, api pve.API) (any, error)
	// after is how long the simulated clock moves on after the call.
	after time.Duration
}

// transcript runs the steps and writes down, per step, the result as JSON or the error's class.
func transcript(t *testing.T, api pve.API, clock *pvesim.ManualClock, steps []conformanceStep) []string {
	t.Helper()
	var out []string
	for _, s := range steps {
		res, err := s.call(t.Context(), api)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: error %s", s.name, pve.Classify(err)))
		} else {
			data, merr := json.Marshal(res)
			require.NoError(t, merr)
			out = append(out, fmt.Sprintf("%s: %s", s.name, data))
		}
		clock.Advance(s.after)
	}
	return out
}

// TestConformance_modelAndRESTServerAgree runs one scenario through the model directly and
// through the real client against the REST server serving an identical model, and requires the
// same results and the same error classes for every seam method.
func TestConformance_modelAndRESTServerAgree(t *testing.T) {
	const (
		node = "pve1"
		vmid = 123456
		iso  = "local:iso/conformance-seed.iso"
	)
	seed := bytes.Repeat([]byte("cidata"), 100)
	upids := map[string]pve.UPID{} // the scenario's tasks, by step, for the steps that poll them
	task := func(name string, start func(ctx context.Context, api pve.API) (pve.UPID, error)) func(context.Context, pve.API) (any, error) {
		return func(ctx context.Context, api pve.API) (any, error) {
			upid, err := start(ctx, api)
			upids[name] = upid
			return upid, err
		}
	}
	status := func(name string) func(context.Context, pve.API) (any, error) {
		return func(ctx context.Context, api pve.API) (any, error) {
			return api.TaskStatus(ctx, node, upids[name])
		}
	}
	steps := []conformanceStep{
		{"version", func(ctx context.Context, api pve.API) (any, error) { return api.Version(ctx) }, 0},
		{"node status", func(ctx context.Context, api pve.API) (any, error) { return api.NodeStatus(ctx, node) }, 0},
		{"unknown node", func(ctx context.Context, api pve.API) (any, error) { return api.NodeStatus(ctx, "pve9") }, 0},
		{"storage status", func(ctx context.Context, api pve.API) (any, error) { return api.StorageStatus(ctx, node, "local") }, 0},
		{"unknown storage", func(ctx context.Context, api pve.API) (any, error) { return api.StorageStatus(ctx, node, "nope") }, 0},
		{"resources", func(ctx context.Context, api pve.API) (any, error) { return api.ClusterResources(ctx) }, 0},
		{"template config", func(ctx context.Context, api pve.API) (any, error) { return api.VMConfig(ctx, node, 9000) }, 0},
		{"missing VM config", func(ctx context.Context, api pve.API) (any, error) { return api.VMConfig(ctx, node, 999) }, 0},
		{"clone", task("clone", func(ctx context.Context, api pve.API) (pve.UPID, error) {
			return api.Clone(ctx, node, 9000, pve.CloneParams{NewID: vmid, Name: "proxy-conformance", Description: "proxy-operator-managed=true", Full: true})
		}), 10 * time.Millisecond},
		{"clone onto a used VMID", func(ctx context.Context, api pve.API) (any, error) {
			return api.Clone(ctx, node, 9000, pve.CloneParams{NewID: vmid, Full: true})
		}, 0},
		{"config while cloning", func(ctx context.Context, api pve.API) (any, error) {
			return nil, api.SetVMConfig(ctx, node, vmid, pve.VMConfig{"cores": "4"})
		}, 0},
		{"clone running", status("clone"), time.Minute},
		{"clone done", status("clone"), 0},
		{"clone config", func(ctx context.Context, api pve.API) (any, error) { return api.VMConfig(ctx, node, vmid) }, 0},
		{"set config", func(ctx context.Context, api pve.API) (any, error) {
			return nil, api.SetVMConfig(ctx, node, vmid, pve.VMConfig{"cores": "4", "memory": "4096", "agent": "1", "tags": "Proxy_Operator,b"})
		}, 0},
		{"bad config", func(ctx context.Context, api pve.API) (any, error) {
			return nil, api.SetVMConfig(ctx, node, vmid, pve.VMConfig{"cores": "0"})
		}, 0},
		{"resize", task("resize", func(ctx context.Context, api pve.API) (pve.UPID, error) {
			return api.Resize(ctx, node, vmid, "scsi0", "10G")
		}), time.Minute},
		{"resize done", status("resize"), 0},
		{"upload", task("upload", func(ctx context.Context, api pve.API) (pve.UPID, error) {
			return api.UploadISO(ctx, node, "local", "conformance-seed.iso", bytes.NewReader(seed), int64(len(seed)))
		}), time.Minute},
		{"upload done", status("upload"), 0},
		{"upload with a bad name", func(ctx context.Context, api pve.API) (any, error) {
			return api.UploadISO(ctx, node, "local", "seed.txt", bytes.NewReader(seed), int64(len(seed)))
		}, 0},
		{"agent of a stopped VM", func(ctx context.Context, api pve.API) (any, error) {
			return api.AgentNetworkInterfaces(ctx, node, vmid)
		}, 0},
		{"start", task("start", func(ctx context.Context, api pve.API) (pve.UPID, error) { return api.Start(ctx, node, vmid) }), 0},
		{"start running", status("start"), time.Minute},
		{"start done", status("start"), 0},
		{"status running", func(ctx context.Context, api pve.API) (any, error) { return api.VMStatus(ctx, node, vmid) }, 0},
		{"agent booting", func(ctx context.Context, api pve.API) (any, error) {
			return api.AgentNetworkInterfaces(ctx, node, vmid)
		}, time.Minute},
		{"agent", func(ctx context.Context, api pve.API) (any, error) {
			return api.AgentNetworkInterfaces(ctx, node, vmid)
		}, 0},
		{"cloud-init running", func(ctx context.Context, api pve.API) (any, error) {
			return api.AgentFileRead(ctx, node, vmid, pvesim.CloudInitResultPath)
		}, time.Minute},
		{"cloud-init done", func(ctx context.Context, api pve.API) (any, error) {
			return api.AgentFileRead(ctx, node, vmid, pvesim.CloudInitResultPath)
		}, 0},
		{"a file the guest does not have", func(ctx context.Context, api pve.API) (any, error) {
			return api.AgentFileRead(ctx, node, vmid, "/etc/nope")
		}, 0},
		{"reboot", task("reboot", func(ctx context.Context, api pve.API) (pve.UPID, error) { return api.Reboot(ctx, node, vmid) }), 0},
		{"reboot running", status("reboot"), time.Minute},
		{"reboot done", status("reboot"), 0},
		{"agent after the reboot", func(ctx context.Context, api pve.API) (any, error) {
			return api.AgentNetworkInterfaces(ctx, node, vmid)
		}, time.Minute},
		{"agent back", func(ctx context.Context, api pve.API) (any, error) {
			return api.AgentNetworkInterfaces(ctx, node, vmid)
		}, 0},
		{"migrate running without online", func(ctx context.Context, api pve.API) (any, error) {
			return api.Migrate(ctx, node, vmid, pve.MigrateParams{Target: "pve2", WithLocalDisks: true})
		}, 0},
		{"migrate to its own node", func(ctx context.Context, api pve.API) (any, error) {
			return api.Migrate(ctx, node, vmid, pve.MigrateParams{Target: node, Online: true})
		}, 0},
		{"migrate with the seed on local storage", task("migrate", func(ctx context.Context, api pve.API) (pve.UPID, error) {
			return api.Migrate(ctx, node, vmid, pve.MigrateParams{Target: "pve2", Online: true, WithLocalDisks: true})
		}), time.Minute},
		{"migration aborted", status("migrate"), 0},
		{"HA status", func(ctx context.Context, api pve.API) (any, error) { return api.HAManagerStatus(ctx) }, 0},
		{"SDN vnets", func(ctx context.Context, api pve.API) (any, error) { return api.SDNVnets(ctx) }, 0},
		{"clone tasks", func(ctx context.Context, api pve.API) (any, error) {
			return api.NodeTasks(ctx, node, pve.TaskListParams{Source: "all", TypeFilter: "qmclone"})
		}, 0},
		{"add HA resource", func(ctx context.Context, api pve.API) (any, error) {
			return nil, api.AddHAResource(ctx, pve.HAResourceParams{SID: "vm:123456", State: "started"})
		}, 0},
		{"add it again", func(ctx context.Context, api pve.API) (any, error) {
			return nil, api.AddHAResource(ctx, pve.HAResourceParams{SID: "vm:123456"})
		}, 0},
		{"remove HA resource", func(ctx context.Context, api pve.API) (any, error) {
			return nil, api.DeleteHAResource(ctx, "vm:123456")
		}, 0},
		{"remove it again", func(ctx context.Context, api pve.API) (any, error) {
			return nil, api.DeleteHAResource(ctx, "vm:123456")
		}, 0},
		{"destroy running", func(ctx context.Context, api pve.API) (any, error) { return api.Destroy(ctx, node, vmid) }, 0},
		{"stop", task("stop", func(ctx context.Context, api pve.API) (pve.UPID, error) { return api.Stop(ctx, node, vmid) }), time.Minute},
		{"stop done", status("stop"), 0},
		{"reboot stopped", func(ctx context.Context, api pve.API) (any, error) { return api.Reboot(ctx, node, vmid) }, 0},
		{"destroy", task("destroy", func(ctx context.Context, api pve.API) (pve.UPID, error) { return api.Destroy(ctx, node, vmid) }), time.Minute},
		{"destroy done", status("destroy"), 0},
		{"destroy log", func(ctx context.Context, api pve.API) (any, error) { return api.TaskLog(ctx, node, upids["destroy"]) }, 0},
		{"log of an unknown task", func(ctx context.Context, api pve.API) (any, error) {
			return api.TaskLog(ctx, node, "UPID:pve1:00001234:00000001:6B005320:qmstart:1:root@pam:")
		}, 0},
		{"permissions", func(ctx context.Context, api pve.API) (any, error) { return api.Permissions(ctx, "/vms/9000") }, 0},
		{"status of a destroyed VM", func(ctx context.Context, api pve.API) (any, error) { return api.VMStatus(ctx, node, vmid) }, 0},
		{"ISOs", func(ctx context.Context, api pve.API) (any, error) {
			return api.StorageContent(ctx, node, "local", "iso")
		}, 0},
		{"disk images", func(ctx context.Context, api pve.API) (any, error) {
			return api.StorageContent(ctx, node, "local-lvm", "images")
		}, 0},
		{"content of an unknown storage", func(ctx context.Context, api pve.API) (any, error) {
			return api.StorageContent(ctx, node, "nope", "")
		}, 0},
		{"delete ISO", task("delete", func(ctx context.Context, api pve.API) (pve.UPID, error) {
			return api.DeleteVolume(ctx, node, "local", iso)
		}), time.Minute},
		{"delete ISO done", status("delete"), 0},
		{"delete a missing ISO", task("delete missing", func(ctx context.Context, api pve.API) (pve.UPID, error) {
			return api.DeleteVolume(ctx, node, "local", iso)
		}), time.Minute},
		{"delete of a missing ISO done", status("delete missing"), 0},
	}
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	newCluster := func() (*pvesim.Cluster, *pvesim.ManualClock) {
		clock := pvesim.NewManualClock(start)
		opts := pvesim.Default()
		opts.Clock = clock
		opts.AgentBootDelay = 90 * time.Second
		opts.CloudInitDuration = 45 * time.Second
		return pvesim.New(opts), clock
	}

	direct, directClock := newCluster()
	want := transcript(t, direct, directClock, steps)
	served, servedClock := newCluster()
	got := transcript(t, realClient(t, startServer(t, served)), servedClock, steps)

	assert.Equal(t, want, got)
	methods := map[string]bool{}
	for _, c := range direct.Calls() {
		methods[c.Method] = true
	}
	assert.Len(t, methods, reflect.TypeFor[pve.API]().NumMethod(), "the scenario calls every seam method: %v", methods)
}
