package telemetry

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pveschema"
)

// PVETransport is a pve.ClientConfig.WrapTransport that makes each Proxmox request a client span
// of tp, the child of the span on the request's context: in an activity, RunActivity:<type>.
//
// A span is named "PVE <method> <path template>", as "PVE GET /nodes/{node}/qemu/{vmid}/config",
// the template being the API schema's; and carries otelhttp's attributes: the method, url.full
// (the path with its values, and the query, which holds no secret in any of pveflow's calls),
// the server's address and port, the status code. Request and response headers, the API token's
// Authorization header among them, and bodies, the seed ISO with its user-data among them, are
// never recorded.
func PVETransport(tp trace.TracerProvider) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(tp), otelhttp.WithSpanNameFormatter(pveSpanName))
	}
}

// apiRoot is where the Proxmox API's paths start in a request's URL.
const apiRoot = "/api2/json"

// pveSpanName names the span of r by the API endpoint it calls, or by its method alone when it
// calls none the schema knows: a span name must not take every VMID and UPID as a new name.
func pveSpanName(_ string, r *http.Request) string {
	if _, path, ok := strings.Cut(r.URL.EscapedPath(), apiRoot); ok {
		if ep, ok := pveschema.Lookup(r.Method, path); ok {
			return "PVE " + r.Method + " " + ep.Path
		}
	}
	return "PVE " + r.Method
}

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
