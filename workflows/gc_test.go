package workflows_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

// thirdUID is a proxy's beside uid's and otherUID's.
const thirdUID = "3c9a1b2d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"

func (w *world) collect(in fleet.CollectGarbageInput) (fleet.CollectGarbageResult, error) {
	return w.collectIn(w.env(), in)
}

func (w *world) collectIn(env *testsuite.TestWorkflowEnvironment, in fleet.CollectGarbageInput) (fleet.CollectGarbageResult, error) {
	env.ExecuteWorkflow(core.CollectGarbageName, in)
	require.True(w.t, env.IsWorkflowCompleted())
	var res fleet.CollectGarbageResult
	if err := env.GetWorkflowError(); err != nil {
		return res, err
	}
	require.NoError(w.t, env.GetWorkflowResult(&res))
	return res, nil
}

// orphanISO uploads a seed ISO named after a UID that has no VM, and lets the upload end.
func (w *world) orphanISO(orphanUID string) string {
	w.t.Helper()
	const data = "CD001 seed"
	_, err := w.cluster.UploadISO(w.t.Context(), "pve1", "local", proxy.SeedISOName(proxy.NameFromUID(orphanUID)), strings.NewReader(data), int64(len(data)))
	require.NoError(w.t, err)
	w.advance(time.Minute)
	volid := proxy.SeedVolID("local", proxy.NameFromUID(orphanUID))
	require.Contains(w.t, w.isos(), volid)
	return volid
}

// vmids are the VMIDs of the cluster's VMs other than templates.
func (w *world) vmids() []int {
	var ids []int
	for _, v := range w.vms() {
		ids = append(ids, v.VMID)
	}
	return ids
}

func TestCollectGarbage_deletesOrphanVMAndLeavesKeptOne(t *testing.T) {
	w := newWorld(t)
	kept, orphan := proxyVM(w, uid, true), proxyVM(w, otherUID, true)
	w.add(kept, orphan)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbageVM{{UID: otherUID, VMID: orphan.VMID, Node: "pve1", Name: proxy.NameFromUID(otherUID), Outcome: reads.GarbageDeleted}}, res.VMs)
	require.Len(t, w.proxies.deleted(), 1, "the kept one's entity is never asked")
	assert.Equal(t, otherUID, w.proxies.deleted()[0].UID)
	assert.Equal(t, "default-test-workflow-id/"+otherUID, w.proxies.deleted()[0].RequestID)
	assert.Zero(t, w.cluster.CallCount("Destroy"), "the entity's DeleteProxy destroys it, not the collection")
	assert.Equal(t, []int{kept.VMID}, slices.DeleteFunc(w.vmids(), func(id int) bool { return id == orphan.VMID }))
}

func TestCollectGarbage_asksEachOrphanUIDOnce(t *testing.T) {
	w := newWorld(t)
	first, second := proxyVM(w, otherUID, true), proxyVM(w, thirdUID, false)
	w.add(first, second)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	var asked []string
	for _, d := range w.proxies.deleted() {
		asked = append(asked, d.UID)
	}
	assert.ElementsMatch(t, []string{otherUID, thirdUID}, asked)
	require.Len(t, res.VMs, 2)
	for _, v := range res.VMs {
		assert.Equal(t, reads.GarbageDeleted, v.Outcome, v.UID)
	}
}

// createdWithSharedISOs is created on shared ISO storage, where the create keeps the seed ISO.
func createdWithSharedISOs(t *testing.T) (*world, proxyvm.CreateProxyResult) {
	t.Helper()
	w := newWorld(t, withSharedISOStorage)
	w.cfg.Proxmox.ISOStorage = "isos"
	res, err := w.create(createInput())
	require.NoError(t, err)
	return w, res
}

func TestCollectGarbage_createdProxyWithItsReleasedSeedLeavesNothingToTake(t *testing.T) {
	w, created := created(t)
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Empty(t, res.VMs)
	assert.Empty(t, res.ISOs)
	assert.Equal(t, []int{created.VMID}, w.vmids())
	assert.Equal(t, 1, w.cluster.CallCount("DeleteVolume"), "the create's, of the seed it released")
}

func TestCollectGarbage_createdProxyWithItsISOIsKept(t *testing.T) {
	w, created := createdWithSharedISOs(t)
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Empty(t, res.VMs)
	assert.Empty(t, res.ISOs, "the seed ISO has its VM")
	assert.Equal(t, []int{created.VMID}, w.vmids())
	assert.Len(t, w.isos(), 1)
	assert.Empty(t, w.proxies.deleted())
}

func TestCollectGarbage_orphanProxyGoesThroughItsEntityWhichTakesItsSeedISO(t *testing.T) {
	w, created := createdWithSharedISOs(t)
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{otherUID}})

	require.NoError(t, err)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, created.VMID, res.VMs[0].VMID)
	assert.Equal(t, reads.GarbageDeleted, res.VMs[0].Outcome)
	assert.Empty(t, res.ISOs, "not an orphan when listed: its VM existed, and its delete takes it")
	require.Len(t, w.proxies.deleted(), 1)
	assert.Equal(t, uid, w.proxies.deleted()[0].UID)
	assert.Zero(t, w.cluster.CallCount("DeleteVolume"))
}

func TestCollectGarbage_unmarkedOrForeignVMNeverTouched(t *testing.T) {
	w := newWorld(t)
	unmarked := proxyVM(w, otherUID, true)
	unmarked.Config["description"] = "made by hand"
	w.add(unmarked)

	res, err := w.collect(fleet.CollectGarbageInput{KeepNone: true})

	require.NoError(t, err)
	assert.Empty(t, res.VMs)
	assert.Equal(t, []int{unmarked.VMID}, w.vmids())
	assert.Empty(t, w.proxies.deleted())
}

func TestCollectGarbage_markWithoutUIDSkipped(t *testing.T) {
	w := newWorld(t)
	nameless := proxyVM(w, otherUID, true)
	nameless.Config["description"] = proxy.FormatDescription(proxy.Mark{CreatedAt: createdAt})
	w.add(nameless)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, reads.GarbageSkipped, res.VMs[0].Outcome)
	assert.Contains(t, res.VMs[0].Detail, "no UID")
	assert.Empty(t, w.proxies.deleted())
}

func TestCollectGarbage_vmYoungerThanGraceKept(t *testing.T) {
	w := newWorld(t)
	young := proxyVM(w, otherUID, true)
	young.Config["description"] = proxy.FormatDescription(proxy.Mark{UID: otherUID, CreatedAt: w.clock.Now().Add(-10 * time.Minute)})
	w.add(young)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Empty(t, res.VMs)
	assert.Equal(t, []int{young.VMID}, w.vmids())
	require.Len(t, res.YoungVMs, 1, "reported as kept for its age")
	assert.Equal(t, young.VMID, res.YoungVMs[0].VMID)
	assert.Equal(t, 10*time.Minute, res.YoungVMs[0].Age)
	assert.Equal(t, reads.GarbageSkipped, res.YoungVMs[0].Outcome)
	assert.Equal(t, reads.DefaultGrace, res.Grace)
	assert.Empty(t, w.proxies.deleted())
}

func TestCollectGarbage_orphanISO(t *testing.T) {
	tests := []struct {
		name    string
		age     time.Duration
		grace   time.Duration
		deleted bool
	}{
		{"within the default grace period", 10 * time.Minute, 0, false},
		{"past the default grace period", 2 * time.Hour, 0, true},
		{"past a shorter grace period", 10 * time.Minute, 5 * time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			volid := w.orphanISO(otherUID)
			w.advance(tt.age)

			res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}, Grace: tt.grace})

			require.NoError(t, err)
			if !tt.deleted {
				assert.Empty(t, res.ISOs)
				assert.Equal(t, []string{volid}, w.isos())
				require.Len(t, res.YoungISOs, 1, "reported as kept for its age")
				assert.Equal(t, volid, res.YoungISOs[0].VolID)
				assert.InDelta(t, tt.age, res.YoungISOs[0].Age, float64(2*time.Minute), "its age, from the upload's end")
				return
			}
			assert.Empty(t, res.YoungISOs)
			require.Len(t, res.ISOs, 1)
			assert.Equal(t, volid, res.ISOs[0].VolID)
			assert.Equal(t, reads.GarbageDeleted, res.ISOs[0].Outcome)
			assert.Empty(t, w.isos())
		})
	}
}

func TestCollectGarbage_otherISOsNeverTouched(t *testing.T) {
	w := newWorld(t)
	const data = "CD001"
	for _, name := range []string{"debian-13-netinst.iso", proxy.SeedISOName("my-own-name")} {
		_, err := w.cluster.UploadISO(t.Context(), "pve1", "local", name, strings.NewReader(data), int64(len(data)))
		require.NoError(t, err)
	}
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{KeepNone: true})

	require.NoError(t, err)
	assert.Empty(t, res.ISOs)
	assert.Len(t, w.isos(), 2)
}

func TestCollectGarbage_uidWithRunningCreateSkipped(t *testing.T) {
	w := newWorld(t)
	orphan := proxyVM(w, otherUID, true)
	w.add(orphan)
	env := w.env()
	w.runs.start(core.CreateWorkflowID(otherUID), w.clock.Now().Add(-time.Minute))

	res, err := w.collectIn(env, fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, reads.GarbageSkipped, res.VMs[0].Outcome)
	assert.Equal(t, core.CreateWorkflowID(otherUID)+" runs", res.VMs[0].Detail)
	assert.Empty(t, w.proxies.deleted())
}

func TestCollectGarbage_dryRunDeletesNothing(t *testing.T) {
	w := newWorld(t)
	orphan := proxyVM(w, otherUID, true)
	w.add(orphan)
	volid := w.orphanISO("a-uid-without-vm")
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}, DryRun: true})

	require.NoError(t, err)
	assert.True(t, res.DryRun)
	assert.Equal(t, []fleet.GarbageVM{{UID: otherUID, VMID: orphan.VMID, Node: "pve1", Name: proxy.NameFromUID(otherUID), Outcome: reads.GarbageFound}}, res.VMs)
	require.Len(t, res.ISOs, 1)
	assert.Equal(t, fleet.GarbageISO{VolID: volid, Node: "pve1", Storage: "local", CreatedAt: res.ISOs[0].CreatedAt, Outcome: reads.GarbageFound}, res.ISOs[0])
	assert.Equal(t, []int{orphan.VMID}, w.vmids())
	assert.Equal(t, []string{volid}, w.isos())
	assert.Zero(t, w.cluster.CallCount("DeleteVolume"))
	assert.Empty(t, w.proxies.deleted())
}

func TestCollectGarbage_listFailureFailsTheRunAndDeletesNothing(t *testing.T) {
	tests := map[string]string{
		"cluster resources": "ClusterResources",
		"ISO storage":       "StorageContent",
	}
	for name, method := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			w.add(proxyVM(w, otherUID, true))
			for range 2 {
				w.cluster.FailNext(method, &pve.APIError{Status: 596, Reason: "Connection timed out"})
			}

			_, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

			assert.Equal(t, core.FailTransient, failureType(t, err))
			assert.Empty(t, w.proxies.deleted())
		})
	}
}

func TestCollectGarbage_deleteTheEntityRefusesOrFailsIsReportedAndOthersGoOn(t *testing.T) {
	tests := map[string]error{
		"refused": temporal.NewApplicationError("proxy "+otherUID+": a change runs, and is not superseded by a delete", "*errors.errorString"),
		"failed": temporal.NewNonRetryableApplicationError("destroy VM 123456 on node pve1: Permission check failed (/vms/123456, VM.Allocate)",
			core.FailPermanent, nil),
	}
	for name, answer := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			orphan := proxyVM(w, otherUID, false)
			w.add(orphan)
			volid := w.orphanISO("a-uid-without-vm")
			w.advance(2 * reads.DefaultGrace)
			w.proxies.failDelete[otherUID] = answer

			res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

			require.NoError(t, err)
			assert.True(t, res.Failed())
			require.Len(t, res.VMs, 1)
			assert.Equal(t, reads.GarbageFailed, res.VMs[0].Outcome)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, answer, &appErr)
			assert.Equal(t, "delete of proxy "+otherUID+" (request default-test-workflow-id/"+otherUID+"): "+appErr.Message(), res.VMs[0].Detail)
			require.Len(t, res.ISOs, 1)
			assert.Equal(t, reads.GarbageDeleted, res.ISOs[0].Outcome)
			assert.NotContains(t, w.isos(), volid)
		})
	}
}

func TestCollectGarbage_vmTheDeleteLeftAloneSkipped(t *testing.T) {
	w := newWorld(t)
	orphan := proxyVM(w, otherUID, false)
	w.add(orphan)
	w.proxies.unmarked = []string{otherUID}

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, reads.GarbageSkipped, res.VMs[0].Outcome)
	assert.Equal(t, "the delete of proxy/"+otherUID+" left it alone: it no longer carries the mark of "+otherUID, res.VMs[0].Detail)
	assert.False(t, res.Failed())
}

func TestCollectGarbage_refusedInput(t *testing.T) {
	tests := map[string]fleet.CollectGarbageInput{
		"an empty kept set":       {},
		"a negative grace period": {Keep: []string{uid}, Grace: -time.Hour},
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			w.add(proxyVM(w, otherUID, true))

			_, err := w.collect(in)

			assert.Equal(t, core.FailPermanent, failureType(t, err))
			assert.Empty(t, w.cluster.Calls())
			assert.Len(t, w.vms(), 1)
		})
	}
}
