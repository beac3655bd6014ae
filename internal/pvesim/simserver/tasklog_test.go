package simserver

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

func TestTaskLog_pagesAsPVEDoes(t *testing.T) {
	clock := pvesim.NewManualClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	opts := pvesim.Default()
	opts.Clock = clock
	cluster := pvesim.New(opts)
	_, err := cluster.Clone(t.Context(), "pve1", 9000, pve.CloneParams{NewID: 123456, Full: true})
	require.NoError(t, err)
	clock.Advance(time.Hour)
	cluster.BusyVolume("local-lvm:vm-123456-disk-0")
	cluster.BusyVolume("local-lvm:vm-123456-disk-1")
	upid, err := cluster.Destroy(t.Context(), "pve1", 123456)
	require.NoError(t, err)
	clock.Advance(time.Hour)
	s := startServer(t, cluster)
	lineNumbers := func(query string) []int {
		resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/tasks/"+url.PathEscape(string(upid))+"/log"+query, nil))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		var answer struct {
			Data []pve.TaskLogLine `json:"data"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &answer))
		var ns []int
		for _, l := range answer.Data {
			ns = append(ns, l.N)
		}
		return ns
	}

	assert.Equal(t, []int{1, 2, 3}, lineNumbers(""))
	assert.Equal(t, []int{2}, lineNumbers("?start=1&limit=1"))
	assert.Equal(t, []int{2, 3}, lineNumbers("?start=1&limit=0"), "a limit of 0 reads to the end")
	assert.Empty(t, lineNumbers("?start=3"), "past the last line")
}
