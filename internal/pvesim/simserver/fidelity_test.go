package simserver

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

// The tests in this file pin answers checked against PVE's sources; each names its source.

// pve-http-server AnyEvent.pm process_header refuses Transfer-Encoding: chunked with 501 before
// the URI or the token are looked at, and sub error sends the text as the body with no
// Content-Type.
func TestServer_chunkedRequestRefusedBeforeAuthentication(t *testing.T) {
	s := startServer(t, fixedAPI{}, func(o *Options) { o.AuthDelay = time.Minute })
	req, err := http.NewRequest(http.MethodPut, s.URL()+"/api2/json/nodes/pve1/qemu/123456/config",
		io.MultiReader(strings.NewReader("cores=2"))) // a reader of unknown length is sent chunked
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")

	resp, body := send(t, s, req) // no token: were it authenticated first, this would be a 401 after a minute

	assert.Equal(t, "501 chunked transfer encoding not supported", resp.Status)
	assert.Equal(t, "chunked transfer encoding not supported", body)
	assert.Empty(t, resp.Header.Get("Content-Type"))
}

// pve-http-server AnyEvent.pm extract_params decodes an application/json body into the
// parameters (PVE 9 takes both it and form encoding).
func TestServer_jsonBodyIsReadAsParameters(t *testing.T) {
	api := &writeRecorder{}
	s := startServer(t, api)
	req := newRequest(t, s, http.MethodPost, "/nodes/pve1/qemu/9000/clone",
		strings.NewReader(`{"newid":123456,"name":"proxy-1","full":true,"pool":null}`))
	req.Header.Set("Content-Type", "application/json")

	resp, body := send(t, s, req)

	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	api.mu.Lock()
	defer api.mu.Unlock()
	assert.Equal(t, []pve.CloneParams{{NewID: 123456, Name: "proxy-1", Full: true}}, api.clones)
}

func TestServer_jsonBodyThatIsNotAnObjectIs500(t *testing.T) {
	s := startServer(t, &writeRecorder{})
	req := newRequest(t, s, http.MethodPut, "/nodes/pve1/qemu/123456/config", strings.NewReader(`["cores"]`))
	req.Header.Set("Content-Type", "application/json")

	resp, _ := send(t, s, req)

	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
}

// volumeRecorder records the volumes DeleteVolume is asked to delete.
type volumeRecorder struct {
	pve.API
	mu      sync.Mutex
	volumes []string
}

func (v *volumeRecorder) DeleteVolume(_ context.Context, _, _, volid string) (pve.UPID, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.volumes = append(v.volumes, volid)
	return "", nil
}

// pveproxy unescapes the whole path before routing (pve-http-server AnyEvent.pm process_header:
// uri_unescape), and the storage content subclass takes the rest of the path as the volume
// (pve-storage API2/Storage/Status.pm: fragmentDelimiter set to the empty string, "IDs may
// contain a slash '/'"; pve-common RESTHandler.pm map_path_to_methods joins the rest with '/').
// So a volume ID's slash may come escaped or not.
func TestServer_volumeIDIsTheRestOfThePathEscapedOrNot(t *testing.T) {
	tests := []struct{ name, path string }{
		{"escaped", "/nodes/pve1/storage/local/content/" + url.PathEscape("local:iso/seed.iso")},
		{"unescaped slash", "/nodes/pve1/storage/local/content/local:iso/seed.iso"},
		{"unescaped, empty segments skipped", "/nodes/pve1/storage/local/content//local:iso//seed.iso"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &volumeRecorder{}
			s := startServer(t, api)

			resp, body := send(t, s, newRequest(t, s, http.MethodDelete, tt.path, nil))

			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			assert.Equal(t, []string{"local:iso/seed.iso"}, api.volumes)
		})
	}
}

// qemu-server API2/Qemu.pm clone_vm checks the pool first ($load_and_check:
// $rpcenv->check_pool_exist), and pve-access-control RPCEnvironment.pm check_pool_exist raises
// raise_perm_exc("pool '$pool' does not exist"): a 403 "Permission check failed (...)", which
// pveflow does not retry.
func TestServer_cloneIntoMissingPoolIs403(t *testing.T) {
	s := startServer(t, pvesim.New(pvesim.Default()))

	_, err := realClient(t, s).Clone(t.Context(), "pve1", 9000, pve.CloneParams{NewID: 123456, Full: true, Pool: "proxies"})

	var apiErr *pve.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusForbidden, apiErr.Status)
	assert.Equal(t, "Permission check failed (pool 'proxies' does not exist)", apiErr.Reason)
	assert.Equal(t, "Permission check failed (pool 'proxies' does not exist)", apiErr.Message)
	assert.Equal(t, pve.Permanent, pve.Classify(err))
}

// rest_handler names the path as it routed it, unescaped (pve-manager PVE/HTTPServer.pm), in
// the API's JSON answer (pve-http-server Formatter/Standard.pm).
func TestServer_unknownPathIsNamedUnescapedInAJSONAnswer(t *testing.T) {
	s := startServer(t, fixedAPI{})

	resp, body := send(t, s, newRequest(t, s, http.MethodGet, "/nodes/pve1/qemu/100/bogus%3Fx", nil))

	assert.Equal(t, "501 Method 'GET /nodes/pve1/qemu/100/bogus?x' not implemented", resp.Status)
	assert.JSONEq(t, `{"data":null,"message":"Method 'GET /nodes/pve1/qemu/100/bogus?x' not implemented"}`, body)
}

// pve-http-server AnyEvent.pm process_header answers a method it does not know with an
// HTTP::Response that has a reason and no content, which response() sends without a body or a
// Content-Length.
func TestServer_unknownMethodIs501WithoutBody(t *testing.T) {
	s := startServer(t, fixedAPI{})

	resp, body := send(t, s, newRequest(t, s, http.MethodPatch, "/version", nil))

	assert.Equal(t, "501 method 'PATCH' not available", resp.Status)
	assert.Empty(t, body)
	assert.Empty(t, resp.Header.Get("Content-Length"))
	assert.Empty(t, resp.Header.Get("Content-Type"))
}
