package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/workflows"
)

// startedInput is the input the latest run of workflowID was started with.
func startedInput[T any](t *testing.T, server *testserver.Server, workflowID string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	history := server.Client().GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	require.True(t, history.HasNext(), "workflow %s has a history", workflowID)
	first, err := history.Next()
	require.NoError(t, err)
	started := first.GetWorkflowExecutionStartedEventAttributes()
	require.NotNil(t, started, "the first event of %s is its start", workflowID)
	var in T
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(started.GetInput(), &in))
	return in
}

func TestRun_deleteAsksWithItsFlags(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "..", "..", "testdata", "config", "simulator.yaml"))
	require.NoError(t, err)
	server := testserver.New(t)
	serveWorkflows(server, workflows.DefaultTaskQueue, cfg, pvesim.New(pvesim.Default()))
	env := map[string]string{"TEMPORAL_ADDRESS": server.Address(), "TEMPORAL_NAMESPACE": server.Namespace()}

	tests := []struct {
		name  string
		flags []string
		want  workflows.DeleteProxyInput
	}{
		{"the UID alone", nil, workflows.DeleteProxyInput{}},
		{"a name", []string{"--name", "egress-a"}, workflows.DeleteProxyInput{Name: "egress-a"}},
		{"a provider ID", []string{"--provider-id", "vms/124973/egress-a"}, workflows.DeleteProxyInput{ProviderID: "vms/124973/egress-a"}},
		{"a name and a provider ID", []string{"--name", "egress-b", "--provider-id", "vms/124973/egress-a"},
			workflows.DeleteProxyInput{Name: "egress-b", ProviderID: "vms/124973/egress-a"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uid := "proxy-" + strings.Repeat("x", i+1)
			tt.want.UID = uid

			code, stdout, stderr := runCLI(env, append([]string{"delete", "--uid", uid, "--wait"}, tt.flags...)...)

			require.Equal(t, exitOK, code, stderr)
			assert.Contains(t, stdout, "proxy deleted: "+uid+"\n")
			assert.Equal(t, tt.want, startedInput[workflows.DeleteProxyInput](t, server, workflows.DeleteWorkflowID(uid)),
				"the input of the DeleteProxy that served the request")
		})
	}
}
