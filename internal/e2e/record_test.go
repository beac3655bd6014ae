//go:build record

// Recording the histories that TestReplay_recordedHistories replays: `make histories`. A
// scenario whose file exists is skipped. A change that breaks the replay of a short workflow's
// history (they run pinned to their build) deletes the files of the scenarios it changes and
// records them again in the same commit; a change to the auto-upgrading workflows (Proxy,
// Rollout, CloneAdmission) keeps their old histories, as their runs move to the new code
// (docs/architecture.md, "Changing a workflow"). The operations' histories are those of the
// entity's children that served the scenario's requests.

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/addresspool"
	"github.com/pveflow/pveflow/workflows/callshares"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

func TestRecordHistories(t *testing.T) {
	scenarios := []struct {
		name    string
		cluster func(*pvesim.Options)
		config  func(*config.Config)
		run     func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun
	}{
		{name: "create-clean", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			return created(t, s, createInput(uid))
		}},
		{name: "create-vmid-collision", run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			require.NoError(t, c.AddVM(pvesim.VM{Node: "pve2", VMID: proxy.VMIDFor(uid, s.cfg.Proxmox.VMIDRange, 0), Config: pve.VMConfig{"name": "someone-else"}}))
			return created(t, s, createInput(uid))
		}},
		{name: "create-resumed-over-locked-clone", run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			cloneOntoHome(t, s, c, uid)
			return created(t, s, createInput(uid))
		}},
		{name: "create-clone-budget-exhausted",
			cluster: func(o *pvesim.Options) { o.StallClones = true },
			config:  func(c *config.Config) { c.Budgets.Clone = 3 * time.Second },
			run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
				_, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
				require.Error(t, err)
				return s.operation(uid, proxyvm.OpCreate)
			}},
		{name: "delete-running-vm", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			created(t, s, createInput(uid))
			return deleted(t, s, uid)
		}},
		{name: "delete-absent-vm", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			return deleted(t, s, uid)
		}},
		{name: "create-moves-on-from-foreign-clone", cluster: func(o *pvesim.Options) {
			o.VMs = []pvesim.VM{pvesim.Template(9000, "pve1", 1)}
			o.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Second}
		}, run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			// Another proxy's clone is still copying onto this proxy's home VMID, and shows
			// its mark only when it ends.
			cloneOntoHome(t, s, c, otherUID)
			return created(t, s, createInput(uid))
		}},
		{name: "delete-orphan-clone", cluster: func(o *pvesim.Options) {
			o.VMs = []pvesim.VM{pvesim.Template(9000, "pve1", 1)}
			o.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Second}
		}, run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			// A clone of this proxy still copies, under PVE's temporary config, and no create runs.
			cloneOntoHome(t, s, c, uid)
			return deleted(t, s, uid)
		}},
		{name: "create-waits-for-delete", cluster: func(o *pvesim.Options) {
			o.TaskDurations = map[string]time.Duration{"qmclone": 2 * time.Second, "qmdestroy": 3 * time.Second}
		}, run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			// The entity holds the create request back until the delete has closed.
			created(t, s, createInput(uid))
			del := s.startDelete(proxyvm.DeleteProxyInput{UID: uid})
			eventually(t, "the delete destroys the VM", func() bool { return c.CallCount("Destroy") > 0 })
			create := s.startCreate(createInput(uid))
			serve[proxyvm.DeleteProxyResult](t, del)
			writeHistory(t, s, "create-waits-for-delete.delete", s.operation(uid, proxyvm.OpDelete))
			serve[proxyvm.CreateProxyResult](t, create)
			return s.operation(uid, proxyvm.OpCreate)
		}},
		{name: "create-waits-out-template-backup", run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			require.NoError(t, c.HoldLock(9000, "backup", 3*time.Second))
			return created(t, s, createInput(uid))
		}},
		{name: "create-clones-again-after-storage-lock", run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			c.FailTask("qmclone", "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout")
			return created(t, s, createInput(uid))
		}},
		{name: "create-placed-by-capacity",
			cluster: func(o *pvesim.Options) {
				o.VMs = append(o.VMs, pvesim.Template(9001, "pve2", 2), pvesim.VM{Node: "pve1", VMID: 4000, Running: true,
					Config: pve.VMConfig{"name": "someone-elses-database", "memory": "32768"}})
			},
			config: func(c *config.Config) {
				c.Proxmox.Nodes = []string{"pve1", "pve2"}
				c.Proxmox.Templates["debian13"] = config.Template{Nodes: map[string]int{"pve1": 9000, "pve2": 9001}}
			},
			run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
				return created(t, s, createInput(uid))
			}},
		{name: "create-queued-for-clone-lease",
			cluster: func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Second} },
			config:  func(c *config.Config) { c.Clones.PerStorage = 1 },
			run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
				first := s.startCreate(createInput(otherUID))
				eventually(t, "the first create clones", func() bool { return c.CallCount("Clone") > 0 })
				queued := created(t, s, createInput(uid))
				serve[proxyvm.CreateProxyResult](t, first)
				return queued
			}},
		// The admission as it runs now: grants; a create stopped by a delete while it clones,
		// whose lease covers the clone until it ends; a terminated create's lease reclaimed; and,
		// idle, a cancel that closes it.
		{name: "clone-admission",
			cluster: func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 3 * time.Second} },
			config:  func(c *config.Config) { c.Clones.PerStorage = 1 },
			run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
				first := s.startCreate(createInput(otherUID))
				eventually(t, "the first create clones", func() bool { return c.CallCount("TaskStatus") > 0 })
				second, third := s.startCreate(createInput(uid)), s.startCreate(createInput(thirdUID))
				admission := admissionOfHome(s)
				eventually(t, "two creates queue", func() bool { return len(admissionState(t, s, admission).Waiting) == 2 })
				serve[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: otherUID}))
				_, err := served[proxyvm.CreateProxyResult](t, first)
				require.Error(t, err)
				eventually(t, "the second create holds the lease", func() bool {
					st := admissionState(t, s, admission)
					return len(st.Holders) == 1 && st.Holders[0].WorkflowID == core.ProxyWorkflowID(uid)+"/create"
				})
				holder := s.operation(uid, proxyvm.OpCreate)
				require.NoError(t, s.client.TerminateWorkflow(context.Background(), holder.GetID(), holder.GetRunID(), "a person stops the create"))
				_, err = served[proxyvm.CreateProxyResult](t, second)
				require.Error(t, err)
				serve[proxyvm.CreateProxyResult](t, third)
				eventually(t, "the admission is idle", func() bool {
					st := admissionState(t, s, admission)
					return len(st.Holders)+len(st.Waiting)+len(st.Covered) == 0
				})
				require.NoError(t, s.client.CancelWorkflow(context.Background(), admission.GetID(), ""))
				require.ErrorAs(t, admission.Get(context.Background(), nil), new(*temporal.CanceledError))
				return admission
			}},
		{name: "clone-admission-continued-as-new",
			config: func(c *config.Config) {
				c.Clones.PerStorage = 2
				c.Clones.HistoryEvents = 100
			},
			run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
				var reqs []*starter.Request
				for i := range 12 {
					reqs = append(reqs, s.startCreate(createInput(fmt.Sprintf("admission-uid-%02d", i))))
				}
				admission := admissionOfHome(s)
				eventually(t, "the admission runs", func() bool { return len(admissionState(t, s, admission).Holders) > 0 })
				desc, err := s.client.DescribeWorkflowExecution(context.Background(), admission.GetID(), "")
				require.NoError(t, err)
				firstRun := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
				for _, r := range reqs {
					serve[proxyvm.CreateProxyResult](t, r)
				}
				run := s.client.GetWorkflow(context.Background(), admission.GetID(), firstRun)
				require.ErrorAs(t, run.GetWithOptions(context.Background(), nil, client.WorkflowRunGetOptions{DisableFollowingRuns: true}), new(*workflow.ContinueAsNewError))
				return run
			}},
		{name: "address-pool-continued-as-new", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			// Allocations and frees until the pool continues as new: its first run is the shape
			// a later build's pool (an auto-upgrading workflow) must replay.
			ctx := context.Background()
			first, err := s.client.ExecuteWorkflow(ctx, addresspool.AddressPoolOptions(core.DefaultTaskQueue, "egress"), addresspool.AddressPoolName,
				addresspool.AddressPoolState{Pool: "egress", HistoryEvents: 40})
			require.NoError(t, err)
			pools := starter.AddressPools{Client: s.starter}
			for i := 0; ; i++ {
				req := activities.AddressRequest{TaskQueue: core.DefaultTaskQueue, Pool: "egress", UID: fmt.Sprintf("pool-%03d", i), Range: poolOf200}
				_, err := pools.Allocate(ctx, req)
				require.NoError(t, err)
				if i%3 == 2 {
					_, err := pools.Free(ctx, req)
					require.NoError(t, err)
				}
				desc, err := s.client.DescribeWorkflowExecution(ctx, first.GetID(), "")
				require.NoError(t, err)
				if desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() != first.GetRunID() {
					return s.client.GetWorkflow(ctx, first.GetID(), first.GetRunID())
				}
			}
		}},
		{name: "call-shares-continued-as-new", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			// Two workers renew their shares until the cap continues as new: its first run is
			// the shape a later build's (an auto-upgrading workflow) must replay.
			ctx := context.Background()
			first, err := s.client.ExecuteWorkflow(ctx, callshares.CallSharesOptions(core.DefaultTaskQueue), callshares.CallSharesName,
				callshares.CallSharesState{HistoryEvents: 40})
			require.NoError(t, err)
			using := map[string]callshares.CallShareGrant{}
			for i := 0; ; i++ {
				worker := fmt.Sprintf("worker-%d", i%2)
				handle, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
					WorkflowID: first.GetID(), UpdateName: callshares.RenewCallShareUpdate, WaitForStage: client.WorkflowUpdateStageCompleted,
					Args: []any{callshares.CallShareRequest{Worker: worker, Cap: config.Default().Proxmox.Calls, Using: using[worker], Lease: 20 * time.Second, Drain: 30 * time.Second}},
				})
				require.NoError(t, err)
				var g callshares.CallShareGrant
				require.NoError(t, handle.Get(ctx, &g))
				using[worker] = g
				desc, err := s.client.DescribeWorkflowExecution(ctx, first.GetID(), "")
				require.NoError(t, err)
				if desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() != first.GetRunID() {
					return s.client.GetWorkflow(ctx, first.GetID(), first.GetRunID())
				}
			}
		}},
		{name: "create-from-address-pool", config: withPoolAndNICs, run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			in := createInput(uid)
			in.AddressPool = "egress"
			return created(t, s, in)
		}},
		{name: "delete-frees-addresses", config: withPoolAndNICs, run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			in := createInput(uid)
			in.AddressPool = "egress"
			created(t, s, in)
			return deleted(t, s, uid)
		}},
		{name: "delete-stops-running-create", cluster: func(o *pvesim.Options) {
			o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second}
		}, run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			create := s.startCreate(createInput(uid))
			eventually(t, "the create polls its clone", func() bool { return c.CallCount("TaskStatus") > 0 })
			del := deleted(t, s, uid)
			_, err := served[proxyvm.CreateProxyResult](t, create)
			require.Error(t, err)
			writeHistory(t, s, "delete-stops-running-create.create", s.operation(uid, proxyvm.OpCreate))
			return del
		}},
		{name: "create-waits-for-cloud-init", config: waitingForCloudInit, cluster: func(o *pvesim.Options) {
			o.CloudInitDuration = 3 * time.Second // looked at more than once
		}, run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			return created(t, s, createInput(uid))
		}},
		{name: "create-resumed-after-wait-out-of-budget",
			cluster: func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second} },
			config:  func(c *config.Config) { c.Budgets.Clone = 2 * time.Second },
			run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
				// The clone outlasts its budget: the first create fails Transient, and the one
				// the request sent again runs resumes on the VM the first cloned.
				_, err := served[proxyvm.CreateProxyResult](t, s.startCreate(createInput(uid)))
				require.Error(t, err)
				eventually(t, "the clone ends", func() bool {
					runs := c.CloneRuns()
					return len(runs) == 1 && !runs[0].End.IsZero()
				})
				return created(t, s, createInput(uid))
			}},
		{name: "get-running-proxy", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			created(t, s, createInput(uid))
			return mustSucceed[proxyvm.GetProxyResult](t, startRead(t, s, core.GetProxyWorkflowID(uid, "record"), core.GetProxyName, proxyvm.GetProxyInput{UID: uid}))
		}},
		{name: "get-absent-proxy", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			run := startRead(t, s, core.GetProxyWorkflowID(uid, "record"), core.GetProxyName, proxyvm.GetProxyInput{UID: uid})
			got, err := result[proxyvm.GetProxyResult](t, run)
			require.NoError(t, err, "a read that finds nothing completes")
			require.NotEmpty(t, got.NotFound)
			return run
		}},
		{name: "list-proxies", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			created(t, s, createInput(uid))
			return mustSucceed[reads.ListProxiesResult](t, startRead(t, s, core.ListProxiesWorkflowID("record"), core.ListProxiesName))
		}},
		{name: "check-health", config: func(c *config.Config) {
			c.Proxmox.Nodes = []string{"pve1", "pve2"}
		}, run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			return mustSucceed[reads.CheckHealthResult](t, startRead(t, s, core.CheckHealthWorkflowID("record"), core.CheckHealthName))
		}},
		{name: "collect-garbage", run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			// The proxy of uid is not kept: its VM goes by a delete request to its entity
			// (RequestDelete); the orphan ISO goes with DeleteVolume.
			created(t, s, createInput(uid))
			uploadOrphanISO(t, c, "a-proxy-long-gone")
			in := fleet.CollectGarbageInput{Keep: []string{otherUID}, Grace: time.Millisecond}
			return mustSucceed[fleet.CollectGarbageResult](t, s.startGC("record", in))
		}},
		{name: "change-machine-type", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			created(t, s, createInput(uid))
			serve[proxyvm.ChangeProxyResult](t, s.startChange(proxyvm.ChangeRequest{UID: uid, MachineType: "large"}))
			return s.operation(uid, proxyvm.OpChange)
		}},
		{name: "change-user-data", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			created(t, s, createInput(uid))
			userData := "#cloud-config\nhostname: changed\n"
			serve[proxyvm.ChangeProxyResult](t, s.startChange(proxyvm.ChangeRequest{UID: uid, UserData: &userData}))
			return s.operation(uid, proxyvm.OpChange)
		}},
		{name: "rollout", run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			created(t, s, createInput(uid))
			created(t, s, createInput(otherUID))
			id, err := s.starter.Rollout(context.Background(), starter.RolloutOptions{UIDs: []string{uid, otherUID}, MachineType: "large", MaxUnavailable: 1})
			require.NoError(t, err)
			return mustSucceed[fleet.RolloutStatus](t, s.client.GetWorkflow(context.Background(), id, ""))
		}},
		{name: "proxy-lifecycle", config: closingSoon, run: func(t *testing.T, s *stack, _ *pvesim.Cluster) client.WorkflowRun {
			created(t, s, createInput(uid))
			serve[proxyvm.ChangeProxyResult](t, s.startChange(proxyvm.ChangeRequest{UID: uid, MachineType: "large"}))
			deleted(t, s, uid)
			return closedEntity(t, s, uid)
		}},
		{name: "observer-wakes-entity", config: func(c *config.Config) {
			c.Entity.CheckInterval, c.Entity.CheckJitter, c.Entity.BackstopInterval = time.Second, 0, time.Hour
		}, run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			created(t, s, createInput(uid))
			observer := core.ObserverWorkflowID(core.DefaultTaskQueue)
			eventually(t, "the observer lists the proxy's VM", func() bool {
				val, err := s.client.QueryWorkflow(context.Background(), observer, "", core.ObserverQuery)
				var st fleet.ObserverStatus
				return err == nil && val.Get(&st) == nil && st.Watching == 1 && st.Listings > 0
			})
			vm := markedVM(t, c, uid)
			_, err := c.Stop(context.Background(), vm.Node, vm.VMID)
			require.NoError(t, err)
			eventually(t, "the woken entity heals the VM", func() bool {
				ops := s.proxyStatus(uid).Operations
				return len(ops) == 2 && ops[1].Outcome == "completed"
			})
			require.NoError(t, s.client.CancelWorkflow(context.Background(), observer, ""))
			run := s.client.GetWorkflow(context.Background(), observer, "")
			_, err = result[struct{}](t, run)
			require.True(t, temporal.IsCanceledError(err), "%v", err)
			return run
		}},
		{name: "proxy-delete-supersedes-create", config: closingSoon, cluster: func(o *pvesim.Options) {
			o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second}
		}, run: func(t *testing.T, s *stack, c *pvesim.Cluster) client.WorkflowRun {
			create := s.startCreate(createInput(uid))
			eventually(t, "the create polls its clone", func() bool { return c.CallCount("TaskStatus") > 0 })
			deleted(t, s, uid)
			_, err := served[proxyvm.CreateProxyResult](t, create)
			require.Equal(t, starter.FailSuperseded, starter.FailureType(err), "%v", err)
			return closedEntity(t, s, uid)
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if _, err := os.Stat(historyFile(sc.name)); err == nil {
				t.Logf("kept %s: a recorded history is never recorded again", historyFile(sc.name))
				return
			}
			opts := pvesim.Default()
			opts.TaskDurations = map[string]time.Duration{"qmclone": 2 * time.Second}
			opts.AgentBootDelay = time.Second
			if sc.cluster != nil {
				sc.cluster(&opts)
			}
			cluster := pvesim.New(opts)
			cfg := fastConfig(t)
			if sc.config != nil {
				sc.config(&cfg)
			}
			s := startStack(t, cluster, cfg)
			writeHistory(t, s, sc.name, sc.run(t, s, cluster))
		})
	}
}

// historiesDir is where the replay test in package workflows finds the histories.
var historiesDir = filepath.Join("..", "..", "testdata", "histories")

// cloneOntoHome starts a clone onto the home VMID of uid, as a create of owner would make it:
// with owner's name and mark. It goes on copying for the cluster's clone duration.
func cloneOntoHome(t *testing.T, s *stack, c *pvesim.Cluster, owner string) {
	t.Helper()
	_, err := c.Clone(context.Background(), "pve1", 9000, pve.CloneParams{
		NewID: proxy.VMIDFor(uid, s.cfg.Proxmox.VMIDRange, 0), Name: proxy.NameFromUID(owner), Full: true,
		Description: proxy.FormatDescription(proxy.Mark{UID: owner, CreatedAt: time.Now().UTC().Truncate(time.Second)}),
	})
	require.NoError(t, err)
}

// startRead starts a read workflow as the starter does.
func startRead(t *testing.T, s *stack, id, workflowType string, args ...any) client.WorkflowRun {
	t.Helper()
	run, err := s.client.ExecuteWorkflow(context.Background(), core.ReadOptions(id, core.DefaultTaskQueue), workflowType, args...)
	require.NoError(t, err)
	return run
}

// created requests the proxy of in and returns the run of the CreateProxy that served it.
func created(t *testing.T, s *stack, in proxyvm.ProxySpec) client.WorkflowRun {
	t.Helper()
	serve[proxyvm.CreateProxyResult](t, s.startCreate(in))
	return s.operation(in.UID, proxyvm.OpCreate)
}

// deleted requests the deletion of the proxy of uid and returns the run of the DeleteProxy
// that served it.
func deleted(t *testing.T, s *stack, uid string) client.WorkflowRun {
	t.Helper()
	serve[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))
	return s.operation(uid, proxyvm.OpDelete)
}

// withPoolAndNICs configures the address pool egress, a second NIC on a VLAN for the machine
// type, and HA: what a create and a delete do for them is in their histories.
func withPoolAndNICs(c *config.Config) {
	c.Proxmox.AddressPools = map[string]config.AddressPool{"egress": poolOf200}
	c.Proxmox.Nameservers = []string{"192.0.2.53"}
	c.Proxmox.HA = config.HA{Enabled: true, State: "started"}
	for name, mt := range c.Proxmox.MachineTypes {
		mt.NICs = []config.NIC{{}, {Bridge: "vmbr1", VLAN: 20}}
		c.Proxmox.MachineTypes[name] = mt
	}
}

// waitingForCloudInit has every machine type wait for cloud-init to finish.
func waitingForCloudInit(c *config.Config) {
	for name, mt := range c.Proxmox.MachineTypes {
		mt.Readiness = config.ReadinessCloudInit
		c.Proxmox.MachineTypes[name] = mt
	}
}

// closingSoon makes an entity close a few seconds after its proxy became absent, so that its
// history ends.
func closingSoon(c *config.Config) { c.Entity.CloseAfter = 3 * time.Second }

// closedEntity waits for the entity of uid to close and returns its last run.
func closedEntity(t *testing.T, s *stack, uid string) client.WorkflowRun {
	t.Helper()
	id := core.ProxyWorkflowID(uid)
	mustSucceed[proxyvm.ProxyStatus](t, s.client.GetWorkflow(context.Background(), id, ""))
	desc, err := s.client.DescribeWorkflowExecution(context.Background(), id, "")
	require.NoError(t, err)
	return s.client.GetWorkflow(context.Background(), id, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
}

func mustSucceed[T any](t *testing.T, run client.WorkflowRun) client.WorkflowRun {
	t.Helper()
	_, err := result[T](t, run)
	require.NoError(t, err)
	return run
}

// writeHistory exports a closed run's history as testdata/histories/<name>.json.
func writeHistory(t *testing.T, s *stack, name string, run client.WorkflowRun) {
	t.Helper()
	iter := s.client.GetWorkflowHistory(context.Background(), run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var h historypb.History
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, ev)
	}
	data, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(&h)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(historiesDir, 0o755))
	require.NoError(t, os.WriteFile(historyFile(name), append(data, '\n'), 0o644))
}

func historyFile(name string) string { return filepath.Join(historiesDir, name+".json") }
