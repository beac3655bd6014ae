package simserver

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

// slowVersion answers Version after a delay, so that calls overlap at the server unless the
// client keeps them apart.
type slowVersion struct {
	pve.API
	delay time.Duration
}

func (s slowVersion) Version(ctx context.Context) (pve.Version, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return pve.Version{}, ctx.Err()
	}
	return s.API.Version(ctx)
}

// The acceptance test of the call cap: with a cap of N calls per second (a burst of N) and C
// calls in flight, the simulator's request log never shows more than 2N arrivals in a closed
// window of one second (a token bucket of rate N and burst N has N + N*T tokens due in any span
// of T seconds: the burst, and one every 1/N s after its start, the last one on its end) nor
// more than C requests in flight, however many calls the client is asked to make at once. A
// request arrives a little after its token is due (a goroutine's wake-up, the loopback); the
// bound holds as long as those lags differ by less than 1/N. The calls are quick and many, so
// that the rate, not the concurrency, is what holds them.
func TestServer_callCapHoldsTheClientToItsRateAndConcurrency(t *testing.T) {
	const (
		perSecond   = 20
		concurrency = 2
		calls       = 50
	)
	s := startServer(t, slowVersion{API: pvesim.New(pvesim.Default()), delay: 20 * time.Millisecond},
		func(o *Options) { o.KeepRequests = true })
	var mu sync.Mutex
	var held []time.Duration
	c, err := pve.NewClient(pve.ClientConfig{
		URL: s.URL(), TokenFile: s.TokenFile(), CAFile: s.CAFile(),
		Limits: pve.CallLimits{PerSecond: perSecond, Concurrency: concurrency},
		ObserveHeld: func(method string, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, "Version", method)
			held = append(held, d)
		},
	})
	require.NoError(t, err)

	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			_, err := c.Version(t.Context())
			assert.NoError(t, err)
		})
	}
	wg.Wait()

	log := s.Requests()
	require.Len(t, log, calls)
	arrivals := make([]time.Time, len(log))
	for i, r := range log {
		arrivals[i] = r.Arrived
		assert.LessOrEqual(t, r.InFlight, concurrency, "request %d arrived with %d in flight", i, r.InFlight)
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	for i, start := range arrivals {
		n := 0
		for _, a := range arrivals[i:] {
			if a.Sub(start) <= time.Second {
				n++
			}
		}
		assert.LessOrEqual(t, n, 2*perSecond, "calls in the second from arrival %d", i)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.GreaterOrEqual(t, len(held), calls-perSecond, "every call beyond the burst was held back")
}
