package export

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestPVESpanName_isTheEndpointsPathTemplate(t *testing.T) {
	for _, tc := range []struct{ method, url, want string }{
		{"GET", "https://pve1:8006/api2/json/nodes/pve1/qemu/4242/config", "PVE GET /nodes/{node}/qemu/{vmid}/config"},
		{"PUT", "https://pve1:8006/api2/json/nodes/pve1/qemu/4242/config", "PVE PUT /nodes/{node}/qemu/{vmid}/config"},
		{"GET", "https://pve1:8006/api2/json/cluster/resources?type=vm", "PVE GET /cluster/resources"},
		{"DELETE", "https://pve1:8006/api2/json/nodes/pve1/qemu/4242?purge=1", "PVE DELETE /nodes/{node}/qemu/{vmid}"},
		{"GET", "https://pve1:8006/api2/json/nodes/pve1/tasks/UPID:pve1:00001234:00ABCDEF:65F00000:qmclone:9000:root@pam:/status",
			"PVE GET /nodes/{node}/tasks/{upid}/status"},
		{"DELETE", "https://pve1:8006/api2/json/nodes/pve1/storage/local/content/local:iso%2Fproxy-seed.iso",
			"PVE DELETE /nodes/{node}/storage/{storage}/content/{volume}"},
		{"POST", "https://pve1:8006/api2/json/nodes/pve1/storage/local/upload", "PVE POST /nodes/{node}/storage/{storage}/upload"},
		{"GET", "https://pve1:8006/api2/json/no/such/endpoint", "PVE GET"},
		{"GET", "https://pve1:8006/elsewhere", "PVE GET"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			r, err := http.NewRequest(tc.method, tc.url, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want, pveSpanName("", r))
		})
	}
}

func TestPVETransport_recordsNeitherHeadersNorBodies(t *testing.T) {
	const token, body = "PVEAPIToken=pveflow@pve!sim=token-sentinel", "user-data-sentinel"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"data":"`+body+`"}`)
	}))
	t.Cleanup(srv.Close)
	recorder := tracetest.NewSpanRecorder()
	c := &http.Client{Transport: PVETransport(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))(http.DefaultTransport)}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/api2/json/nodes/pve1/storage/local/upload", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", token)

	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())

	spans := recorder.Ended()
	require.Len(t, spans, 1)
	assert.Equal(t, "PVE POST /nodes/{node}/storage/{storage}/upload", spans[0].Name())
	assert.Contains(t, spans[0].Attributes(), attribute.Int("http.response.status_code", 200))
	for _, a := range spans[0].Attributes() {
		assert.NotContains(t, string(a.Key)+"="+a.Value.String(), "sentinel")
	}
}
