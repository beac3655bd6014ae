package workflows_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/reads"
)

// A create stopped between its clone and its configure step leaves a VM with the mark and the
// name the operator chose, and no tag: the mark alone makes it garbage.
func TestCollectGarbage_findsAMarkedVMWithoutTagOrProxyName(t *testing.T) {
	w := newWorld(t)
	orphan := proxyVM(w, otherUID, false)
	orphan.Config["name"] = "egress-eu-1"
	delete(orphan.Config, "tags")
	w.add(orphan)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbageVM{{UID: otherUID, VMID: orphan.VMID, Node: "pve1", Name: "egress-eu-1", Outcome: reads.GarbageDeleted}}, res.VMs)
	require.Len(t, w.proxies.deleted(), 1)
}

func TestCollectGarbage_keepsTheSeedISOOfAKeptProxyItCouldNotList(t *testing.T) {
	tests := map[string]func(w *world, vm pvesim.VM){
		// Before the mark decided alone, such a VM was never read.
		"its VM has a name of its own and a person removed its tag": func(w *world, vm pvesim.VM) {
			vm.Config["name"] = "egress-eu-1"
			delete(vm.Config, "tags")
			w.add(vm)
		},
		// Destroyed by hand: its entity's next check makes it again, with this seed ISO.
		"its VM is gone for a moment": func(*world, pvesim.VM) {},
	}
	for name, setUp := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			volid := w.orphanISO(uid)
			vm := proxyVM(w, uid, true)
			vm.Config["ide2"] = volid + ",media=cdrom"
			setUp(w, vm)
			w.advance(2 * reads.DefaultGrace)

			res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

			require.NoError(t, err)
			assert.Empty(t, res.ISOs)
			assert.Equal(t, []string{volid}, w.isos())
		})
	}
}

func TestCollectGarbage_keepsASeedISOAVMRefersTo(t *testing.T) {
	w := newWorld(t)
	volid := w.orphanISO(otherUID)
	w.add(pvesim.VM{Node: "pve2", VMID: 4000, Config: pve.VMConfig{"name": "made-by-hand", "ide2": volid + ",media=cdrom"}})
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Empty(t, res.ISOs)
	assert.Equal(t, []string{volid}, w.isos())
}

func TestCollectGarbage_anUnreadableVMProtectsEveryISO(t *testing.T) {
	w := newWorld(t)
	volid := w.orphanISO(otherUID)
	unreadable := pvesim.VM{Node: "pve2", VMID: 4000, Config: pve.VMConfig{"name": "egress-eu-1"}}
	w.add(unreadable)
	w.wrap = func(api pve.API) pve.API { return configFails{API: api, vmid: unreadable.VMID} }
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Equal(t, []int{unreadable.VMID}, res.Unreadable)
	require.Len(t, res.ISOs, 1)
	assert.Equal(t, volid, res.ISOs[0].VolID)
	assert.Equal(t, reads.GarbageSkipped, res.ISOs[0].Outcome)
	assert.Equal(t, "the config of VM(s) [4000] could not be read: they may use it", res.ISOs[0].Detail)
	assert.False(t, res.Failed())
	assert.Equal(t, []string{volid}, w.isos())
	assert.Zero(t, w.cluster.CallCount("DeleteVolume"))
}

// The collection lists an orphan seed ISO; before it deletes it, a create of its UID clones
// (the status cache, refreshed up to an hour ago, does not show the clone's name) and uploads
// the seed ISO anew. The new ISO stays: it is not the one listed.
func TestCollectGarbage_doesNotDeleteTheNewSeedISOOfARecreatedProxy(t *testing.T) {
	w := newWorld(t, func(o *pvesim.Options) {
		o.ResourcesLag = time.Hour
		o.TaskDurations["qmclone"], o.TaskDurations["imgcopy"] = 0, 0
	})
	volid := w.orphanISO(otherUID)
	w.advance(2 * reads.DefaultGrace)
	w.wrap = func(api pve.API) pve.API {
		return &afterFirstISOListing{API: api, then: func() {
			cloneInProgress(t, w, otherUID, proxy.VMIDFor(otherUID, w.cfg.Proxmox.VMIDRange, 0), "")
			const data = "CD001 new seed"
			_, err := w.cluster.UploadISO(context.Background(), "pve1", "local", proxy.SeedISOName(proxy.NameFromUID(otherUID)), strings.NewReader(data), int64(len(data)))
			require.NoError(t, err)
		}}
	}

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.ISOs, 1)
	assert.Equal(t, reads.GarbageSkipped, res.ISOs[0].Outcome)
	assert.Contains(t, res.ISOs[0].Detail, "uploaded again")
	assert.Equal(t, []string{volid}, w.isos(), "the re-created proxy's seed ISO")
	assert.Zero(t, w.cluster.CallCount("DeleteVolume"))
}

// afterFirstISOListing is a cluster on which then happens right after the first listing of a
// storage's content: after a collection has looked.
type afterFirstISOListing struct {
	pve.API
	once sync.Once
	then func()
}

func (a *afterFirstISOListing) StorageContent(ctx context.Context, node, storage, content string) ([]pve.StorageVolume, error) {
	vols, err := a.API.StorageContent(ctx, node, storage, content)
	a.once.Do(a.then)
	return vols, err
}

// A VM made before names had one rule (a dotted name), or renamed by a person: its delete
// names the UID, which finds it whatever its name.
func TestCollectGarbage_deletesAMarkedVMWhoseNameIsNotADNSLabelByItsUID(t *testing.T) {
	w := newWorld(t)
	orphan := proxyVM(w, otherUID, true)
	orphan.Config["name"] = "egress.eu-1"
	w.add(orphan)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	require.Len(t, res.VMs, 1)
	assert.Equal(t, reads.GarbageDeleted, res.VMs[0].Outcome)
	require.Len(t, w.proxies.deleted(), 1)
	assert.Equal(t, otherUID, w.proxies.deleted()[0].UID)
}
