package codec

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"go.temporal.io/sdk/converter"
)

// CORS answers for the origins NewHTTPHandler is given. The Web UI posts JSON with the
// namespace in X-Namespace and, when it passes the user's access token, Authorization and
// Authorization-Extras.
const (
	corsAllowMethods = "POST, GET, OPTIONS"
	corsAllowHeaders = "Content-Type, X-Namespace, Authorization, Authorization-Extras"
)

// NewHTTPHandler returns the handler of a codec server: the SDK's
// converter.NewPayloadCodecHTTPHandler(c), which answers POST to any path ending in /encode or
// /decode (so /decode and /{namespace}/decode alike) with c's Encode or Decode of the
// protobuf-JSON payloads of the body, wrapped in the CORS the Temporal Web UI needs.
//
// uiOrigins are the origins the Web UI is served from, each scheme://host[:port] exactly as a
// browser sends it in the Origin header, such as http://127.0.0.1:8233 or
// http://localhost:8233 (the two are different origins). A request from one of them gets
// Access-Control-Allow-Origin (that origin), -Methods, -Headers and -Credentials: true, and its
// preflight OPTIONS is answered 204 No Content. A request with any other Origin, preflight or
// not, is refused with 403 Forbidden. A request with no Origin (the temporal CLI's
// --codec-endpoint, curl) is served without CORS headers. With no uiOrigins, no browser may use
// the codec server.
//
// The handler does no authentication: listen on loopback, or put it behind something that
// authenticates, since it decrypts whatever is posted to it.
func NewHTTPHandler(c converter.PayloadCodec, uiOrigins ...string) (http.Handler, error) {
	for _, o := range uiOrigins {
		if err := checkOrigin(o); err != nil {
			return nil, err
		}
	}
	next := converter.NewPayloadCodecHTTPHandler(c)
	allowed := slices.Clone(uiOrigins)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Origin")
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !slices.Contains(allowed, origin) {
			http.Error(w, "origin not allowed", http.StatusForbidden)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Methods", corsAllowMethods)
		h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		h.Set("Access-Control-Allow-Credentials", "true")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	}), nil
}

// checkOrigin refuses an origin a browser never sends, such as one with a path or a trailing
// slash, which would never match and leave the UI without its codec server.
func checkOrigin(origin string) error {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" ||
		origin != u.Scheme+"://"+u.Host {
		return fmt.Errorf("codec: UI origin %q is not scheme://host[:port], such as http://127.0.0.1:8233", origin)
	}
	return nil
}
