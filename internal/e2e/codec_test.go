package e2e_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// secret stands for a password in cloud-init user-data. It has no character JSON escapes, so it
// reads the same in a payload's JSON as in the user-data.
const secret = "hunter2-sentinel-7f3a9c"

// codecOptions are client options with the converters of a codec over a new key file, as
// PVEFLOW_CODEC_KEY_FILE gives them.
func codecOptions(t *testing.T) client.Options {
	t.Helper()
	path := filepath.Join(t.TempDir(), "codec.key")
	require.NoError(t, codec.WriteNewKeyFile(path, "e2e"))
	c, err := codec.LoadKeyFile(path)
	require.NoError(t, err)
	dc, fc := codec.Converters(c)
	return client.Options{DataConverter: dc, FailureConverter: fc}
}

// createWithSecret asks for a proxy whose user-data holds secret, waits for its create, and
// returns the histories of the CreateProxy and of its entity as a client without a codec reads
// them: as the server stores them.
func createWithSecret(t *testing.T, base client.Options) (create, entity []*historypb.HistoryEvent) {
	t.Helper()
	s := startStackWith(t, newCluster(), fastConfig(t), base)
	in := createInput(uid)
	in.UserData = "#cloud-config\npassword: " + secret + "\n"
	_, err := served[proxyvm.CreateProxyResult](t, s.startCreate(in))
	require.NoError(t, err)

	run := s.operation(uid, proxyvm.OpCreate)
	plain := s.server.NewClient(client.Options{})
	return history(t, plain, run.GetID(), run.GetRunID()), history(t, plain, core.ProxyWorkflowID(uid), "")
}

// eventsHolding names the events of history in which s can be read, as "WorkflowExecutionStarted"
// or, for an activity's, "ActivityTaskScheduled UploadISO": in the event's JSON, with plain JSON
// payloads shown as their values (as `temporal workflow show --output json` shows them), or in
// its protobuf encoding, where every payload's bytes are as stored.
func eventsHolding(t *testing.T, history []*historypb.HistoryEvent, s string) []string {
	t.Helper()
	var found []string
	for _, ev := range history {
		js, err := temporalproto.CustomJSONMarshalOptions{
			Metadata: map[string]any{commonpb.EnablePayloadShorthandMetadataKey: true},
		}.Marshal(ev)
		require.NoError(t, err)
		wire, err := proto.Marshal(ev)
		require.NoError(t, err)
		if strings.Contains(string(js), s) || strings.Contains(string(wire), s) {
			name := ev.GetEventType().String()
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
				name += " " + a.GetActivityType().GetName()
			}
			found = append(found, name)
		}
	}
	return found
}

func TestE2E_withTheCodecNoEventOfTheHistoriesHoldsTheUserData(t *testing.T) {
	create, entity := createWithSecret(t, codecOptions(t))

	for _, history := range [][]*historypb.HistoryEvent{create, entity} {
		assert.Empty(t, eventsHolding(t, history, secret))
		assert.Empty(t, eventsHolding(t, history, "cloud-config"))
	}
}

func TestE2E_withoutTheCodecTheUserDataIsInTheWorkflowInputOnce(t *testing.T) {
	history, _ := createWithSecret(t, client.Options{})

	// The workflow's input, once: UploadISO is a local activity, whose input the history does
	// not keep, and no result, failure, marker, memo or search attribute holds it.
	require.Equal(t, []string{"WorkflowExecutionStarted"}, eventsHolding(t, history, secret))
	start, err := proto.Marshal(history[0])
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(start), secret))
}
