package simserver

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

func TestServer_proxyStatusHasReasonAndEmptyBody(t *testing.T) {
	s := startServer(t, failingAPI{err: &pve.APIError{Status: 596, Reason: "Connection timed out"}})

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/100/config", nil))

	assert.Equal(t, "596 Connection timed out", resp.Status)
	assert.Empty(t, body, "pveproxy relays AnyEvent::HTTP's status without a body")
}

func TestServer_heldAnswerIsDroppedWhenTheClientGivesUp(t *testing.T) {
	cluster := pvesim.New(pvesim.Default())
	cluster.FailNext("VMStatus", pvesim.ErrAnswerHeld)
	s := startServer(t, cluster)
	// Taken before the deadline is set, so that the wait measured is never shorter than it.
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()

	resp, err := httpClient(t, s).Do(newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/9000/status/current", nil).WithContext(ctx))
	if resp != nil {
		resp.Body.Close()
	}

	require.True(t, errors.Is(err, context.DeadlineExceeded), "no answer before the client's timeout: %v", err)
	assert.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond)
	// The server let the held request go: a next one is answered.
	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/9000/status/current", nil))
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
}
