package codec

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// sentinel stands for a secret in cloud-init user-data.
const sentinel = "password: hunter2-sentinel-7f3a"

// createInput is shaped like a workflow input that carries user-data.
type createInput struct {
	Name     string
	UserData string
}

func TestConverters_roundTrip(t *testing.T) {
	dc, _ := Converters(loadCodec(t, "k1 "+newKey(t)+"\n"))
	in := createInput{Name: "proxy-1", UserData: "#cloud-config\n" + sentinel + "\n"}

	payloads, err := dc.ToPayloads(in)
	require.NoError(t, err)
	var out createInput
	require.NoError(t, dc.FromPayloads(payloads, &out))

	assert.Equal(t, in, out)
}

func TestConverters_userDataNotInEncodedBytes(t *testing.T) {
	dc, _ := Converters(loadCodec(t, "k1 "+newKey(t)+"\n"))

	payloads, err := dc.ToPayloads(createInput{Name: "proxy-1", UserData: "#cloud-config\n" + sentinel + "\n"})
	require.NoError(t, err)

	wire, err := proto.Marshal(payloads)
	require.NoError(t, err)
	assert.NotContains(t, string(wire), "hunter2")
	assert.NotContains(t, string(wire), "cloud-config")
}

func TestConverters_failureMessagePlainDetailsEncrypted(t *testing.T) {
	_, fc := Converters(loadCodec(t, "k1 "+newKey(t)+"\n"))
	err := temporal.NewApplicationErrorWithCause("clone task UPID:pve1:1 still running on node pve1 (for 55s)", "TaskRunning",
		errors.New("pve said: busy"), "user-data: "+sentinel)

	failure := fc.ErrorToFailure(err)

	assert.Equal(t, "clone task UPID:pve1:1 still running on node pve1 (for 55s)", failure.GetMessage(), "what the UI shows first")
	assert.Equal(t, "pve said: busy", failure.GetCause().GetMessage())
	assert.Nil(t, failure.GetEncodedAttributes())
	details := failure.GetApplicationFailureInfo().GetDetails().GetPayloads()
	require.Len(t, details, 1)
	assert.Equal(t, "binary/encrypted", string(details[0].GetMetadata()["encoding"]))
	wire, merr := proto.Marshal(failure)
	require.NoError(t, merr)
	assert.NotContains(t, string(wire), "hunter2")
}

func TestConverters_failureMessageDecodes(t *testing.T) {
	_, fc := Converters(loadCodec(t, "k1 "+newKey(t)+"\n"))
	failure := fc.ErrorToFailure(temporal.NewApplicationError("cloud-init rejected: "+sentinel, "CloudInit"))

	err := fc.FailureToError(failure)

	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.Equal(t, "cloud-init rejected: "+sentinel, appErr.Message())
	assert.Equal(t, "CloudInit", appErr.Type())
}

// decodeError is the error of the SDK's decoding of a workflow's input, plain payloads, by dc.
func decodeError(t *testing.T, dc converter.DataConverter, payloads *commonpb.Payloads) error {
	t.Helper()
	var in createInput
	err := dc.FromPayloads(payloads, &in)
	require.Error(t, err)
	// As internal_worker.go's workflowExecutor.Execute wraps it.
	return fmt.Errorf("unable to decode the workflow function input payload with error: %w, function name: %v", err, "CreateProxy")
}

// plainInput is a workflow input with user-data as a client without a key writes it.
func plainInput(t *testing.T) *commonpb.Payloads {
	t.Helper()
	payloads, err := converter.GetDefaultDataConverter().ToPayloads(createInput{Name: "proxy-1", UserData: sentinel})
	require.NoError(t, err)
	return payloads
}

func TestConverters_refusePlainPayloadsSayingWhatToSet(t *testing.T) {
	path := writeKeyFile(t, "k1 "+newKey(t)+"\n")
	c, err := LoadKeyFile(path)
	require.NoError(t, err)
	dc, _ := Converters(c)

	var in createInput
	err = dc.FromPayloads(plainInput(t), &in)

	require.EqualError(t, err, "payload not encrypted, and PVEFLOW_CODEC_KEY_FILE is set here ("+path+"), so it is refused: "+
		"whoever wrote it, the client that started the workflow most likely, must encrypt too: "+
		"export PVEFLOW_CODEC_KEY_FILE=<the worker's key file> where it runs (make run: .run/codec.key)")
	assert.Empty(t, in)
}

func TestConverters_readPlainNil(t *testing.T) {
	dc, _ := Converters(loadCodec(t, "k1 "+newKey(t)+"\n"))
	null, err := converter.GetDefaultDataConverter().ToPayload(nil)
	require.NoError(t, err)

	var out *createInput
	require.NoError(t, dc.FromPayload(null, &out))

	assert.Nil(t, out)
}

func TestConverters_refusedInputFailsPermanent(t *testing.T) {
	dc, fc := Converters(loadCodec(t, "k1 "+newKey(t)+"\n"))
	refused := decodeError(t, dc, plainInput(t))

	failure := fc.ErrorToFailure(refused)

	assert.Equal(t, "Permanent", failure.GetApplicationFailureInfo().GetType())
	assert.True(t, failure.GetApplicationFailureInfo().GetNonRetryable())
	assert.Contains(t, failure.GetMessage(), "unable to decode the workflow function input payload with error: payload not encrypted")
	assert.NotContains(t, failure.GetMessage(), sentinel, "the refusal never quotes the payload")
}

func TestConverters_applicationErrorOverARefusalKeepsItsType(t *testing.T) {
	dc, fc := Converters(loadCodec(t, "k1 "+newKey(t)+"\n"))
	err := temporal.NewApplicationError("upload ISO", "Transient", decodeError(t, dc, plainInput(t)))

	failure := fc.ErrorToFailure(err)

	assert.Equal(t, "Transient", failure.GetApplicationFailureInfo().GetType())
}

func TestKeylessConverters_writePlainPayloadsAsTheSDK(t *testing.T) {
	dc, _ := KeylessConverters()
	in := createInput{Name: "proxy-1", UserData: sentinel}

	got, err := dc.ToPayloads(in)
	require.NoError(t, err)

	want, err := converter.GetDefaultDataConverter().ToPayloads(in)
	require.NoError(t, err)
	assert.True(t, proto.Equal(want, got))
	var out createInput
	require.NoError(t, dc.FromPayloads(got, &out))
	assert.Equal(t, in, out)
}

func TestKeylessConverters_encryptedPayloadSaysToSetTheKeyFile(t *testing.T) {
	key := newKey(t)
	encrypting, _ := Converters(loadCodec(t, "k1 "+key+"\n"))
	payloads, err := encrypting.ToPayloads(createInput{Name: "proxy-1", UserData: sentinel})
	require.NoError(t, err)
	dc, _ := KeylessConverters()

	var out createInput
	err = dc.FromPayloads(payloads, &out)

	require.EqualError(t, err, `payload encrypted with key ID "k1", and PVEFLOW_CODEC_KEY_FILE is not set: `+
		`set it to the worker's key file (make run: .run/codec.key)`)
	assert.NotContains(t, err.Error(), key)
}

// encryptedFailure is the failure of a Permanent error whose message and cause hold sentinel,
// as a worker with the key file content wrote it before failure messages were left plain
// (EncodeCommonAttributes on): such failures stay in histories for the namespace's retention.
func encryptedFailure(t *testing.T, content string) *failurepb.Failure {
	t.Helper()
	dc, _ := Converters(loadCodec(t, content))
	fc := temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc, EncodeCommonAttributes: true})
	return fc.ErrorToFailure(temporal.NewNonRetryableApplicationError("cloud-init rejected: "+sentinel, "Permanent",
		errors.New("pve said: "+sentinel)))
}

func TestFailureToError_failureUnderAKeyItLacksIsOneLine(t *testing.T) {
	workerKey := newKey(t)
	otherPath := writeKeyFile(t, "k2 "+newKey(t)+"\n")
	samePath := writeKeyFile(t, "k1 "+newKey(t)+"\n")
	tests := []struct {
		name string
		fc   func(t *testing.T) converter.FailureConverter
		want string
	}{
		{"no key", func(*testing.T) converter.FailureConverter { _, fc := KeylessConverters(); return fc },
			`the failure's message encrypted with key ID "k1", and PVEFLOW_CODEC_KEY_FILE is not set: set it to the worker's key file (make run: .run/codec.key)`},
		{"another key ID", func(t *testing.T) converter.FailureConverter { return convertersOf(t, otherPath) },
			`the failure's message encrypted with key ID "k1", which PVEFLOW_CODEC_KEY_FILE (` + otherPath + `) does not hold: use the worker's key file: the worker and its clients need the same one`},
		{"another key of the same ID", func(t *testing.T) converter.FailureConverter { return convertersOf(t, samePath) },
			`the failure's message encrypted with key ID "k1" does not decrypt with the key of that ID in PVEFLOW_CODEC_KEY_FILE (` + samePath + `): ` +
				`the key differs from the one that encrypted it, or the data is corrupt; use the worker's key file: the worker and its clients need the same one`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.fc(t).FailureToError(encryptedFailure(t, "k1 "+workerKey+"\n"))

			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr)
			assert.Equal(t, tt.want, appErr.Message())
			assert.Equal(t, "Permanent", appErr.Type())
			assert.NoError(t, appErr.Unwrap(), "the causes, sealed alike, are left out")
			assert.NotContains(t, err.Error(), "Encoded failure")
			assert.NotContains(t, err.Error(), workerKey)
		})
	}
}

func TestFailureToError_plainFailureAboveAnEncryptedCause(t *testing.T) {
	sealed := encryptedFailure(t, "k1 "+newKey(t)+"\n")
	timeout := &failurepb.Failure{
		Message:     "activity StartToClose timeout",
		FailureInfo: &failurepb.Failure_TimeoutFailureInfo{TimeoutFailureInfo: &failurepb.TimeoutFailureInfo{}},
		Cause:       sealed,
	}
	_, fc := KeylessConverters()

	err := fc.FailureToError(timeout)

	assert.EqualError(t, err, `activity StartToClose timeout (type: Unspecified): the failure's message encrypted with key ID "k1", and `+
		`PVEFLOW_CODEC_KEY_FILE is not set: set it to the worker's key file (make run: .run/codec.key) (type: Permanent, retryable: false)`)
	assert.Equal(t, "Encoded failure", sealed.GetMessage(), "the failure it was given is left as it was")
}

func TestFailureToError_readableFailureIsTheSDKs(t *testing.T) {
	_, fc := Converters(loadCodec(t, "k1 "+newKey(t)+"\n"))

	err := fc.FailureToError(fc.ErrorToFailure(temporal.NewApplicationError("clone failed", "Transient")))

	assert.EqualError(t, err, "clone failed (type: Transient, retryable: true)")
}

// convertersOf is the failure converter of the key file at path.
func convertersOf(t *testing.T, path string) converter.FailureConverter {
	t.Helper()
	c, err := LoadKeyFile(path)
	require.NoError(t, err)
	_, fc := Converters(c)
	return fc
}
