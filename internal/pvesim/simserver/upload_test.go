package simserver

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

const uploadUPID = "UPID:pve1:00001A2B:0001E240:6B005330:imgcopy::pveflow@pve!sim:"

// uploadRecorder records the uploads it is given.
type uploadRecorder struct {
	pve.API
	mu      sync.Mutex
	uploads []recordedUpload
}

type recordedUpload struct {
	node, storage, filename string
	data                    []byte
	size                    int64
}

func (u *uploadRecorder) UploadISO(_ context.Context, node, storage, filename string, r io.Reader, size int64) (pve.UPID, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.uploads = append(u.uploads, recordedUpload{node: node, storage: storage, filename: filename, data: data, size: size})
	return uploadUPID, nil
}

func (u *uploadRecorder) recorded() []recordedUpload {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.uploads
}

// multipartBody writes the parts in order: each is a text field, or the file part when file
// is set.
type formPart struct {
	name, value string
	file        string
}

func multipartBody(t *testing.T, parts ...formPart) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		if p.file != "" {
			fw, err := w.CreateFormFile(p.name, p.file)
			require.NoError(t, err)
			_, err = fw.Write([]byte(p.value))
			require.NoError(t, err)
			continue
		}
		require.NoError(t, w.WriteField(p.name, p.value))
	}
	require.NoError(t, w.Close())
	return &buf, w.FormDataContentType()
}

func uploadRequest(t *testing.T, s *Server, body io.Reader, contentType string) *http.Request {
	t.Helper()
	req := newRequest(t, s, http.MethodPost, "/nodes/pve1/storage/local/upload", body)
	req.Header.Set("Content-Type", contentType)
	return req
}

func TestServer_uploadPassesFileToAPI(t *testing.T) {
	api := &uploadRecorder{}
	s := startServer(t, api)
	iso := bytes.Repeat([]byte("CD001"), 4096)
	body, ctype := multipartBody(t,
		formPart{name: "content", value: "iso"},
		formPart{name: "filename", file: "seed-123456.iso", value: string(iso)})

	resp, respBody := send(t, s, uploadRequest(t, s, body, ctype))

	require.Equal(t, http.StatusOK, resp.StatusCode, respBody)
	assert.JSONEq(t, `{"data":"`+uploadUPID+`"}`, respBody)
	assert.Equal(t, []recordedUpload{{node: "pve1", storage: "local", filename: "seed-123456.iso", data: iso, size: int64(len(iso))}}, api.recorded())
}

// An upload without Content-Length is sent chunked, which pveproxy refuses before anything
// else (pve-http-server AnyEvent.pm process_header). Its "upload without content length header
// not supported" sits inside `if ($len)` and is never sent.
func TestServer_uploadWithoutContentLengthRefusedAsChunked(t *testing.T) {
	api := &uploadRecorder{}
	s := startServer(t, api)
	body, ctype := multipartBody(t,
		formPart{name: "content", value: "iso"},
		formPart{name: "filename", file: "seed.iso", value: "CD001"})
	// Hiding the reader's length makes net/http send the body chunked, without Content-Length.
	req := uploadRequest(t, s, io.MultiReader(body), ctype)

	resp, respBody := send(t, s, req)

	assert.Equal(t, "501 chunked transfer encoding not supported", resp.Status)
	assert.Equal(t, "chunked transfer encoding not supported", respBody)
	assert.Empty(t, api.recorded())
}

func TestServer_uploadWrongFieldNameRefused(t *testing.T) {
	api := &uploadRecorder{}
	s := startServer(t, api)
	body, ctype := multipartBody(t,
		formPart{name: "content", value: "iso"},
		formPart{name: "file", file: "seed.iso", value: "CD001"})

	resp, respBody := send(t, s, uploadRequest(t, s, body, ctype))

	assert.Equal(t, "500 wrong field name 'file' for file upload, expected 'filename'", resp.Status)
	assert.Equal(t, "wrong field name 'file' for file upload, expected 'filename'", respBody)
	assert.Empty(t, api.recorded())
}

// pveproxy reads the text fields before the file part only; a content field after the file
// is never seen, so parameter verification finds it missing.
func TestServer_uploadContentAfterFileRefused(t *testing.T) {
	api := &uploadRecorder{}
	s := startServer(t, api)
	body, ctype := multipartBody(t,
		formPart{name: "filename", file: "seed.iso", value: "CD001"},
		formPart{name: "content", value: "iso"})

	resp, respBody := send(t, s, uploadRequest(t, s, body, ctype))

	assert.Equal(t, "400 Parameter verification failed.", resp.Status)
	assert.Equal(t, map[string]string{"content": "property is missing and it is not optional"}, decodeError(t, respBody).Errors)
	assert.Empty(t, api.recorded())
}

func TestServer_uploadRefusedWithoutFilePart(t *testing.T) {
	api := &uploadRecorder{}
	s := startServer(t, api)
	body, ctype := multipartBody(t, formPart{name: "content", value: "iso"})

	resp, respBody := send(t, s, uploadRequest(t, s, body, ctype))

	assert.Equal(t, "500 upload failed", resp.Status)
	assert.Equal(t, "upload failed", respBody)
	assert.Empty(t, api.recorded())
}

func TestServer_uploadOfOtherContentNotSimulated(t *testing.T) {
	api := &uploadRecorder{}
	s := startServer(t, api)
	body, ctype := multipartBody(t,
		formPart{name: "content", value: "vztmpl"},
		formPart{name: "filename", file: "debian.tar.zst", value: "x"})

	resp, _ := send(t, s, uploadRequest(t, s, body, ctype))

	assert.Equal(t, http.StatusNotImplemented, resp.StatusCode)
	assert.Empty(t, api.recorded())
}

func TestServer_multipartToOtherEndpointRefused(t *testing.T) {
	s := startServer(t, fixedAPI{})
	body, ctype := multipartBody(t, formPart{name: "cores", value: "2"})
	req := newRequest(t, s, http.MethodPut, "/nodes/pve1/qemu/123456/config", body)
	req.Header.Set("Content-Type", ctype)

	resp, _ := send(t, s, req)

	assert.Equal(t, "506 upload 'Content-Type '"+ctype+"' not implemented", resp.Status)
}
