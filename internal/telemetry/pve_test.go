package telemetry

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestPVETarget_annotatesTheSpanWithTheKnownFields(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)).Tracer("test").Start(context.Background(), "RunActivity:Clone")

	PVETarget{Node: "pve1", VMID: 4242}.Annotate(ctx)
	PVETarget{UPID: "UPID:pve1:00001234:00ABCDEF:65F00000:qmclone:9000:root@pam:"}.Annotate(ctx)
	span.End()

	assert.ElementsMatch(t, []attribute.KeyValue{
		AttrNode.String("pve1"),
		AttrVMID.Int(4242),
		AttrUPID.String("UPID:pve1:00001234:00ABCDEF:65F00000:qmclone:9000:root@pam:"),
	}, recorder.Ended()[0].Attributes())
}
