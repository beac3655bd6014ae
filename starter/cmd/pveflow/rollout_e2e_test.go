package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// mostWithoutIPv4 polls, until stop is closed, the guest agents of the simulator's proxy VMs and
// returns the most it found without an IPv4 at once.
func mostWithoutIPv4(t *testing.T, url, dir string, vms []pve.VMResource, stop <-chan struct{}) <-chan int {
	api, err := pve.NewClient(pve.ClientConfig{URL: url, CAFile: filepath.Join(dir, "ca.pem"), TokenFile: filepath.Join(dir, "token")})
	require.NoError(t, err)
	most := make(chan int, 1)
	go func() {
		seen := 0
		for {
			select {
			case <-stop:
				most <- seen
				return
			case <-time.After(20 * time.Millisecond):
			}
			down := 0
			for _, vm := range vms {
				ifaces, err := api.AgentNetworkInterfaces(context.Background(), vm.Node, vm.VMID)
				if err != nil || (proxy.Addresses{}).Report(ifaces, "").IPv4 == "" {
					down++
				}
			}
			seen = max(seen, down)
		}
	}()
	return most
}

func TestE2E_aRolloutOfTenProxiesThroughTheCLIHasAtMostTwoWithoutAnIPv4(t *testing.T) {
	s := newE2E(t, "e2e-rollout")
	simURL, simDir := s.startPVESim()
	s.startWorker("--config", s.writeConfig(simURL, filepath.Join(simDir, "ca.pem"), filepath.Join(simDir, "token")))
	args := []string{"rollout", "--machine-type", "large", "--max-unavailable", "2", "--json"}
	var wg sync.WaitGroup
	for i := range 10 {
		uid := fmt.Sprintf("rollout-cli-%02d", i)
		args = append(args, "--uid", uid)
		wg.Go(func() {
			created := s.pveflow("create", "--uid", uid, "--image", "debian13", "--machine-type", "small", "--wait")
			assert.Equal(t, exitOK, created.code, created.stderr)
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	vms := proxyVMs(t, simURL, simDir)
	require.Len(t, vms, 10)

	stop := make(chan struct{})
	most := mostWithoutIPv4(t, simURL, simDir, vms, stop)
	rollout := s.pveflow(args...)
	close(stop)

	require.Equal(t, exitOK, rollout.code, rollout.stderr)
	st := decode[fleet.RolloutStatus](t, rollout)
	assert.Len(t, st.Done, 10)
	assert.False(t, st.Paused)
	down := <-most
	assert.LessOrEqual(t, down, 2, "never more than --max-unavailable without an IPv4")
	assert.Positive(t, down, "the watcher saw the reboots")
	listed := 0
	for _, p := range decode[[]starter.Proxy](t, s.pveflow("list", "--json")) {
		if strings.HasPrefix(p.UID, "rollout-cli-") { // the server's other tests list theirs
			listed++
			assert.Equal(t, proxyvm.ProxyPresent, p.Phase, p.UID)
		}
	}
	assert.Equal(t, 10, listed)
	for i := range 10 {
		got := decode[proxyvm.GetProxyResult](t, s.pveflow("--json", "get", "--uid", fmt.Sprintf("rollout-cli-%02d", i)))
		assert.Equal(t, 4, got.Cores, got.UID)
	}
}
