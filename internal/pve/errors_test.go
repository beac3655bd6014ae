package pve_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pve/pvefixture"
)

func TestErrorFromResponse_table(t *testing.T) {
	const missing = "Configuration file 'nodes/pve1/qemu-server/123456.conf' does not exist"
	tests := []struct {
		name   string
		status int
		reason string
		body   string
		want   *pve.APIError
	}{
		{
			name:   "json message loses its trailing newline",
			status: 500, reason: missing,
			body: `{"data":null,"message":"` + missing + `\n"}`,
			want: &pve.APIError{Status: 500, Reason: missing, Message: missing},
		},
		{
			name:   "json message loses a trailing CRLF",
			status: 500, reason: "VM is locked (clone)",
			body: `{"message":"VM is locked (clone)\r\n","data":null}`,
			want: &pve.APIError{Status: 500, Reason: "VM is locked (clone)", Message: "VM is locked (clone)"},
		},
		{
			name:   "errors map of a 400",
			status: 400, reason: "Parameter verification failed.",
			body: `{"errors":{"newid":"type check ('integer') failed - got 'abc'","name":"invalid format - value does not look like a valid DNS name\n"},"data":null,"message":"Parameter verification failed.\n"}`,
			want: &pve.APIError{Status: 400, Reason: "Parameter verification failed.", Message: "Parameter verification failed.",
				Errors: map[string]string{
					"newid": "type check ('integer') failed - got 'abc'",
					"name":  "invalid format - value does not look like a valid DNS name\n",
				}},
		},
		{
			name:   "empty errors map stays nil",
			status: 400, reason: "Parameter verification failed.",
			body: `{"errors":{},"data":null,"message":"Parameter verification failed.\n"}`,
			want: &pve.APIError{Status: 400, Reason: "Parameter verification failed.", Message: "Parameter verification failed."},
		},
		{
			name:   "json without a message, as before PVE 8.3",
			status: 500, reason: missing,
			body: `{"data":null}`,
			want: &pve.APIError{Status: 500, Reason: missing},
		},
		{
			name:   "empty body of a 401",
			status: 401, reason: "Authentication failed!",
			want: &pve.APIError{Status: 401, Reason: "Authentication failed!"},
		},
		{
			name:   "plain text of the http layer",
			status: 501, reason: "Method 'GET /nodes/pve1/foo' not implemented",
			body: "Method 'GET /nodes/pve1/foo' not implemented\n",
			want: &pve.APIError{Status: 501, Reason: "Method 'GET /nodes/pve1/foo' not implemented",
				Message: "Method 'GET /nodes/pve1/foo' not implemented"},
		},
		{
			name:   "html of a proxy in front",
			status: 502, reason: "Bad Gateway",
			body: "<html><body><h1>502 Bad Gateway</h1></body></html>",
			want: &pve.APIError{Status: 502, Reason: "Bad Gateway", Message: "<html><body><h1>502 Bad Gateway</h1></body></html>"},
		},
		{
			name:   "broken json is kept as text",
			status: 500, reason: "Internal Server Error",
			body: `{"data":null,"message":"got no wor`,
			want: &pve.APIError{Status: 500, Reason: "Internal Server Error", Message: `{"data":null,"message":"got no wor`},
		},
		{
			name:   "reason is trimmed",
			status: 596, reason: " Connection timed out ",
			want: &pve.APIError{Status: 596, Reason: "Connection timed out"},
		},
		{
			name:   "body over 64 KiB is capped",
			status: 500, reason: "Internal Server Error",
			body: strings.Repeat("x", 64<<10+100),
			want: &pve.APIError{Status: 500, Reason: "Internal Server Error", Message: strings.Repeat("x", 64<<10)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, pve.ErrorFromResponse(tt.status, tt.reason, []byte(tt.body)))
		})
	}
}

func TestAPIError_error(t *testing.T) {
	tests := []struct {
		name string
		err  *pve.APIError
		want string
	}{
		{
			name: "message",
			err:  &pve.APIError{Status: 500, Reason: "VM is locked (clone)", Message: "VM is locked (clone)"},
			want: "proxmox api: 500 VM is locked (clone)",
		},
		{
			name: "reason when there is no message",
			err:  &pve.APIError{Status: 401, Reason: "Authentication failed!"},
			want: "proxmox api: 401 Authentication failed!",
		},
		{
			name: "errors sorted by parameter, newlines trimmed",
			err: &pve.APIError{Status: 400, Reason: "Parameter verification failed.", Message: "Parameter verification failed.",
				Errors: map[string]string{
					"vmid":  "invalid format - value does not look like a valid VM ID\n",
					"newid": "type check ('integer') failed - got 'abc'",
				}},
			want: "proxmox api: 400 Parameter verification failed. (newid: type check ('integer') failed - got 'abc'; " +
				"vmid: invalid format - value does not look like a valid VM ID)",
		},
		{
			name: "status alone",
			err:  &pve.APIError{Status: 596},
			want: "proxmox api: 596",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.err.Error())
		})
	}
}

func TestAPIError_textPrefersMessageOverReason(t *testing.T) {
	err := &pve.APIError{Status: 500, Reason: "first line", Message: "first line\nsecond line"}
	assert.Equal(t, "first line\nsecond line", err.Text())
}

// An APIError is built from the status line and body alone, so what it prints is Proxmox's
// text and never the request: no token header, no URL with its query.
func TestAPIError_errorTextNeverHasTokenOrQuery(t *testing.T) {
	for _, name := range fixtureNames(t) {
		r := pvefixture.Load(t, name)
		if r.Status < 400 {
			continue
		}
		e := r.APIError()
		for _, s := range []string{e.Error(), e.Text()} {
			assert.NotRegexp(t, tokenRE, s, name)
			assert.NotContains(t, s, "/api2/json", name)
			assert.NotRegexp(t, `\?[\w-]+=`, s, name)
		}
	}
}
