package pve_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pve/pvefixture"
)

// tokenRE matches what an API token leaks as: the header scheme, or "user@realm!tokenid=" in
// front of a secret.
var tokenRE = regexp.MustCompile(`PVEAPIToken|![A-Za-z0-9._-]+=|(?i)secret`)

// data decodes the "data" of a successful fixture's JSON body into T.
func data[T any](t *testing.T, name string) T {
	t.Helper()
	var env struct {
		Data T `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(pvefixture.Load(t, name).Body), &env), name)
	return env.Data
}

// fixtureErr is the error a caller gets from a fixture: the *APIError of an HTTP error, the
// *TaskError of a task that stopped with an error, nil for anything else.
func fixtureErr(t *testing.T, name string) error {
	t.Helper()
	r := pvefixture.Load(t, name)
	if r.Status >= 400 {
		return r.APIError()
	}
	if !strings.HasPrefix(name, "task_status_") {
		return nil
	}
	s := data[pve.TaskStatus](t, name)
	if !s.Done() {
		return nil
	}
	_, err := s.Result()
	return err
}

func fixtureNames(t *testing.T) []string {
	t.Helper()
	names, err := pvefixture.Names()
	require.NoError(t, err)
	require.NotEmpty(t, names)
	return names
}

func TestFixtures_parseAndHoldNoToken(t *testing.T) {
	for _, name := range fixtureNames(t) {
		_, err := pvefixture.Read(name)
		require.NoError(t, err)
		raw, err := os.ReadFile(filepath.Join(pvefixture.Dir(), name+".json"))
		require.NoError(t, err)
		assert.NotRegexp(t, tokenRE, string(raw), name)
	}
}

func TestFixtures_successBodiesAreDataEnvelopes(t *testing.T) {
	for _, name := range fixtureNames(t) {
		r := pvefixture.Load(t, name)
		if r.Status >= 300 {
			continue
		}
		var env map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(r.Body), &env), name)
		assert.Contains(t, env, "data", name)
		assert.Equal(t, "OK", r.Reason, name)
	}
}

// PVE puts the first line of its message in the status line and, since 8.3, the message with
// its newline in the body; a fixture that disagrees with itself would teach the tests a shape
// no host sends.
func TestFixtures_reasonIsFirstLineOfBodyMessage(t *testing.T) {
	for _, name := range fixtureNames(t) {
		r := pvefixture.Load(t, name)
		var body struct {
			Message *string `json:"message"`
		}
		if r.Status < 400 || !strings.HasPrefix(r.Body, "{") {
			continue
		}
		require.NoError(t, json.Unmarshal([]byte(r.Body), &body), name)
		if body.Message == nil {
			continue
		}
		if r.Status != http.StatusNotImplemented {
			// rest_handler's 501 for a path or method without a handler is the one message
			// without a newline (pve-manager PVE/HTTPServer.pm rest_handler).
			assert.True(t, strings.HasSuffix(*body.Message, "\n"), "%s: message keeps its newline", name)
		}
		first, _, _ := strings.Cut(*body.Message, "\n")
		assert.Equal(t, first, r.Reason, name)
	}
}
