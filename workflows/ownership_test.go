package workflows_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The tests of the ownership promise: a proxy's workflows act on that proxy's VM and nothing
// else, find it in every state, and never run against each other. One test per case of the
// issue that made the promise hold under interleavings.

const otherUID = "7d1e2f30-5a4b-4c6d-8e9f-0a1b2c3d4e5f"

// cloneInProgress starts a clone for the proxy uid onto vmid, as a create of that proxy would,
// with its mark in the clone call; it goes on copying for the cluster's clone duration.
func cloneInProgress(t *testing.T, w *world, uid string, vmid int, target string) {
	t.Helper()
	_, err := w.cluster.Clone(context.Background(), "pve1", 9000, pve.CloneParams{
		NewID: vmid, Name: proxy.NameFromUID(uid), Full: true, Target: target, Storage: w.cfg.Proxmox.Storage,
		Description: proxy.FormatDescription(proxy.Mark{UID: uid, CreatedAt: time.Now().UTC().Truncate(time.Second)}),
	})
	require.NoError(t, err)
}

// templateDisks makes the cluster's template one of n disks: PVE shows the clone's mark once
// the first disk is copied, so with one disk only when the clone ends.
func templateDisks(n int) func(*pvesim.Options) {
	return func(o *pvesim.Options) {
		o.VMs = []pvesim.VM{pvesim.Template(9000, "pve1", n)}
		o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Minute, "qmstart": 3 * time.Second}
	}
}

// shapes are the two shapes of a clone in progress.
var shapes = map[string]int{"single-disk template": 1, "two-disk template": 2}

// writesTo lists the calls that changed VM vmid: config writes, resizes, starts, stops and
// destroys.
func writesTo(w *world, vmid int) []string {
	var out []string
	for _, c := range w.cluster.Calls() {
		switch c.Method {
		case "SetVMConfig", "Resize", "Start", "Stop", "Destroy":
			if c.VMID == vmid {
				out = append(out, c.Method)
			}
		}
	}
	return out
}

func TestOwnership_probeCollisionWithAnotherProxysCloneMovesOn(t *testing.T) {
	for shape, disks := range shapes {
		t.Run(shape, func(t *testing.T) {
			w := newWorld(t, templateDisks(disks))
			home := firstVMID(w)
			cloneInProgress(t, w, otherUID, home, "")

			res, err := w.create(createInput())

			require.NoError(t, err)
			assert.NotEqual(t, home, res.VMID, "moved on from the other proxy's VMID")
			assert.Empty(t, writesTo(w, home), "nothing written to the other proxy's VM")
			theirs := vmConfig(t, w, home)
			owner, _ := proxy.OwnerOf(theirs)
			assert.Equal(t, otherUID, owner)
			assert.NotContains(t, theirs["ide2"], "seed", "no seed ISO attached to the other proxy's VM")
			mine, _ := proxy.OwnerOf(vmConfig(t, w, res.VMID))
			assert.Equal(t, uid, mine)
		})
	}
}

func TestOwnership_deleteAfterACreateStoppedOnACollisionLeavesTheOtherProxysVM(t *testing.T) {
	w := newWorld(t, templateDisks(1))
	home := firstVMID(w)
	cloneInProgress(t, w, otherUID, home, "")

	res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Empty(t, res.Destroyed)
	assert.Empty(t, writesTo(w, home))
	owner, _ := proxy.OwnerOf(vmConfig(t, w, home))
	assert.Equal(t, otherUID, owner, "the other proxy's VM is still there, finished")
}

func TestOwnership_deleteFindsACloneStillCopyingWithNoCreateRunning(t *testing.T) {
	tests := map[string]time.Duration{
		"cache shows VM <id>":    0,
		"cache shows no name":    time.Hour,
		"cache shows an old run": 30 * time.Second,
	}
	for name, lag := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, templateDisks(1), func(o *pvesim.Options) { o.ResourcesLag = lag })
			w.advance(lag) // the cache has been refreshed at least once before the clone
			cloneInProgress(t, w, uid, firstVMID(w), "")

			res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

			require.NoError(t, err)
			assert.Len(t, res.Destroyed, 1)
			assert.Empty(t, w.vms(), "the orphan clone is destroyed once it has finished")
		})
	}
}

// sharedCluster has a storage shared by pve1 and pve2, so the template on pve1 can be cloned
// to pve2; PVE does that on pve1 and moves the config to pve2 when the clone ends.
func sharedCluster(o *pvesim.Options) {
	const tib = 1 << 40
	for i := range o.Nodes {
		o.Nodes[i].Storages = append(o.Nodes[i].Storages, pvesim.Storage{ID: "shared", Type: "rbd", Content: "images,rootdir", Shared: true, Total: tib})
	}
	o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Minute, "qmstart": 3 * time.Second}
}

func TestOwnership_crossNodeCloneFollowedToItsTargetNode(t *testing.T) {
	newSharedWorld := func(t *testing.T) *world {
		w := newWorld(t, sharedCluster)
		w.cfg.Proxmox.Nodes = []string{"pve1", "pve2"}
		w.cfg.Proxmox.Storage = "shared"
		cloneInProgress(t, w, uid, firstVMID(w), "pve2")
		return w
	}
	t.Run("delete during the clone", func(t *testing.T) {
		w := newSharedWorld(t)

		res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

		require.NoError(t, err)
		require.Len(t, res.Destroyed, 1)
		assert.Equal(t, "pve2", res.Destroyed[0].Node)
		assert.Empty(t, w.vms(), "destroyed where the clone moved it")
	})
	t.Run("create resuming after a lost clone answer", func(t *testing.T) {
		w := newSharedWorld(t)
		in := createInput()
		in.Zone = "pve2"

		res, err := w.create(in)

		require.NoError(t, err)
		assert.Equal(t, firstVMID(w), res.VMID)
		assert.Equal(t, "pve2", res.Node)
		assert.Equal(t, 1, w.cluster.CallCount("Clone"), "the clone in progress was adopted, not repeated")
		require.Len(t, w.vms(), 1)
		assert.Equal(t, "pve2", w.vms()[0].Node)
	})
}

func TestOwnership_deleteByUIDAloneRemovesAProxyWithItsOwnName(t *testing.T) {
	w := newWorld(t)
	in := createInput()
	in.Name = "egress-eu-1"
	res, err := w.create(in)
	require.NoError(t, err)
	require.Equal(t, "egress-eu-1", vmConfig(t, w, res.VMID)["name"])

	del, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Len(t, del.Destroyed, 1)
	assert.Empty(t, w.vms())
	assert.Empty(t, w.isos())
}

func TestOwnership_rerunOfCompletedCreateDecidesFromTheLiveStatus(t *testing.T) {
	// The cache has not seen the VM run: cluster resources show it "unknown", or "stopped".
	w := newWorld(t, func(o *pvesim.Options) { o.ResourcesLag = time.Hour })
	first, err := w.create(createInput())
	require.NoError(t, err)
	starts := w.cluster.CallCount("Start")

	second, err := w.create(createInput())

	require.NoError(t, err)
	assert.Equal(t, first.VMID, second.VMID)
	assert.False(t, second.Provisioned, "a running VM is not provisioned again")
	assert.Equal(t, starts, w.cluster.CallCount("Start"), "nor started")
}

// losesFirstAnswer lets Proxmox carry out the first call of method but loses its answer, as a
// dropped connection does: the activity's retry then meets what that call did.
type losesFirstAnswer struct {
	pve.API
	method string
	lost   atomic.Bool
}

func (l *losesFirstAnswer) lose(method string, err error) error {
	if err == nil && method == l.method && l.lost.CompareAndSwap(false, true) {
		return errors.New("read tcp 127.0.0.1:41234->127.0.0.1:8006: connection reset by peer")
	}
	return err
}

func (l *losesFirstAnswer) Start(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	upid, err := l.API.Start(ctx, node, vmid)
	if err := l.lose("Start", err); err != nil {
		return "", err
	}
	return upid, nil
}

func (l *losesFirstAnswer) Clone(ctx context.Context, node string, vmid int, params pve.CloneParams) (pve.UPID, error) {
	upid, err := l.API.Clone(ctx, node, vmid, params)
	if err := l.lose("Clone", err); err != nil {
		return "", err
	}
	return upid, nil
}

func losingFirstAnswerOf(method string) func(pve.API) pve.API {
	return func(api pve.API) pve.API { return &losesFirstAnswer{API: api, method: method} }
}

func TestOwnership_cloneWhoseAnswerWasLostIsAdoptedNotRepeated(t *testing.T) {
	tests := map[string]struct {
		shared   bool
		zone     string
		wantNode string
	}{
		"on the template's node": {wantNode: "pve1"},
		"to another node":        {shared: true, zone: "pve2", wantNode: "pve2"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			if tt.shared {
				w = newWorld(t, sharedCluster)
				w.cfg.Proxmox.Nodes = []string{"pve1", "pve2"}
				w.cfg.Proxmox.Storage = "shared"
			}
			w.wrap = losingFirstAnswerOf("Clone")
			in := createInput()
			in.Zone = tt.zone

			res, err := w.create(in)

			require.NoError(t, err)
			assert.Equal(t, firstVMID(w), res.VMID)
			assert.Equal(t, tt.wantNode, res.Node)
			assert.Equal(t, 2, w.cluster.CallCount("Clone"), "the retry found the first clone copying")
			require.Len(t, w.vms(), 1, "one VM")
			assert.Equal(t, tt.wantNode, w.vms()[0].Node)
		})
	}
}

func TestOwnership_startWhoseAnswerWasLostCountsAsStarted(t *testing.T) {
	// The start is done before the activity's retry comes.
	w := newWorld(t, func(o *pvesim.Options) { o.TaskDurations["qmstart"] = 100 * time.Millisecond })
	w.wrap = losingFirstAnswerOf("Start")

	res, err := w.create(createInput())

	require.NoError(t, err)
	assert.NotEmpty(t, res.IPv4)
	assert.Equal(t, 2, w.cluster.CallCount("Start"), "the retry's start found the VM running")
}

func TestOwnership_invalidUIDIsPermanentBeforeAnyCall(t *testing.T) {
	uids := map[string]string{
		"empty":          "",
		"trailing space": uid + " ",
		"line break":     "victim\nproxy-operator-uid=" + uid,
		"slash":          "ns/" + uid,
		"too long":       strings.Repeat("a", proxy.MaxUIDLength+1),
	}
	for name, bad := range uids {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			in := createInput()
			in.UID = bad

			_, createErr := w.create(in)
			_, deleteErr := w.delete(proxyvm.DeleteProxyInput{UID: bad})

			assert.Equal(t, core.FailPermanent, failureType(t, createErr))
			assert.Equal(t, core.FailPermanent, failureType(t, deleteErr))
			assert.Contains(t, createErr.Error(), "proxy UID")
			assert.Empty(t, w.cluster.Calls())
		})
	}
}
