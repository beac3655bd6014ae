// Package codec encrypts what pveflow puts into Temporal's history: workflow and activity inputs
// and results (among them cloud-init user-data, which holds passwords and keys) and, through the
// failure converter, error messages and stack traces.
//
// The pieces:
//
//   - Codec, a converter.PayloadCodec that seals each payload with AES-256-GCM under keys read
//     from a key file (LoadKeyFile; the format is described there);
//   - Converters, the data converter and failure converter that a Temporal client with a key
//     (and so the worker built on it) is given, which refuse plain payloads; KeylessConverters,
//     those of a client without a key, which say what to set when they meet an encrypted one;
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
// one still decode. Decode passes payloads that are not encrypted through unchanged, as the
// codec server must to show a history holding both; the converters of a client or worker
// (Converters) refuse them instead.
//
// A Codec is safe for concurrent use.
type Codec struct {
	encryptKeyID string
	keys         map[string]cipher.AEAD // by key ID; each seals with a random nonce
	// path is the key file's, for errors that tell which file lacks a key.
	path string
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

// Decode implements converter.PayloadCodec: "binary/encrypted" payloads are decrypted with the
// key their metadata names, and every other payload is returned as it is. A payload it cannot
// decrypt fails it with an error that names the key ID and the key file.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	result := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if !isEncrypted(p) {
			result[i] = p
			continue
		}
		rawID, ok := p.GetMetadata()[MetadataEncryptionKeyID]
		if !ok {
			return payloads, &payloadError{fmt.Sprintf("encrypted without %s metadata: pveflow's codec did not write it", MetadataEncryptionKeyID)}
		}
		keyID := quoteKeyID(rawID)
		aead, ok := c.keys[string(rawID)]
		if !ok {
			return payloads, &payloadError{fmt.Sprintf("encrypted with key ID %s, which %s (%s) does not hold: %s", keyID, KeyFileEnv, c.path, sameKeyFile)}
		}
		plain, err := aead.Open(nil, nil, p.GetData(), nil)
		if err != nil {
			// GCM's error says only "message authentication failed".
			return payloads, &payloadError{fmt.Sprintf("encrypted with key ID %s does not decrypt with the key of that ID in %s (%s): the key differs from the one that encrypted it, or the data is corrupt; %s", keyID, KeyFileEnv, c.path, sameKeyFile)}
		}
		decoded := &commonpb.Payload{}
		if err := proto.Unmarshal(plain, decoded); err != nil {
			return payloads, &payloadError{fmt.Sprintf("encrypted with key ID %s decrypts to no payload: %v", keyID, err)}
		}
		result[i] = decoded
	}
	return result, nil
}

// isEncrypted reports whether p is a payload Codec.Encode wrote.
func isEncrypted(p *commonpb.Payload) bool {
	return string(p.GetMetadata()[converter.MetadataEncoding]) == MetadataEncodingEncrypted
}

// quoteKeyID quotes a key ID read from a payload's metadata for an error message, cut to a length
// no key ID of a key file exceeds: the metadata comes from history, not from us.
func quoteKeyID(id []byte) string {
	if len(id) > maxKeyIDLength {
		return fmt.Sprintf("%q...", id[:maxKeyIDLength])
	}
	return fmt.Sprintf("%q", id)
}
