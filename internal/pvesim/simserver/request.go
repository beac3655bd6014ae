package simserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// Body limits.
const (
	// maxPostSize is pveproxy's limit for a request body other than an upload
	// (pve-http-server AnyEvent.pm $limit_max_post).
	maxPostSize = 512 << 10
	// maxUploadSize bounds an upload, which is held in memory (see readUpload); pveflow's seed
	// ISOs are tens of KiB. PVE itself has no limit.
	maxUploadSize = 256 << 20
)

// An httpError is an answer from pveproxy's HTTP layer rather than from an API method: PVE
// writes its message as plain text, not in the JSON envelope.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// request is a request's parameters, merged as PVE merges them, and an upload's file.
type request struct {
	params url.Values
	file   *uploadFile
}

// uploadFile is the file part of an upload.
type uploadFile struct {
	name string
	data []byte
}

// uploadPathRE is how pveproxy recognises an upload before it reads the body
// (pve-manager PVE/HTTPServer.pm auth_handler).
var uploadPathRE = regexp.MustCompile(`^/nodes/[^/]+/storage/[^/]+/upload$`)

// readRequest reads the parameters of a request for rel, the path below /api2/json: the query
// for GET and DELETE, which may not carry a body, the form body and then the query (which
// wins) for POST and PUT, and the multipart body for an upload.
func readRequest(r *http.Request, rel string) (*request, error) {
	if r.ContentLength > 0 && r.Method != http.MethodPost && r.Method != http.MethodPut {
		return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("Unexpected content for method '%s'", r.Method)}
	}
	if r.Method == http.MethodPost && uploadPathRE.MatchString(rel) {
		return readUpload(r)
	}
	params := url.Values{}
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		form, err := readForm(r)
		if err != nil {
			return nil, err
		}
		params = form
	}
	for k, v := range r.URL.Query() {
		params[k] = v
	}
	params.Del("_dc") // the GUI's cache buster, which PVE drops before verification
	return &request{params: params}, nil
}

// readForm reads a POST or PUT body: application/x-www-form-urlencoded or, as PVE 9 takes it,
// application/json. pveproxy reads a body of either type (or of none) and refuses any other
// with 506 (pve-http-server AnyEvent.pm unshift_read_header); extract_params then decodes a
// JSON body into the parameters and everything else as a form.
func readForm(r *http.Request) (url.Values, error) {
	if r.ContentLength > maxPostSize {
		return nil, &httpError{http.StatusNotImplemented, "for data too large"}
	}
	ctype := r.Header.Get("Content-Type")
	mt := ""
	if ctype != "" {
		mt, _, _ = mime.ParseMediaType(ctype)
		if mt != "application/x-www-form-urlencoded" && mt != "application/json" {
			// pveproxy's answer, 506, to a content type it does not take, multipart included.
			return nil, &httpError{http.StatusVariantAlsoNegotiates, fmt.Sprintf("upload 'Content-Type '%s' not implemented", ctype)}
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPostSize+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxPostSize {
		return nil, &httpError{http.StatusNotImplemented, "for data too large"}
	}
	if mt == "application/json" {
		return jsonParams(body)
	}
	// PVE's decoder is lenient: what does not decode is kept as far as it does.
	form, _ := url.ParseQuery(string(body))
	return form, nil
}

// jsonParams turns a JSON body into parameters as PVE's schema check sees them (pve-http-server
// AnyEvent.pm extract_params: decode_json): a string as it is, a number as written, a boolean
// as Perl stringifies JSON's booleans, 1 or 0. A null is left out: PVE's verification takes an
// undefined value as a missing one (pve-common JSONSchema.pm check_prop). An array or object is
// passed on as its JSON text for the schema to judge. A body that is not a JSON object makes
// decode_json or the hash access die, which pveproxy answers 500 in plain text; Perl's text
// names its own file and line, which the simulator does not copy.
func jsonParams(body []byte) (url.Values, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return nil, &httpError{http.StatusInternalServerError, "malformed JSON string: the body is not a JSON object"}
	}
	params := make(url.Values, len(obj))
	for k, raw := range obj {
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, &httpError{http.StatusInternalServerError, "malformed JSON string: the body is not a JSON object"}
		}
		switch v := v.(type) {
		case nil:
			continue
		case string:
			params.Set(k, v)
		case json.Number:
			params.Set(k, v.String())
		case bool:
			params.Set(k, map[bool]string{true: "1", false: "0"}[v])
		default:
			params.Set(k, string(raw))
		}
	}
	return params, nil
}

// uploadFields are the text fields pveproxy's upload parser picks up before the file part.
var uploadFields = map[string]bool{"content": true, "checksum-algorithm": true, "checksum": true}

// readUpload parses an upload the way pveproxy's streaming parser does (pve-http-server
// AnyEvent.pm file_upload_multipart): the text fields content, checksum-algorithm and checksum
// come first, then the file part, whose form name must be "filename" and whose filename
// attribute names the stored file. Nothing after the file part is read as a field, so a
// content field sent after the file is missing when the parameters are verified. The query
// string seeds the parameters, as in PVE.
//
// The file is buffered in memory to learn its size before the model reads it (pveproxy spools
// it to a temporary file for the same reason); the model keeps ISOs in memory anyway, and the
// request's Content-Length bounds the buffer.
//
// pveproxy answers the multipart problems from its HTTP layer: plain text, status 500.
func readUpload(r *http.Request) (*request, error) {
	ctype := r.Header.Get("Content-Type")
	mt, mp, err := mime.ParseMediaType(ctype)
	if err != nil || mt != "multipart/form-data" || mp["boundary"] == "" {
		return nil, uploadError(fmt.Sprintf("upload 'Content-Type '%s' not implemented", ctype))
	}
	if r.ContentLength > maxUploadSize {
		return nil, &httpError{http.StatusNotImplemented, "for data too large"}
	}
	params := r.URL.Query()
	mr := multipart.NewReader(r.Body, mp["boundary"])
	for {
		part, err := mr.NextPart()
		if err != nil {
			// No file part before the body ended, or a body that is not multipart.
			return nil, uploadError("upload failed")
		}
		disposition := part.Header.Get("Content-Disposition")
		dt, dp, err := mime.ParseMediaType(disposition)
		if err != nil || dt != "form-data" {
			kind, _, _ := strings.Cut(disposition, ";")
			return nil, uploadError(fmt.Sprintf("wrong Content-Disposition '%s' in multipart, expected 'form-data'", kind))
		}
		name := dp["name"]
		if filename := dp["filename"]; filename != "" {
			if name != "filename" {
				return nil, uploadError(fmt.Sprintf("wrong field name '%s' for file upload, expected 'filename'", name))
			}
			data, err := io.ReadAll(part)
			if err != nil {
				return nil, uploadError("upload failed")
			}
			filename = strings.TrimSpace(filename)
			params.Set("filename", filename)
			return &request{params: params, file: &uploadFile{name: filename, data: data}}, nil
		}
		if !uploadFields[name] {
			// pveproxy's parser stalls on any other field and gives up at the end of the body.
			return nil, uploadError("upload failed")
		}
		value, err := io.ReadAll(io.LimitReader(part, maxPostSize))
		if err != nil {
			return nil, uploadError("upload failed")
		}
		params.Set(name, strings.TrimSpace(string(value)))
	}
}

func uploadError(msg string) *httpError {
	return &httpError{http.StatusInternalServerError, msg}
}
