package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/addresspool"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

// ours are the addresses the pool egress gives the first proxy created from it.
var ours = holding(uid, "192.0.2.10/24", "2001:db8::10/64")

// createdFromPool is the proxy of uid created from the pool egress, which gave it ours.
func createdFromPool(t *testing.T) (*world, proxyvm.CreateProxyResult) {
	t.Helper()
	w := withPools(newWorld(t))
	in := createInput()
	in.AddressPool = "egress"
	res, err := w.create(in)
	require.NoError(t, err)
	require.Equal(t, "192.0.2.10", res.IPv4)
	return w, res
}

// destroyByHand destroys the proxy's VM as a person would in the PVE UI, without its entity.
func (w *world) destroyByHand(created proxyvm.CreateProxyResult) {
	w.t.Helper()
	_, err := w.cluster.Stop(context.Background(), created.Node, created.VMID)
	require.NoError(w.t, err)
	w.advance(time.Minute)
	_, err = w.cluster.Destroy(context.Background(), created.Node, created.VMID)
	require.NoError(w.t, err)
	w.advance(time.Minute)
	require.Empty(w.t, w.vms())
}

// allocationsOf are the UIDs pool holds allocations of.
func (p *addressPools) allocationsOf(pool string) []string {
	st, _ := p.state(pool)
	var uids []string
	for _, a := range st.Allocations {
		uids = append(uids, a.UID)
	}
	return uids
}

// allocate allocates pool's addresses to uid, as a create of it would.
func (w *world) allocate(pool, uid string) {
	w.t.Helper()
	_, err := w.pools.Allocate(context.Background(), activities.AddressRequest{Pool: pool, UID: uid, Range: w.cfg.Proxmox.AddressPools[pool]})
	require.NoError(w.t, err)
}

func TestCollectGarbage_restoresAResetPoolsAllocationsFromTheMarks(t *testing.T) {
	w, _ := createdFromPool(t)
	w.pools.terminate("egress")
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbagePool{{Pool: "egress", Restored: []activities.AddressHolding{ours}}, {Pool: "spare"}}, res.Pools)
	assert.Equal(t, []string{uid}, w.pools.allocationsOf("egress"))
	w.allocate("egress", otherUID)
	st, _ := w.pools.state("egress")
	require.Len(t, st.Allocations, 2)
	assert.Equal(t, "192.0.2.11/24", st.Allocations[1].IPv4, "the next proxy does not get the restored addresses")
}

func TestCollectGarbage_aRenamedPoolRebuildsFromTheMarks(t *testing.T) {
	w, _ := createdFromPool(t)
	w.cfg.Proxmox.AddressPools = map[string]config.AddressPool{"out": testPool(10)} // egress, renamed
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbagePool{{Pool: "out", Restored: []activities.AddressHolding{ours}}}, res.Pools)
	assert.Equal(t, []string{uid}, w.pools.allocationsOf("out"))
}

func TestCollectGarbage_freesTheAddressesOfAVMDestroyedByHandOnceTheyAreOld(t *testing.T) {
	w, created := createdFromPool(t)
	w.destroyByHand(created)
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{otherUID}})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbagePool{{Pool: "egress", Freed: []activities.AddressHolding{ours}}, {Pool: "spare"}}, res.Pools)
	assert.Empty(t, w.pools.allocationsOf("egress"))
	assert.Equal(t, []string{"allocate egress " + uid, "reconcile egress", "reconcile egress", "reconcile spare"}, w.pools.seen(),
		"the second reconcile of egress frees")
}

func TestCollectGarbage_keepsAYoungAllocation(t *testing.T) {
	w, created := createdFromPool(t)
	w.destroyByHand(created)
	w.advance(10 * time.Minute)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{otherUID}})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbagePool{{Pool: "egress"}, {Pool: "spare"}}, res.Pools)
	assert.Equal(t, []string{uid}, w.pools.allocationsOf("egress"))
}

func TestCollectGarbage_keepsTheAllocationOfAProxyWhoseEntityRuns(t *testing.T) {
	w, created := createdFromPool(t)
	w.destroyByHand(created)
	w.advance(2 * reads.DefaultGrace)
	w.runs.start(core.ProxyWorkflowID(uid), w.clock.Now()) // it is making the VM again

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{otherUID}})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbagePool{{Pool: "egress", Kept: []fleet.KeptAddresses{{AddressHolding: ours, Detail: "proxy/" + uid + " runs"}}}, {Pool: "spare"}}, res.Pools)
	assert.Equal(t, []string{uid}, w.pools.allocationsOf("egress"))
}

func TestCollectGarbage_keepsTheAllocationOfAKeptProxy(t *testing.T) {
	w, created := createdFromPool(t)
	w.destroyByHand(created)
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbagePool{{Pool: "egress", Kept: []fleet.KeptAddresses{{AddressHolding: ours, Detail: "its proxy is kept"}}}, {Pool: "spare"}}, res.Pools)
	assert.Equal(t, []string{uid}, w.pools.allocationsOf("egress"))
}

func TestCollectGarbage_reportsAnAddressTheResetPoolGaveAnotherProxy(t *testing.T) {
	w, _ := createdFromPool(t)
	w.pools.terminate("egress")
	w.advance(2 * reads.DefaultGrace)
	w.allocate("egress", otherUID) // the reset pool gives ours again

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid, otherUID}})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbagePool{{Pool: "egress", Conflicts: []activities.AddressConflict{
		{Held: ours, Allocation: holding(otherUID, ours.IPv4, ours.IPv6)},
	}}, {Pool: "spare"}}, res.Pools)
	assert.Equal(t, []string{otherUID}, w.pools.allocationsOf("egress"), "a person decides")
	assert.False(t, res.Failed())
}

func TestCollectGarbage_aDryRunChangesNoPool(t *testing.T) {
	w, created := createdFromPool(t)
	w.destroyByHand(created)
	stale, _ := w.pools.state("egress")
	w.pools.set("spare", addresspool.AddressPoolState{Pool: "spare"})
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{otherUID}, DryRun: true})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbagePool{{Pool: "egress", Freed: []activities.AddressHolding{ours}}, {Pool: "spare"}}, res.Pools, "what it would free")
	after, _ := w.pools.state("egress")
	assert.Equal(t, stale, after)
	assert.Equal(t, []string{"allocate egress " + uid, "reconcile egress dry-run", "reconcile spare dry-run"}, w.pools.seen())
}

func TestCollectGarbage_aDryRunStartsNoPool(t *testing.T) {
	w, _ := createdFromPool(t)
	w.pools.terminate("egress")
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{uid}, DryRun: true})

	require.NoError(t, err)
	assert.Equal(t, []fleet.GarbagePool{{Pool: "egress", Restored: []activities.AddressHolding{ours}}, {Pool: "spare"}}, res.Pools, "what it would restore")
	_, runs := w.pools.state("egress")
	assert.False(t, runs)
}

func TestCollectGarbage_freesNoAddressWhileAVMsConfigCannotBeRead(t *testing.T) {
	w, created := createdFromPool(t)
	w.destroyByHand(created)
	unreadable := proxyVM(w, thirdUID, true)
	w.add(unreadable)
	w.wrap = func(api pve.API) pve.API { return configFails{API: api, vmid: unreadable.VMID} }
	w.advance(2 * reads.DefaultGrace)

	res, err := w.collect(fleet.CollectGarbageInput{Keep: []string{otherUID, thirdUID}})

	require.NoError(t, err)
	require.Len(t, res.Pools, 2)
	assert.Equal(t, []fleet.KeptAddresses{{AddressHolding: ours, Detail: "the config of VM(s) [" + itoa(unreadable.VMID) + "] could not be read: they may hold it"}}, res.Pools[0].Kept)
	assert.Empty(t, res.Pools[0].Freed)
	assert.Equal(t, []string{uid}, w.pools.allocationsOf("egress"))
}
