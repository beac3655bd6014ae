package codec

import (
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// Converters returns the data converter and the failure converter of a Temporal client whose
// payloads c encodes, for client.Options{DataConverter: dc, FailureConverter: fc}:
//
//   - dc is the SDK's default data converter (JSON and the rest) with c applied to every payload
//     it produces;
//   - fc is the SDK's default failure converter over dc with EncodeCommonAttributes on: a
//     failure's message and stack trace go into its encoded attributes, and the history shows
//     "Encoded failure" in their place.
//
// The worker, the starter and everything else that reads or writes pveflow's workflows must
// use both, with the same keys. The Web UI then shows "Encoded failure" for errors and
// ciphertext for payloads, unless it is pointed at a codec server (NewHTTPHandler).
func Converters(c converter.PayloadCodec) (converter.DataConverter, converter.FailureConverter) {
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
	fc := temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter:          dc,
		EncodeCommonAttributes: true,
	})
	return dc, fc
}
