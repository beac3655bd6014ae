package codec

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

func TestConverters_failureMessageEncoded(t *testing.T) {
	_, fc := Converters(loadCodec(t, "k1 "+newKey(t)+"\n"))
	err := temporal.NewApplicationErrorWithCause("cloud-init rejected: "+sentinel, "CloudInit",
		errors.New("pve said: "+sentinel))

	failure := fc.ErrorToFailure(err)

	assert.Equal(t, "Encoded failure", failure.GetMessage())
	assert.Equal(t, "Encoded failure", failure.GetCause().GetMessage())
	assert.Equal(t, "binary/encrypted", string(failure.GetEncodedAttributes().GetMetadata()["encoding"]))
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
