package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pveflow/pveflow/internal/pve"
)

// The attributes of what an activity acts on, on its span.
const (
	AttrNode    = attribute.Key("pve.node")
	AttrVMID    = attribute.Key("pve.vmid")
	AttrStorage = attribute.Key("pve.storage")
	AttrUPID    = attribute.Key("pve.upid")
)

// PVETarget is what a Proxmox call acts on, as far as it is known.
type PVETarget struct {
	Node    string
	VMID    int
	Storage string
	UPID    pve.UPID
}

// Annotate puts the known fields of t on the span of ctx (RunActivity:<type> in an activity), so
// that a trace can be found by node, VM, storage or task. It does nothing when ctx has no
// recording span.
func (t PVETarget) Annotate(ctx context.Context) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	if t.Node != "" {
		attrs = append(attrs, AttrNode.String(t.Node))
	}
	if t.VMID != 0 {
		attrs = append(attrs, AttrVMID.Int(t.VMID))
	}
	if t.Storage != "" {
		attrs = append(attrs, AttrStorage.String(t.Storage))
	}
	if t.UPID != "" {
		attrs = append(attrs, AttrUPID.String(string(t.UPID)))
	}
	span.SetAttributes(attrs...)
}
