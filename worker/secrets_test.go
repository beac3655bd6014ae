package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/internal/syncbuf"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// userDataSecret and wrongTokenSecret stand for a password in cloud-init user-data and for an
// API token secret that Proxmox refuses.
const (
	userDataSecret   = "hunter2-userdata-sentinel-5b8e1d"
	wrongTokenSecret = "0badc0de-token-sentinel-9a7f3c21"
)

// TestSecrets_userDataAndTokenAppearInNoLogErrorOrHistory runs the worker at its most verbose
// level with the payload codec on: a proxy created and deleted with a secret in its user-data,
// then a create whose token Proxmox refuses. Neither the user-data's secret, the accepted
// token's secret nor the refused one is in any log line, in the errors the starter returns, or
// in any event of the histories as the server stores them: payloads are encrypted there, and
// failure messages plain (codec.Converters), which the refusal's shows.
func TestSecrets_userDataAndTokenAppearInNoLogErrorOrHistory(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "codec.key")
	require.NoError(t, codec.WriteNewKeyFile(keyFile, "k1"))
	env := func(server *testserver.Server) map[string]string {
		return map[string]string{
			"TEMPORAL_ADDRESS":       server.Address(),
			"TEMPORAL_NAMESPACE":     server.Namespace(),
			"PVEFLOW_CODEC_KEY_FILE": keyFile,
			"XDG_RUNTIME_DIR":        t.TempDir(), // its worker slot
		}
	}
	sim, err := simserver.Start(simserver.Options{API: pvesim.New(pvesim.Default()), Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	token, err := os.ReadFile(sim.TokenFile())
	require.NoError(t, err)
	_, tokenSecret, ok := strings.Cut(strings.TrimSpace(string(token)), "=")
	require.True(t, ok, "the simulator's token file is user@realm!id=secret")
	wrongToken := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(wrongToken, []byte(simserver.DefaultTokenUser+"="+wrongTokenSecret+"\n"), 0o600))

	server := testserver.New(t)
	opts, err := starter.ClientOptions(func(k string) string { return env(server)[k] })
	require.NoError(t, err)
	s := starter.New(server.NewClient(opts), "secrets", starter.WithDataConverter(opts.DataConverter))
	var logs syncbuf.Buffer
	runWorker := func(tokenFile string) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{
				"--config", writeSimConfig(t, sim, tokenFile), "--task-queue", "secrets",
				"--log-level", "debug", "--log-format", "json",
			}, env(server), io.Discard, &logs)
		}()
		return func() {
			cancel()
			select {
			case code := <-done:
				require.Equal(t, exitOK, code, logs.String())
			case <-time.After(time.Minute):
				t.Fatal("the worker did not stop within a minute")
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []string

	stop := runWorker(sim.TokenFile())
	in := proxyvm.ProxySpec{UID: "secret-proxy", Image: "debian13", MachineType: "small",
		UserData: "#cloud-config\npassword: " + userDataSecret + "\n"}
	req, err := s.Create(ctx, in)
	require.NoError(t, err)
	require.NoError(t, req.Get(ctx, nil), logs.String())
	req, err = s.Delete(ctx, proxyvm.DeleteProxyInput{UID: in.UID})
	require.NoError(t, err)
	require.NoError(t, req.Get(ctx, nil), logs.String())
	stop()

	stop = runWorker(wrongToken)
	refused := in
	refused.UID = "refused-proxy"
	req, err = s.Create(ctx, refused)
	require.NoError(t, err)
	err = req.Get(ctx, nil)
	require.Error(t, err, "Proxmox refuses the token")
	assert.Equal(t, "Permanent", starter.FailureType(err))
	errs = append(errs, err.Error())
	stop()

	plain := server.NewClient(client.Options{})
	var histories []string
	for _, id := range []string{
		core.CreateWorkflowID(in.UID), core.DeleteWorkflowID(in.UID), core.CreateWorkflowID(refused.UID),
	} {
		histories = append(histories, rawHistory(t, plain, id))
	}
	secrets := map[string]string{"user-data": userDataSecret, "token": tokenSecret, "refused token": wrongTokenSecret}
	for what, secret := range secrets {
		assert.NotContains(t, logs.String(), secret, "the %s secret is in a log line", what)
		for _, e := range errs {
			assert.NotContains(t, e, secret, "the %s secret is in an error", what)
		}
		for _, h := range histories {
			assert.NotContains(t, h, secret, "the %s secret is in a history", what)
		}
	}
	assert.Contains(t, logs.String(), `"level":"DEBUG"`, "the worker logged at debug level")
	assert.Contains(t, errs[0], "401", "the refusal says what Proxmox answered")
	refusal := histories[2]
	assert.Contains(t, refusal, "401", "the refusal's failure message is plain in its history")
	assert.NotContains(t, refusal, "Encoded failure")
	assert.Contains(t, refusal, "binary/encrypted", "the refused create's payloads are encrypted")
}

// writeSimConfig writes a worker configuration for sim's default cluster with tokenFile.
func writeSimConfig(t *testing.T, sim *simserver.Server, tokenFile string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "proxmox:\n" +
		"  url: " + sim.URL() + "\n" +
		"  caFile: " + sim.CAFile() + "\n" +
		"  tokenFile: " + tokenFile + "\n" +
		"  nodes: [pve1]\n" +
		"  templates: {debian13: {vmid: 9000}}\n" +
		"  machineTypes: {small: {cores: 1, memoryMiB: 512}}\n" +
		"budgets: {unlock: 5s, request: 5s}\n" +
		"poll: {initialInterval: 200ms, backoffCoefficient: 1.2, maximumInterval: 1s}\n"
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return path
}

// rawHistory is the latest run of workflowID as the server stores it, every event in JSON with
// payloads in their stored form.
func rawHistory(t *testing.T, c client.Client, workflowID string) string {
	t.Helper()
	iter := c.GetWorkflowHistory(context.Background(), workflowID, "", false, 0)
	var b strings.Builder
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		js, err := temporalproto.CustomJSONMarshalOptions{
			Metadata: map[string]any{commonpb.EnablePayloadShorthandMetadataKey: true},
		}.Marshal(ev)
		require.NoError(t, err)
		b.Write(js)
		b.WriteString(ev.String())
	}
	require.NotZero(t, b.Len(), "workflow %s has a history", workflowID)
	return b.String()
}
