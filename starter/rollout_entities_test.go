package starter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

// withoutIPv4 counts, every few milliseconds until stop is closed, the VMs of the proxies created
// that their guest agent reports no IPv4 for, and returns the most it saw at once.
func withoutIPv4(s *stack, created []workflows.CreateProxyResult, stop <-chan struct{}) <-chan int {
	most := make(chan int, 1)
	go func() {
		seen := 0
		for {
			select {
			case <-stop:
				most <- seen
				return
			case <-time.After(10 * time.Millisecond):
			}
			down := 0
			for _, vm := range created {
				ifaces, err := s.cluster.AgentNetworkInterfaces(context.Background(), vm.Node, vm.VMID)
				if err != nil || proxy.FirstRoutableIPv4(ifaces, "") == "" {
					down++
				}
			}
			seen = max(seen, down)
		}
	}()
	return most
}

func TestClient_aRolloutOfTenProxiesThroughTheirEntitiesTakesAtMostTwoDownAtOnce(t *testing.T) {
	s := startStackWith(t, 200*time.Millisecond, client.Options{}, withLarge)
	uids := make([]string, 10)
	created := make([]workflows.CreateProxyResult, len(uids))
	var wg sync.WaitGroup
	for i := range uids {
		uids[i] = fmt.Sprintf("rollout-%02d", i)
		wg.Go(func() {
			req, err := s.starter.Create(ctx(t), createInput(uids[i]))
			if assert.NoError(t, err) {
				assert.NoError(t, req.Get(ctx(t), &created[i]))
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())

	stop := make(chan struct{})
	most := withoutIPv4(s, created, stop)
	id, err := s.starter.Rollout(ctx(t), starter.RolloutOptions{MachineType: "large", MaxUnavailable: 2, UIDs: uids})
	require.NoError(t, err)
	done, err := s.starter.RolloutResult(ctx(t), id)
	close(stop)

	require.NoError(t, err)
	assert.Len(t, done.Done, len(uids))
	assert.False(t, done.Paused)
	down := <-most
	assert.LessOrEqual(t, down, 2, "never more than --max-unavailable without an IPv4")
	assert.Positive(t, down, "the watcher saw the reboots")
	for _, vm := range s.cluster.VMs() {
		if vm.Config["template"] != "1" {
			assert.Equal(t, "4", vm.Config["cores"], "VM %d", vm.VMID)
		}
	}
	for _, d := range done.Done {
		assert.True(t, d.Restarted, d.UID)
		assert.NotEmpty(t, d.IPv4, d.UID)
	}
}
