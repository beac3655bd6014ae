package codec

import (
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// KeyFileEnv names the variable that gives pveflow's programs their key file
// (starter.CodecKeyFileEnv). The errors of this package name it, as it is what a user sets.
const KeyFileEnv = "PVEFLOW_CODEC_KEY_FILE"

// MakeRunKeyFile is the key file of `make run`'s stack (internal/demo/run.sh), from the top of
// the repository: the errors of this package name it, as the stack a newcomer meets first.
const MakeRunKeyFile = ".run/codec.key"

// sameKeyFile ends the errors for a payload encrypted with a key the key file lacks.
const sameKeyFile = "use the worker's key file: the worker and its clients need the same one"

// permanentFailureType is pveflow's failure type (core.FailPermanent) for what starting
// again does not mend: `pveflow` exits 3 for it. This package cannot import workflows.
const permanentFailureType = "Permanent"

// payloadError is the error of decoding a payload that the keys at hand cannot read. Its problem
// says what is wrong and what to set, and never holds a key or the payload's content.
type payloadError struct{ problem string }

func (e *payloadError) Error() string { return "payload " + e.problem }

// Converters returns the data converter and the failure converter of a Temporal client (and so
// of the worker built on it) with the keys of c, for client.Options{DataConverter: dc,
// FailureConverter: fc}:
//
//   - dc is the SDK's default data converter (JSON and the rest) with c applied to every payload.
//     It refuses to decode a payload that is not encrypted ("binary/null" aside, which holds
//     nothing): a worker with a key would otherwise run a workflow whose input (user-data and
//     its passwords) a client without the key stored in clear, and say nothing.
//   - fc is the SDK's default failure converter over dc, with a failure's message and stack
//     trace left plain (EncodeCommonAttributes off) and its details, payloads, encrypted. A
//     failure's message is what the Web UI shows first of a pending activity's last failure and
//     of a failed workflow; encrypted, it reads "Encoded failure" there, the real text nested
//     below. pveflow's messages carry no secret by design: they name the task, the node, the VM
//     and what Proxmox answered, never the token or the user-data (ProxySpec.Check gives its
//     size only), which worker's TestSecrets_userDataAndTokenAppearInNoLogErrorOrHistory and
//     activities' TestSecrets_neverInLogsErrorsOrResults hold. An error that comes of a payload
//     dc cannot read (the workflow's input, refused) fails Permanent and non-retryable, and a
//     failure an earlier worker encrypted with a key c lacks reads as one line naming the key
//     and the key file.
//
// The worker, the starter and everything else that reads or writes pveflow's workflows must
// use both, with the same keys. The Web UI then shows ciphertext for payloads (inputs,
// results, summaries, current details), unless it is pointed at a codec server
// (NewHTTPHandler).
func Converters(c *Codec) (converter.DataConverter, converter.FailureConverter) {
	return converters(strict{c})
}

// KeylessConverters returns the data converter and the failure converter of a Temporal client
// without a key: the SDK's defaults, writing and reading plain payloads, except that a payload
// or failure encrypted by a Codec fails with one line that names its key and says to set
// PVEFLOW_CODEC_KEY_FILE, instead of "payload encoding is not supported" or "Encoded failure".
// Like Converters, an error that comes of such a payload fails Permanent.
func KeylessConverters() (converter.DataConverter, converter.FailureConverter) {
	return converters(keyless{})
}

func converters(pc converter.PayloadCodec) (converter.DataConverter, converter.FailureConverter) {
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), pc)
	fc := temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc})
	return dc, failureConverter{FailureConverter: fc, codec: pc}
}

// strict is a Codec that refuses to decode plain payloads.
type strict struct{ *Codec }

func (s strict) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	for _, p := range payloads {
		if !isEncrypted(p) && !isNil(p) {
			return payloads, &payloadError{fmt.Sprintf("not encrypted, and %s is set here (%s), so it is refused: "+
				"whoever wrote it, the client that started the workflow most likely, must encrypt too: "+
				"export %s=<the worker's key file> where it runs (make run: %s)", KeyFileEnv, s.path, KeyFileEnv, MakeRunKeyFile)}
		}
	}
	return s.Codec.Decode(payloads)
}

// isNil reports whether p is the SDK's plain encoding of nil, which holds nothing to protect.
func isNil(p *commonpb.Payload) bool {
	return string(p.GetMetadata()[converter.MetadataEncoding]) == converter.MetadataEncodingNil && len(p.GetData()) == 0
}

// keyless is the converter.PayloadCodec of a client without a key: it leaves payloads as they
// are, and fails to decode an encrypted one with an error that says what to set.
type keyless struct{}

func (keyless) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	return payloads, nil
}

func (keyless) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	for _, p := range payloads {
		if isEncrypted(p) {
			return payloads, &payloadError{fmt.Sprintf("encrypted with key ID %s, and %s is not set: set it to the worker's key file (make run: %s)",
				quoteKeyID(p.GetMetadata()[MetadataEncryptionKeyID]), KeyFileEnv, MakeRunKeyFile)}
		}
	}
	return payloads, nil
}

// failureConverter is the SDK's default failure converter, with what its payload codec cannot
// read made plain to see.
type failureConverter struct {
	converter.FailureConverter
	codec converter.PayloadCodec
}

// ErrorToFailure makes an error that comes of a payload the codec cannot read (the SDK wraps
// one for a workflow's or an activity's input) a Permanent, non-retryable failure: the payload
// is in history, so a retry fails alike. An error that already is an ApplicationError keeps its
// type.
func (f failureConverter) ErrorToFailure(err error) *failurepb.Failure {
	var unreadable *payloadError
	var appErr *temporal.ApplicationError
	if errors.As(err, &unreadable) && !errors.As(err, &appErr) {
		err = temporal.NewNonRetryableApplicationError(err.Error(), permanentFailureType, nil)
	}
	return f.FailureConverter.ErrorToFailure(err)
}

// FailureToError reads failure as the default failure converter does, except that the first
// failure of its chain whose encoded message the codec cannot decrypt reads as the codec's
// reason (its key ID and what to set), without the causes below it, which the same keys
// sealed. The default would read it as "Encoded failure". pveflow no longer encrypts failure
// messages (Converters), but workers before it did, and their failures stay in histories for
// the namespace's retention.
func (f failureConverter) FailureToError(failure *failurepb.Failure) error {
	depth, reason := f.unreadable(failure)
	if reason == nil {
		return f.FailureConverter.FailureToError(failure)
	}
	readable := proto.Clone(failure).(*failurepb.Failure)
	level := readable
	for range depth {
		level = level.GetCause()
	}
	level.Message = "the failure's message " + reason.problem
	level.StackTrace, level.EncodedAttributes, level.Cause = "", nil, nil
	return f.FailureConverter.FailureToError(readable)
}

// unreadable returns the depth in failure's chain of the first failure whose encrypted
// attributes the codec cannot decode, and why; a nil reason when there is none.
func (f failureConverter) unreadable(failure *failurepb.Failure) (int, *payloadError) {
	for depth, level := 0, failure; level != nil; depth, level = depth+1, level.GetCause() {
		attrs := level.GetEncodedAttributes()
		if !isEncrypted(attrs) {
			continue
		}
		var reason *payloadError
		if _, err := f.codec.Decode([]*commonpb.Payload{attrs}); errors.As(err, &reason) {
			return depth, reason
		}
	}
	return 0, nil
}
