package codec

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const uiOrigin = "http://127.0.0.1:8233"

// codecServer returns a codec server handler for uiOrigin, and an encrypted payload of "x" with
// the plain payload it came from.
func codecServer(t *testing.T) (http.Handler, *commonpb.Payload, *commonpb.Payload) {
	t.Helper()
	c := loadCodec(t, "k1 "+newKey(t)+"\n")
	h, err := NewHTTPHandler(c, uiOrigin)
	require.NoError(t, err)
	plain := plainPayload(t, "x")
	encoded, err := c.Encode([]*commonpb.Payload{plain})
	require.NoError(t, err)
	return h, plain, encoded[0]
}

// decodeRequest is what the Web UI posts to /decode.
func decodeRequest(t *testing.T, path, origin string, p *commonpb.Payload) *http.Request {
	t.Helper()
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{p}})
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Namespace", "default")
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	return r
}

// preflight is the browser's OPTIONS before it posts from origin.
func preflight(origin string) *http.Request {
	r := httptest.NewRequest(http.MethodOptions, "/decode", nil)
	r.Header.Set("Origin", origin)
	r.Header.Set("Access-Control-Request-Method", "POST")
	r.Header.Set("Access-Control-Request-Headers", "content-type,x-namespace")
	return r
}

func TestHTTPHandler_decodeForUIOrigin(t *testing.T) {
	h, plain, encoded := codecServer(t)
	w := httptest.NewRecorder()

	h.ServeHTTP(w, decodeRequest(t, "/decode", uiOrigin, encoded))

	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, uiOrigin, w.Header().Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "POST, GET, OPTIONS", w.Header().Get("Access-Control-Allow-Methods"))
	assert.Equal(t, "Content-Type, X-Namespace, Authorization, Authorization-Extras", w.Header().Get("Access-Control-Allow-Headers"))
	assert.Equal(t, "true", w.Header().Get("Access-Control-Allow-Credentials"))
	var got commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(w.Body.Bytes(), &got))
	require.Len(t, got.Payloads, 1)
	assert.True(t, proto.Equal(plain, got.Payloads[0]), "decoded %v, want %v", got.Payloads[0], plain)
}

func TestHTTPHandler_preflightFromUIOrigin(t *testing.T) {
	h, _, _ := codecServer(t)
	w := httptest.NewRecorder()

	h.ServeHTTP(w, preflight(uiOrigin))

	assert.Equal(t, http.StatusNoContent, w.Code)
	assert.Equal(t, uiOrigin, w.Header().Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "POST, GET, OPTIONS", w.Header().Get("Access-Control-Allow-Methods"))
	assert.Contains(t, w.Header().Get("Access-Control-Allow-Headers"), "X-Namespace")
	assert.Equal(t, "true", w.Header().Get("Access-Control-Allow-Credentials"))
}

func TestHTTPHandler_refusesOtherOriginPreflight(t *testing.T) {
	h, _, _ := codecServer(t)
	w := httptest.NewRecorder()

	h.ServeHTTP(w, preflight("http://evil.example:8233"))

	assert.Equal(t, http.StatusForbidden, w.Code)
	assert.Empty(t, w.Header().Get("Access-Control-Allow-Origin"))
	assert.Empty(t, w.Header().Get("Access-Control-Allow-Credentials"))
}

func TestHTTPHandler_refusesOtherOriginDecode(t *testing.T) {
	h, _, encoded := codecServer(t)
	w := httptest.NewRecorder()

	// localhost is not 127.0.0.1 to a browser: a different origin.
	h.ServeHTTP(w, decodeRequest(t, "/decode", "http://localhost:8233", encoded))

	assert.Equal(t, http.StatusForbidden, w.Code)
	assert.Empty(t, w.Header().Get("Access-Control-Allow-Origin"))
	assert.NotContains(t, w.Body.String(), "payloads")
}

func TestHTTPHandler_decodeForCLIWithoutOrigin(t *testing.T) {
	h, plain, encoded := codecServer(t)
	w := httptest.NewRecorder()

	// temporal workflow show --codec-endpoint posts to {endpoint}/{namespace}/decode.
	h.ServeHTTP(w, decodeRequest(t, "/default/decode", "", encoded))

	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Empty(t, w.Header().Get("Access-Control-Allow-Origin"))
	var got commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(w.Body.Bytes(), &got))
	require.Len(t, got.Payloads, 1)
	assert.True(t, proto.Equal(plain, got.Payloads[0]))
}

func TestNewHTTPHandler_refusesOriginABrowserNeverSends(t *testing.T) {
	c := loadCodec(t, "k1 "+newKey(t)+"\n")
	for _, origin := range []string{
		"http://127.0.0.1:8233/",
		"127.0.0.1:8233",
		"http://127.0.0.1:8233/ui",
		"ftp://127.0.0.1",
		"",
	} {
		_, err := NewHTTPHandler(c, origin)

		assert.ErrorContains(t, err, "is not scheme://host[:port]", origin)
	}
}
