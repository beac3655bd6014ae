// Package codec encrypts what pveflow puts into Temporal's history: workflow and activity inputs
// and results (among them cloud-init user-data, which holds passwords and keys) and, through the
// failure converter, error messages and stack traces.
//
// The pieces:
//
//   - Codec, a converter.PayloadCodec that seals each payload with AES-256-GCM under keys read
//     from a key file (LoadKeyFile; the format is described there);
//   - Converters, the data converter and failure converter that a Temporal client (and so the
//     worker built on it) is given;
//   - NewHTTPHandler, the /encode and /decode endpoints of a codec server, with the CORS the
//     Temporal Web UI needs, so that the UI and `temporal workflow show --codec-endpoint` can
//     show decoded payloads.
//
// An encrypted payload has metadata encoding "binary/encrypted" and "encryption-key-id" (the
// ID of the key it was sealed with), as in Temporal's samples-go encryption sample. Its data is
// a 12-byte random nonce, then the AES-256-GCM ciphertext and 16-byte tag of the protobuf
// encoding of the original payload (metadata included).
//
// Nothing in this package logs a key or puts one into an error message; errors name keys by
// their IDs only.
package codec

import (
	"crypto/cipher"
	"errors"
	"fmt"
	"sort"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

const (
	// MetadataEncodingEncrypted is the metadata encoding of a payload Codec has encrypted.
	MetadataEncodingEncrypted = "binary/encrypted"
	// MetadataEncryptionKeyID is the metadata key holding the ID of the key a payload was
	// encrypted with.
	MetadataEncryptionKeyID = "encryption-key-id"
)

// Codec is an AES-256-GCM converter.PayloadCodec. It encrypts with one key and decrypts with
// any key of its key file, so that a key can be rotated while the payloads sealed with the old
// one still decode. Decode passes payloads that are not encrypted through unchanged, so
// histories recorded before encryption was turned on still decode.
//
// A Codec is safe for concurrent use.
type Codec struct {
	encryptKeyID string
	keys         map[string]cipher.AEAD // by key ID; each seals with a random nonce
}

var _ converter.PayloadCodec = (*Codec)(nil)

// EncryptKeyID returns the ID of the key Encode encrypts with: the first key of the key file.
func (c *Codec) EncryptKeyID() string { return c.encryptKeyID }

// KeyIDs returns the IDs of the keys Decode can decrypt with, sorted.
func (c *Codec) KeyIDs() []string {
	ids := make([]string, 0, len(c.keys))
	for id := range c.keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// String describes the Codec by its key IDs, so that printing one never prints key material.
func (c *Codec) String() string {
	return fmt.Sprintf("codec.Codec{encrypt: %s, keys: %s}", c.encryptKeyID, strings.Join(c.KeyIDs(), ","))
}

// GoString is String, for %#v.
func (c *Codec) GoString() string { return c.String() }

// Encode implements converter.PayloadCodec: each payload becomes a "binary/encrypted" payload
// sealed with the key EncryptKeyID names, under a fresh random nonce.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	aead := c.keys[c.encryptKeyID]
	result := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return payloads, fmt.Errorf("codec: marshal payload: %w", err)
		}
		result[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(MetadataEncodingEncrypted),
				MetadataEncryptionKeyID:    []byte(c.encryptKeyID),
			},
			Data: aead.Seal(nil, nil, plain, nil),
		}
	}
	return result, nil
}

// ErrUnknownKeyID is wrapped by Decode's error for a payload encrypted with a key that is not in
// the key file; the error's message names the key ID.
var ErrUnknownKeyID = errors.New("codec: unknown encryption key ID")

// Decode implements converter.PayloadCodec: "binary/encrypted" payloads are decrypted with the
// key their metadata names, and every other payload is returned as it is.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	result := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != MetadataEncodingEncrypted {
			result[i] = p
			continue
		}
		rawID, ok := p.GetMetadata()[MetadataEncryptionKeyID]
		if !ok {
			return payloads, fmt.Errorf("codec: encrypted payload has no %s metadata", MetadataEncryptionKeyID)
		}
		keyID := quoteKeyID(rawID)
		aead, ok := c.keys[string(rawID)]
		if !ok {
			return payloads, fmt.Errorf("%w %s: the key file has %s", ErrUnknownKeyID, keyID, strings.Join(c.KeyIDs(), ", "))
		}
		plain, err := aead.Open(nil, nil, p.GetData(), nil)
		if err != nil {
			// GCM's error says only "message authentication failed".
			return payloads, fmt.Errorf("codec: payload encrypted with key ID %s does not decrypt: the key differs from the one that encrypted it, or the payload is corrupt", keyID)
		}
		decoded := &commonpb.Payload{}
		if err := proto.Unmarshal(plain, decoded); err != nil {
			return payloads, fmt.Errorf("codec: payload encrypted with key ID %s decrypts to no payload: %w", keyID, err)
		}
		result[i] = decoded
	}
	return result, nil
}

// quoteKeyID quotes a key ID read from a payload's metadata for an error message, cut to a length
// no key ID of a key file exceeds: the metadata comes from history, not from us.
func quoteKeyID(id []byte) string {
	if len(id) > maxKeyIDLength {
		return fmt.Sprintf("%q...", id[:maxKeyIDLength])
	}
	return fmt.Sprintf("%q", id)
}
