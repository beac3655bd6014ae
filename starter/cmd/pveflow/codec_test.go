package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/internal/syncbuf"
)

const uiOrigin = "http://127.0.0.1:8233"

// newKeyFile makes a key file with codec-keygen and returns its path.
func newKeyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "codec.key")
	code, _, stderr := runCLI(nil, "codec-keygen", "--out", path)
	require.Equal(t, exitOK, code, stderr)
	return path
}

// codecServer runs `pveflow codec-server` with the key file path in this process, on a free
// port, until the test ends, and returns its URL and its exit code's channel.
func codecServer(t *testing.T, path string, args ...string) (url string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncbuf.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, append([]string{"codec-server", "--listen", "127.0.0.1:0"}, args...),
			func(k string) string { return map[string]string{"PVEFLOW_CODEC_KEY_FILE": path}[k] },
			io.Discard, &stderr)
	}()
	listening := regexp.MustCompile(`codec server listening on (http://127\.0\.0\.1:\d+)`)
	require.Eventually(t, func() bool {
		m := listening.FindStringSubmatch(stderr.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "codec server did not start: %s", stderr.String())
	stopped := false
	stop = func() int {
		stopped = true
		cancel()
		select {
		case code := <-exit:
			return code
		case <-time.After(10 * time.Second):
			t.Fatal("codec server did not stop within 10s of its interrupt")
			return -1
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	return url, stop
}

// encrypted is the payload of s as a client with the key file path writes it.
func encrypted(t *testing.T, path, s string) (plain, sealed *commonpb.Payload) {
	t.Helper()
	keys, err := codec.LoadKeyFile(path)
	require.NoError(t, err)
	plain, err = converter.GetDefaultDataConverter().ToPayload(s)
	require.NoError(t, err)
	out, err := keys.Encode([]*commonpb.Payload{plain})
	require.NoError(t, err)
	return plain, out[0]
}

// postDecode posts p to url's /decode as the Web UI does from origin.
func postDecode(t *testing.T, url, origin string, p *commonpb.Payload) *http.Response {
	t.Helper()
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{p}})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/decode", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Namespace", "default")
	req.Header.Set("Origin", origin)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestCodecServer_decodesForTheWebUIWithItsCORS(t *testing.T) {
	path := newKeyFile(t)
	url, _ := codecServer(t, path)
	plain, sealed := encrypted(t, path, "#cloud-config\npassword: hunter2\n")

	resp := postDecode(t, url, uiOrigin, sealed)

	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, uiOrigin, resp.Header.Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "true", resp.Header.Get("Access-Control-Allow-Credentials"))
	assert.Contains(t, resp.Header.Get("Access-Control-Allow-Headers"), "X-Namespace")
	var got commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(body, &got))
	require.Len(t, got.Payloads, 1)
	assert.True(t, proto.Equal(plain, got.Payloads[0]), "decoded %v, want %v", got.Payloads[0], plain)
}

func TestCodecServer_uiOriginFlagReplacesTheDefault(t *testing.T) {
	path := newKeyFile(t)
	url, _ := codecServer(t, path, "--ui-origin", "http://localhost:8233")
	_, sealed := encrypted(t, path, "x")

	other := postDecode(t, url, "http://localhost:8233", sealed)
	embedded := postDecode(t, url, uiOrigin, sealed)

	assert.Equal(t, http.StatusOK, other.StatusCode)
	assert.Equal(t, "http://localhost:8233", other.Header.Get("Access-Control-Allow-Origin"))
	assert.Equal(t, http.StatusForbidden, embedded.StatusCode)
}

func TestCodecServer_stopsWithExit0WhenInterrupted(t *testing.T) {
	url, stop := codecServer(t, newKeyFile(t))

	code := stop()

	assert.Equal(t, exitOK, code)
	_, err := http.Get(url + "/decode")
	assert.Error(t, err, "still listening")
}

func TestCodecServer_withoutKeyFileIsAUsageError(t *testing.T) {
	code, _, stderr := runCLI(nil, "codec-server")

	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "pveflow: codec-server: PVEFLOW_CODEC_KEY_FILE is not set")
}

func TestCodecServer_badKeyFileNamesTheVariableAndFile(t *testing.T) {
	path := newKeyFile(t)
	require.NoError(t, os.Chmod(path, 0o644))

	code, _, stderr := runCLI(map[string]string{"PVEFLOW_CODEC_KEY_FILE": path}, "codec-server", "--listen", "127.0.0.1:0")

	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "pveflow: PVEFLOW_CODEC_KEY_FILE: codec: bad key file "+path+": mode 0644")
	assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
}

func TestCodecServer_originABrowserNeverSendsIsAUsageError(t *testing.T) {
	code, _, stderr := runCLI(map[string]string{"PVEFLOW_CODEC_KEY_FILE": newKeyFile(t)},
		"codec-server", "--listen", "127.0.0.1:0", "--ui-origin", "http://127.0.0.1:8233/")

	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, `--ui-origin: codec: UI origin "http://127.0.0.1:8233/" is not scheme://host[:port]`)
}

func TestCodecKeygen_writesALoadableKeyFileOnlyItsOwnerReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "codec.key")

	code, stdout, stderr := runCLI(nil, "codec-keygen", "--out", path)

	require.Equal(t, exitOK, code, stderr)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	keys, err := codec.LoadKeyFile(path)
	require.NoError(t, err)
	assert.Len(t, keys.KeyIDs(), 1)
	assert.Regexp(t, `^pveflow-\d{8}-[0-9a-f]{4}$`, keys.EncryptKeyID())
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "wrote key "+keys.EncryptKeyID()+" to "+path)
}

func TestCodecKeygen_eachKeyIsNew(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.key"), filepath.Join(dir, "b.key")
	for _, path := range []string{a, b} {
		code, _, stderr := runCLI(nil, "codec-keygen", "--out", path, "--id", "k1")
		require.Equal(t, exitOK, code, stderr)
	}

	// The same ID over different keys: what one encrypts the other cannot decrypt.
	_, sealed := encrypted(t, a, "x")
	other, err := codec.LoadKeyFile(b)
	require.NoError(t, err)
	_, err = other.Decode([]*commonpb.Payload{sealed})
	assert.ErrorContains(t, err, `key ID "k1" does not decrypt`)
}

func TestCodecKeygen_refusesToReplaceAFile(t *testing.T) {
	path := newKeyFile(t)
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	code, _, stderr := runCLI(nil, "codec-keygen", "--out", path)

	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "pveflow: codec-keygen: "+path+" exists")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after)
}

func TestCodecKeygen_usageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no file", []string{"codec-keygen"}, "codec-keygen: --out is required"},
		{"bad key ID", []string{"codec-keygen", "--out", filepath.Join(t.TempDir(), "k"), "--id", "a b"}, `codec-keygen: --id "a b": want 1 to 64 characters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(nil, tt.args...)

			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr, tt.want)
		})
	}
}

func TestRun_badCodecKeyFileStopsACommandBeforeConnecting(t *testing.T) {
	env, _ := unreachableTemporal(t)
	env["PVEFLOW_CODEC_KEY_FILE"] = filepath.Join(t.TempDir(), "missing.key")

	code, _, stderr := runCLI(env, "status", "--uid", "x")

	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "pveflow: PVEFLOW_CODEC_KEY_FILE: codec: key file: open "+env["PVEFLOW_CODEC_KEY_FILE"]+": no such file or directory")
}
