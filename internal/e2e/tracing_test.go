package e2e_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/internal/telemetry"
	"github.com/pveflow/pveflow/internal/telemetry/export"
	"github.com/pveflow/pveflow/internal/telemetry/spantest"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// tracedCreate asks for a proxy whose user-data holds secret, traced into a span recorder, on
// the real client over the simulator's REST API. It returns the spans, the result and the
// secret of the API token, which the simulator makes anew for each server: a sentinel no span
// may hold. (The token's id is no secret: Proxmox writes it into every task's UPID.)
func tracedCreate(t *testing.T) ([]sdktrace.ReadOnlySpan, proxyvm.CreateProxyResult, string) {
	t.Helper()
	recorder := tracetest.NewSpanRecorder()
	tp := export.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	tracing, err := telemetry.TracingInterceptor(tp)
	require.NoError(t, err)
	srv, err := simserver.Start(simserver.Options{API: newCluster(), Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	token, err := os.ReadFile(srv.TokenFile())
	require.NoError(t, err)
	_, tokenSecret, ok := strings.Cut(strings.TrimSpace(string(token)), "=")
	require.True(t, ok)
	cfg := fastConfig(t)
	cfg.Proxmox.URL, cfg.Proxmox.CAFile, cfg.Proxmox.TokenFile = srv.URL(), srv.CAFile(), srv.TokenFile()
	api, err := pve.NewClient(pve.ClientConfig{
		URL: srv.URL(), CAFile: srv.CAFile(), TokenFile: srv.TokenFile(), WrapTransport: export.PVETransport(tp),
	})
	require.NoError(t, err)
	s := startStackWith(t, api, cfg, client.Options{Interceptors: []interceptor.ClientInterceptor{tracing}})

	in := createInput(uid)
	in.UserData = "#cloud-config\npassword: " + secret + "\n"
	res, err := served[proxyvm.CreateProxyResult](t, s.startCreate(in))
	require.NoError(t, err)
	// The worker ends the workflow's span as the workflow returns, about when its result comes.
	eventually(t, "the workflow span ends", func() bool {
		return len(named(recorder.Ended(), "RunWorkflow:"+core.CreateProxyName)) == 1
	})
	// The create started the storage's admission, in its trace, whose grant is a call of its
	// own: cancelled, the idle admission closes and its span ends.
	require.NoError(t, s.client.CancelWorkflow(context.Background(), admissionOfHome(s).GetID(), ""))
	eventually(t, "the admission's span ends", func() bool {
		return len(named(recorder.Ended(), "RunWorkflow:"+core.CloneAdmissionName)) == 1
	})
	return recorder.Ended(), res, tokenSecret
}

// named are the spans of spans called name.
func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func TestE2E_tracesNestHTTPUnderActivitiesUnderTheWorkflow(t *testing.T) {
	spans, res, _ := tracedCreate(t)

	byID := make(map[string]sdktrace.ReadOnlySpan, len(spans))
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
	}
	parentName := func(s sdktrace.ReadOnlySpan) string {
		if p, ok := byID[s.Parent().SpanID().String()]; ok {
			return p.Name()
		}
		return "(none)"
	}
	// The request's span is the trace's root; the entity's RunWorkflow:Proxy, under it, runs
	// on and has not ended.
	request := named(spans, "UpdateWithStartWorkflow:"+core.CreateUpdate)
	require.Len(t, request, 1)
	startChild := named(spans, "StartChildWorkflow:"+core.CreateProxyName)
	require.Len(t, startChild, 1)
	entity := startChild[0].Parent().SpanID()
	run := named(spans, "RunWorkflow:"+core.CreateProxyName)
	require.Len(t, run, 1)
	admission := named(spans, "RunWorkflow:"+core.CloneAdmissionName)
	require.Len(t, admission, 1)
	assert.Equal(t, "SignalWithStartWorkflow:"+core.CloneAdmissionName, parentName(admission[0]), "the create's request started the admission")
	assert.Equal(t, startChild[0].SpanContext().SpanID(), run[0].Parent().SpanID(), "RunWorkflow under StartChildWorkflow")

	var httpSpans, activitySpans int
	for _, s := range spans {
		assert.Equal(t, request[0].SpanContext().TraceID(), s.SpanContext().TraceID(), "%s in the request's trace", s.Name())
		switch kind, _, _ := strings.Cut(s.Name(), ":"); {
		case strings.HasPrefix(s.Name(), "PVE "):
			httpSpans++
			assert.True(t, strings.HasPrefix(parentName(s), "RunActivity:"), "%s under %s", s.Name(), parentName(s))
		case kind == "RunActivity":
			if s.Name() != "RunActivity:DescribeRun" && s.Name() != "RunActivity:SignalRun" { // ask Temporal, not Proxmox
				activitySpans++
			}
			assert.Equal(t, "StartActivity"+strings.TrimPrefix(s.Name(), "RunActivity"), parentName(s))
		case kind == "StartActivity":
			assert.Contains(t, []trace.SpanID{run[0].SpanContext().SpanID(), entity, admission[0].SpanContext().SpanID()}, s.Parent().SpanID(), "%s under RunWorkflow, not %s", s.Name(), parentName(s))
		}
	}
	assert.Positive(t, activitySpans)
	assert.GreaterOrEqual(t, httpSpans, activitySpans, "every activity but DescribeRun and SignalRun calls Proxmox at least once")

	upload := named(spans, "PVE POST /nodes/{node}/storage/{storage}/upload")
	require.Len(t, upload, 1)
	assert.Equal(t, "RunActivity:UploadISO", parentName(upload[0]))
	clone := named(spans, "RunActivity:Clone")
	require.Len(t, clone, 1)
	attrs := map[string]string{}
	for _, a := range clone[0].Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	assert.Equal(t, res.Node, attrs["pve.node"])
	assert.Equal(t, strconv.Itoa(res.VMID), attrs["pve.vmid"])
	assert.Contains(t, attrs["pve.upid"], ":qmclone:")
}

func TestE2E_noSpanHoldsTheTokenOrTheUserData(t *testing.T) {
	spans, _, tokenSecret := tracedCreate(t)
	require.NotEmpty(t, spans)

	for _, s := range spans {
		for _, text := range spantest.Texts(s) {
			for _, sentinel := range []string{secret, tokenSecret} {
				assert.NotContains(t, text, sentinel, "span %s", s.Name())
			}
		}
	}
}
