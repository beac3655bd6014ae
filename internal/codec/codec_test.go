package codec

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// plainPayload is a payload as the default data converter writes it.
func plainPayload(t *testing.T, v any) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	require.NoError(t, err)
	return p
}

func TestCodec_roundTrip(t *testing.T) {
	c := loadCodec(t, "k1 "+newKey(t)+"\n")
	in := []*commonpb.Payload{plainPayload(t, "user-data"), plainPayload(t, map[string]int{"vmid": 100})}

	encoded, err := c.Encode(in)
	require.NoError(t, err)
	decoded, err := c.Decode(encoded)
	require.NoError(t, err)

	require.Len(t, decoded, len(in))
	for i := range in {
		assert.True(t, proto.Equal(in[i], decoded[i]), "payload %d: %v, want %v", i, decoded[i], in[i])
	}
}

func TestEncode_marksEncodingAndKeyID(t *testing.T) {
	c := loadCodec(t, "k2 "+newKey(t)+"\nk1 "+newKey(t)+"\n")

	encoded, err := c.Encode([]*commonpb.Payload{plainPayload(t, "x")})
	require.NoError(t, err)

	assert.Equal(t, map[string][]byte{
		"encoding":          []byte("binary/encrypted"),
		"encryption-key-id": []byte("k2"),
	}, encoded[0].Metadata)
}

func TestEncode_freshNonceForEachPayload(t *testing.T) {
	c := loadCodec(t, "k1 "+newKey(t)+"\n")
	p := plainPayload(t, "same")

	encoded, err := c.Encode([]*commonpb.Payload{p, p})
	require.NoError(t, err)

	assert.NotEqual(t, encoded[0].Data, encoded[1].Data)
}

func TestDecode_oldKeyAfterRotation(t *testing.T) {
	oldKey := newKey(t)
	before := loadCodec(t, "2024 "+oldKey+"\n")
	encoded, err := before.Encode([]*commonpb.Payload{plainPayload(t, "recorded before the rotation")})
	require.NoError(t, err)

	after := loadCodec(t, "2025 "+newKey(t)+"\n2024 "+oldKey+"\n")
	decoded, err := after.Decode(encoded)

	require.NoError(t, err)
	var s string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(decoded[0], &s))
	assert.Equal(t, "recorded before the rotation", s)
}

func TestDecode_unknownKeyIDNamesTheIDAndTheKeyFile(t *testing.T) {
	retiredKey, currentKey := newKey(t), newKey(t)
	encoded, err := loadCodec(t, "retired-1 "+retiredKey+"\n").Encode([]*commonpb.Payload{plainPayload(t, "x")})
	require.NoError(t, err)
	path := writeKeyFile(t, "current-2 "+currentKey+"\n")
	current, err := LoadKeyFile(path)
	require.NoError(t, err)

	_, err = current.Decode(encoded)

	require.EqualError(t, err, `payload encrypted with key ID "retired-1", which PVEFLOW_CODEC_KEY_FILE (`+path+
		`) does not hold: use the worker's key file: the worker and its clients need the same one`)
	assert.NotContains(t, err.Error(), retiredKey)
	assert.NotContains(t, err.Error(), currentKey)
}

func TestDecode_sameIDOtherKeyFails(t *testing.T) {
	keyA, keyB := newKey(t), newKey(t)
	encoded, err := loadCodec(t, "k1 "+keyA+"\n").Encode([]*commonpb.Payload{plainPayload(t, "x")})
	require.NoError(t, err)

	_, err = loadCodec(t, "k1 "+keyB+"\n").Decode(encoded)

	require.ErrorContains(t, err, `key ID "k1" does not decrypt`)
	assert.NotContains(t, err.Error(), keyA)
	assert.NotContains(t, err.Error(), keyB)
}

// The codec server decodes whatever the UI shows, plain payloads among them; Converters refuse them.
func TestDecode_plainPayloadPassesThrough(t *testing.T) {
	c := loadCodec(t, "k1 "+newKey(t)+"\n")
	plain := plainPayload(t, "recorded before the codec")
	want := proto.Clone(plain)

	decoded, err := c.Decode([]*commonpb.Payload{plain})

	require.NoError(t, err)
	assert.Same(t, plain, decoded[0])
	assert.True(t, proto.Equal(want, decoded[0]))
}

func TestCodec_printsNoKey(t *testing.T) {
	key := newKey(t)
	c := loadCodec(t, "k1 "+key+"\n")

	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		assert.Equal(t, "codec.Codec{encrypt: k1, keys: k1}", fmt.Sprintf(format, c), format)
	}
}
