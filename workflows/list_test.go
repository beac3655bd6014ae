package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

func (w *world) list() (reads.ListProxiesResult, error) {
	env := w.env()
	env.ExecuteWorkflow(core.ListProxiesName)
	require.True(w.t, env.IsWorkflowCompleted())
	var res reads.ListProxiesResult
	if err := env.GetWorkflowError(); err != nil {
		return res, err
	}
	require.NoError(w.t, env.GetWorkflowResult(&res))
	return res, nil
}

// listedVMIDs are the VMIDs of the listed proxies.
func listedVMIDs(res reads.ListProxiesResult) []int {
	var ids []int
	for _, p := range res.Proxies {
		ids = append(ids, p.VMID)
	}
	return ids
}

// configReads are the VMIDs whose config was read.
func configReads(w *world) []int {
	var ids []int
	for _, c := range w.cluster.Calls() {
		if c.Method == "VMConfig" {
			ids = append(ids, c.VMID)
		}
	}
	return ids
}

func TestListByTag_listsMarkedVMsWithUIDAndCreatedAt(t *testing.T) {
	w := newWorld(t)
	ours, theirs := proxyVM(w, uid, true), proxyVM(w, otherUID, false)
	w.add(ours, theirs)

	res, err := w.list()

	require.NoError(t, err)
	require.Len(t, res.Proxies, 2)
	got := map[string]reads.ListedProxy{res.Proxies[0].UID: res.Proxies[0], res.Proxies[1].UID: res.Proxies[1]}
	assert.Equal(t, reads.ListedProxy{
		ProviderID: proxy.FormatProviderID(ours.VMID, proxy.NameFromUID(uid)), VMID: ours.VMID, Node: "pve1",
		Name: proxy.NameFromUID(uid), UID: uid, CreatedAt: createdAt, Status: "running",
	}, got[uid])
	assert.Equal(t, "stopped", got[otherUID].Status)
}

func TestListByTag_excludesUnmarkedVMs(t *testing.T) {
	w := newWorld(t)
	unmarked := proxyVM(w, otherUID, true)
	delete(unmarked.Config, "description")
	w.add(proxyVM(w, uid, true), unmarked)

	res, err := w.list()

	require.NoError(t, err)
	assert.Equal(t, []int{proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0)}, listedVMIDs(res))
	assert.Contains(t, configReads(w), unmarked.VMID, "a candidate's mark is read, not guessed")
}

func TestListByTag_emptyUIDStillListed(t *testing.T) {
	w := newWorld(t)
	v := proxyVM(w, uid, false)
	v.Config["description"] = "proxy-operator-managed=true\n"
	w.add(v)

	res, err := w.list()

	require.NoError(t, err)
	require.Len(t, res.Proxies, 1)
	assert.Empty(t, res.Proxies[0].UID)
}

// A create stopped between its clone and its configure step leaves a VM with the mark and the
// name the operator chose, and no tag yet: the mark alone makes it a proxy.
func TestListByTag_findsEveryMarkedVMWhateverItsNameOrTags(t *testing.T) {
	w := newWorld(t)
	byTag := proxyVM(w, uid, false)
	byTag.Config["name"] = "egress-by-hand"
	byName := proxyVM(w, otherUID, false)
	delete(byName.Config, "tags")
	neither := pvesim.VM{Node: "pve2", VMID: 4000, Config: pve.VMConfig{"name": "database", "description": byTag.Config["description"]}}
	unmarked := pvesim.VM{Node: "pve2", VMID: 4001, Config: pve.VMConfig{"name": "web"}}
	w.add(byTag, byName, neither, unmarked)

	res, err := w.list()

	require.NoError(t, err)
	assert.ElementsMatch(t, []int{byTag.VMID, byName.VMID, 4000}, listedVMIDs(res))
	assert.ElementsMatch(t, []int{byTag.VMID, byName.VMID, 4000, 4001}, configReads(w), "every VM's config is read for the mark")
}

func TestListByTag_skipsLXCAndTemplates(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) {
		o.Containers = []pvesim.Container{{Node: "pve1", VMID: 150, Name: "proxy-in-a-box", Tags: proxy.Tag}}
		tmpl := pvesim.Template(9001, "pve2", 1)
		tmpl.Config["name"], tmpl.Config["tags"] = "proxy-template", proxy.Tag
		o.VMs = append(o.VMs, tmpl)
	})
	w.add(proxyVM(w, uid, true))

	res, err := w.list()

	require.NoError(t, err)
	assert.Equal(t, []int{proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0)}, listedVMIDs(res))
	assert.Equal(t, []int{proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0)}, configReads(w))
}

func TestListByTag_resourcesFailureFailsWhole(t *testing.T) {
	w := newWorld(t)
	w.add(proxyVM(w, uid, true))
	for range 2 {
		w.cluster.FailNext("ClusterResources", &pve.APIError{Status: 500, Reason: "cluster not ready - no quorum?"})
	}

	_, err := w.list()

	assert.Equal(t, core.FailTransient, failureType(t, err))
	assert.ErrorContains(t, err, "no quorum")
}

func TestListByTag_unreadableVMSkippedWithALogLine(t *testing.T) {
	w := newWorld(t)
	unreadable, readable := proxyVM(w, uid, true), proxyVM(w, otherUID, true)
	unreadable.VMID, readable.VMID = 100100, 100200
	w.add(unreadable, readable)
	w.wrap = func(api pve.API) pve.API { return configFails{API: api, vmid: 100100} }

	res, err := w.list()

	require.NoError(t, err)
	assert.Equal(t, []int{100200}, listedVMIDs(res))
	assert.Equal(t, []int{100100}, res.Unreadable)
	assert.Regexp(t, `skipping a VM whose config cannot be read.*vmid=100100.*got no worker`, w.log.String())
}

// configFails is a cluster on which the config of one VM cannot be read.
type configFails struct {
	pve.API
	vmid int
}

func (c configFails) VMConfig(ctx context.Context, node string, vmid int) (pve.VMConfig, error) {
	if vmid == c.vmid {
		return nil, &pve.APIError{Status: 500, Reason: "got no worker", Message: "got no worker"}
	}
	return c.API.VMConfig(ctx, node, vmid)
}

func TestListByTag_unknownStatusStillAttempted(t *testing.T) {
	// The status cache refreshes once an hour: a VM cloned since shows "unknown" without a
	// name, but with its tags, which are read live.
	w := newWorld(t, func(o *pvesim.Options) { o.ResourcesLag = time.Hour })
	vmid := proxy.VMIDFor(uid, w.cfg.Proxmox.VMIDRange, 0)
	cloneInProgress(t, w, uid, vmid, "")
	w.advance(time.Minute)
	require.NoError(t, w.cluster.SetVMConfig(t.Context(), "pve1", vmid, pve.VMConfig{"tags": proxy.Tag}))

	res, err := w.list()

	require.NoError(t, err)
	require.Len(t, res.Proxies, 1)
	assert.Equal(t, "stopped", res.Proxies[0].Status, "read live")
	assert.Equal(t, uid, res.Proxies[0].UID)
}

func TestListByTag_readsTheStatusOnlyOfProxiesTheCacheDoesNotShowRunning(t *testing.T) {
	w := newWorld(t)
	w.add(proxyVM(w, uid, true), proxyVM(w, otherUID, false))

	_, err := w.list()

	require.NoError(t, err)
	assert.Equal(t, 1, w.cluster.CallCount("VMStatus"), "the stopped one")
	assert.Zero(t, w.cluster.CallCount("AgentNetworkInterfaces"))
	assert.Equal(t, 1, w.cluster.CallCount("ClusterResources"))
}

// Right after a create the status cache still shows the VM as it was before it started: list
// reads it live rather than report it stopped.
func TestList_rightAfterACreateWithTheCacheLaggingShowsTheProxyRunning(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) { o.ResourcesLag = time.Hour })
	w.advance(time.Hour) // the cache was refreshed before the create, which it has not seen since
	_, err := w.create(createInput())
	require.NoError(t, err)

	res, err := w.list()

	require.NoError(t, err)
	require.Len(t, res.Proxies, 1)
	assert.Equal(t, "running", res.Proxies[0].Status)
}

func TestListByTag_idsAcceptedByGet(t *testing.T) {
	w := newWorld(t)
	w.add(proxyVM(w, uid, true), proxyVM(w, otherUID, false))

	res, err := w.list()
	require.NoError(t, err)
	require.Len(t, res.Proxies, 2)

	for _, p := range res.Proxies {
		got, err := w.get(proxyvm.GetProxyInput{ProviderID: p.ProviderID})
		require.NoError(t, err)
		assert.Equal(t, p.UID, got.UID)
	}
}
