package export

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/pveflow/pveflow/internal/pveschema"
)

// PVETransport is a pve.ClientConfig.WrapTransport that makes each Proxmox request a client span
// of tp, the child of the span on the request's context: in an activity, RunActivity:<type>,
// which telemetry.PVETarget annotates with what the call acts on.
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
