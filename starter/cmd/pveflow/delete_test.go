package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// acceptedRequest is the argument of the first Update named update that the latest run of
// workflowID accepted.
func acceptedRequest[T any](t *testing.T, server *testserver.Server, workflowID, update string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	history := server.Client().GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for history.HasNext() {
		event, err := history.Next()
		require.NoError(t, err)
		input := event.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput()
		if input.GetName() != update {
			continue
		}
		var arg T
		require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(input.GetArgs(), &arg))
		return arg
	}
	t.Fatalf("workflow %s accepted no %s Update", workflowID, update)
	return *new(T)
}

func TestRun_deleteSendsTheUIDAlone(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "..", "..", "testdata", "config", "simulator.yaml"))
	require.NoError(t, err)
	server := testserver.New(t)
	serveWorkflows(server, core.DefaultTaskQueue, cfg, pvesim.New(pvesim.Default()))
	env := map[string]string{"TEMPORAL_ADDRESS": server.Address(), "TEMPORAL_NAMESPACE": server.Namespace()}
	const uid = "proxy-x"

	code, stdout, stderr := runCLI(env, "delete", "--uid", uid)

	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "delete of proxy "+uid+" accepted by workflow "+core.ProxyWorkflowID(uid)+" (update ")
	assert.Equal(t, proxyvm.DeleteProxyInput{UID: uid}, acceptedRequest[proxyvm.DeleteProxyInput](t, server, core.ProxyWorkflowID(uid), core.DeleteUpdate))
}
