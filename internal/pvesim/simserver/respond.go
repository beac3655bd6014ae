package simserver

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
)

const jsonContentType = "application/json;charset=UTF-8"

// setPVEHeaders sets the headers pveproxy sends with every answer.
func setPVEHeaders(h http.Header) {
	date := time.Now().UTC().Format(http.TimeFormat)
	h.Set("Cache-Control", "max-age=0")
	h.Set("Date", date)
	h.Set("Expires", date)
	h.Set("Pragma", "no-cache")
	h.Set("Server", "pve-api-daemon/3.0")
}

// writeData answers 200 with {"data": ...}.
func (s *Server) writeData(w http.ResponseWriter, r *http.Request, data any) int {
	body, err := json.Marshal(struct {
		Data any `json:"data"`
	}{render(data)})
	if err != nil {
		return s.writeFailure(w, r, fmt.Errorf("encode response: %w", err))
	}
	h := w.Header()
	setPVEHeaders(h)
	h.Set("Content-Type", jsonContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body) // an error means the client has gone; there is no one left to tell
	return http.StatusOK
}

// writeFailure answers an error from reading, routing or the API: APIErrors as PVE's API
// errors, HTTP-layer errors as plain text, pvesim.ErrDropConnection and a cancelled request by
// dropping the connection, anything else as the 500 a Perl die becomes.
func (s *Server) writeFailure(w http.ResponseWriter, r *http.Request, err error) int {
	var apiErr *pve.APIError
	var httpErr *httpError
	switch {
	case errors.As(err, &apiErr):
		return s.writeAPIError(w, r, apiErr)
	case errors.As(err, &httpErr):
		return s.writePlain(w, r, httpErr.status, httpErr.msg)
	case errors.Is(err, pvesim.ErrDropConnection), errors.Is(err, context.Canceled):
		return s.drop(w, r)
	case errors.Is(err, pvesim.ErrAnswerHeld):
		return s.hold(w, r)
	}
	return s.writeAPIError(w, r, &pve.APIError{Status: http.StatusInternalServerError, Message: err.Error()})
}

// writeAPIError answers an API error: the reason phrase is its Reason (or the first line of
// its Message), the body {"data":null,"message":"...\n","errors":{...}}. An empty Message
// leaves "message" out, as PVE before 8.3 did.
//
// A 501 from the API (a path or method no handler serves) is such an answer too: pve-manager
// PVE/HTTPServer.pm rest_handler returns {status => 501, message => "Method '$method
// $rel_uri' not implemented"}, which the json formatter (pve-http-server
// Formatter/Standard.pm) writes as {"data":null,"message":"..."}; that message has no
// trailing newline, unlike a die's. Only the HTTP layer's own 501s are plain text (writePlain).
func (s *Server) writeAPIError(w http.ResponseWriter, r *http.Request, e *pve.APIError) int {
	if e.Status >= statusRelayFirst && e.Message == "" {
		// AnyEvent::HTTP's statuses, which pveproxy relays with their reason and no body.
		return s.writeError(w, r, e.Status, e.Reason, "", nil)
	}
	payload := struct {
		Data    any               `json:"data"`
		Message string            `json:"message,omitempty"`
		Errors  map[string]string `json:"errors,omitempty"`
	}{Errors: e.Errors}
	switch {
	case e.Status == http.StatusNotImplemented:
		payload.Message = e.Message
	case e.Message != "":
		payload.Message = e.Message + "\n"
	}
	body, _ := json.Marshal(payload) // strings and a map of strings always encode
	return s.writeError(w, r, e.Status, cmp.Or(e.Reason, e.Message), jsonContentType, body)
}

// writePlain answers an error of pveproxy's HTTP layer, whose body is the message as it is and
// which has no Content-Type (pve-http-server AnyEvent.pm sub error: "lack of content type here
// means either 'application/octet-stream' or the client can guess").
func (s *Server) writePlain(w http.ResponseWriter, r *http.Request, status int, msg string) int {
	return s.writeError(w, r, status, msg, "", []byte(msg))
}

// unauthorized answers 401 the way pveproxy does: after the configured delay, with an empty
// body and no Content-Length, then closes the connection.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, reason string) int {
	if s.authDelay > 0 {
		t := time.NewTimer(s.authDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return s.drop(w, r)
		}
	}
	return s.writeBare(w, r, http.StatusUnauthorized, reason)
}

// writeBare answers status with reason and nothing else: no body, no Content-Length, as
// pveproxy's response() writes an HTTP::Response without content (pve-http-server AnyEvent.pm:
// remove_header("Content-Length")), then closes the connection.
func (s *Server) writeBare(w http.ResponseWriter, r *http.Request, status int, reason string) int {
	h := http.Header{}
	setPVEHeaders(h)
	h.Set("Connection", "close")
	return s.writeRaw(w, r, status, reason, h, nil)
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, status int, msg, contentType string, body []byte) int {
	status, reason, ok := statusLine(status, msg)
	if !ok {
		body = nil
	}
	h := http.Header{}
	setPVEHeaders(h)
	h.Set("Connection", "close")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if len(body) > 0 && contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return s.writeRaw(w, r, status, reason, h, body)
}

// statusLine returns the status and reason phrase PVE sends for an error message: the
// message's first line. A first line that still holds a CR would break the status line, so
// PVE answers 400 Bad Request with an empty body instead; ok is false then
// (pve-http-server AnyEvent.pm response).
func statusLine(status int, msg string) (code int, reason string, ok bool) {
	if msg == "" {
		msg = http.StatusText(status)
	}
	line, _, _ := strings.Cut(msg, "\n")
	if strings.ContainsRune(line, '\r') {
		return http.StatusBadRequest, http.StatusText(http.StatusBadRequest), false
	}
	return status, line, true
}

// drainLimit is how much of an unread request body is read before the connection is closed:
// closing with unread data makes the kernel reset the connection, which can destroy the answer
// before the client reads it.
const drainLimit = 1 << 20

// writeRaw writes a complete answer on the hijacked connection and closes it. net/http cannot
// send a reason phrase of its own choosing, and PVE's errors live in theirs.
func (s *Server) writeRaw(w http.ResponseWriter, r *http.Request, status int, reason string, h http.Header, body []byte) int {
	io.CopyN(io.Discard, r.Body, drainLimit)
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Only HTTP/2 connections cannot be hijacked, and the server does not offer HTTP/2;
		// should one get here, answer with net/http's reason phrase rather than not at all.
		maps.Copy(w.Header(), h)
		w.WriteHeader(status)
		w.Write(body)
		return status
	}
	defer conn.Close()
	// Write errors stick to buf and surface at Flush.
	fmt.Fprintf(buf, "HTTP/1.1 %03d %s\r\n", status, reason)
	h.Write(buf)
	buf.WriteString("\r\n")
	buf.Write(body)
	if err := buf.Flush(); err != nil {
		s.log.Debug("pvesim write answer", "status", status, "error", err)
	}
	return status
}

// statusRelayFirst is the first of AnyEvent::HTTP's own statuses (595-599), which pveproxy
// relays when it could not reach pvedaemon or another node.
const statusRelayFirst = 595

// heldAnswerLimit bounds how long hold keeps a connection, should the client never give up.
const heldAnswerLimit = 2 * time.Minute

// hold answers nothing until the client gives up (or heldAnswerLimit passes), then drops the
// connection: a call whose answer is stuck behind a busy pvedaemon.
func (s *Server) hold(w http.ResponseWriter, r *http.Request) int {
	t := time.NewTimer(heldAnswerLimit)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
	return s.drop(w, r)
}

// drop closes the connection without answering, as a crashed or restarted pveproxy would.
func (s *Server) drop(w http.ResponseWriter, r *http.Request) int {
	io.CopyN(io.Discard, r.Body, drainLimit)
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
	return 0
}
