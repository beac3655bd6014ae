package pve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// APIError is a non-2xx answer from the Proxmox API. PVE puts the first line of its message in
// the HTTP reason phrase and, since PVE 8.3, the whole message in the JSON body's "message" too;
// Reason and Message hold both (Message without its trailing newline). Errors is the body's
// per-parameter map of a 400.
//
// Error never includes request headers, the URL's query or anything the token could leak into.
type APIError struct {
	Status  int
	Reason  string
	Message string
	Errors  map[string]string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "proxmox api: %d", e.Status)
	if text := e.Text(); text != "" {
		b.WriteString(" ")
		b.WriteString(text)
	}
	if len(e.Errors) > 0 {
		keys := make([]string, 0, len(e.Errors))
		for k := range e.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(" (")
		for i, k := range keys {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s: %s", k, strings.TrimRight(e.Errors[k], "\n"))
		}
		b.WriteString(")")
	}
	return b.String()
}

// Text is Proxmox's own message: the body's message when there is one, else the reason phrase.
func (e *APIError) Text() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Reason
}

// CallError is the error of one call of the Client: Op names the call and what it acts on
// ("status of VM 100 on node pve1"), Err says what went wrong. A caller that reports the error
// needs no context of its own: Op is it.
type CallError struct {
	Op  string
	Err error
}

func (e *CallError) Error() string { return e.Op + ": " + e.Err.Error() }

func (e *CallError) Unwrap() error { return e.Err }

func callError(op string, err error) error { return &CallError{Op: op, Err: err} }

// TaskError is a Proxmox task that stopped with an exit status other than OK or WARNINGS.
type TaskError struct {
	UPID       UPID
	ExitStatus string
}

func (e *TaskError) Error() string {
	info, err := ParseUPID(e.UPID)
	if err != nil {
		return fmt.Sprintf("proxmox task %s failed: %s", e.UPID, e.ExitStatus)
	}
	return fmt.Sprintf("proxmox %s task %s on node %s failed: %s", info.Type, e.UPID, info.Node, e.ExitStatus)
}

// Class says what a caller can do about an error.
type Class string

const (
	// Permanent errors do not go away by retrying: bad input, missing privileges, a foreign VM.
	Permanent Class = "Permanent"
	// Transient errors may go away by themselves: backend trouble, time-outs, lost connections.
	Transient Class = "Transient"
	// NotFound means the VM (or the object the call names) does not exist.
	NotFound Class = "NotFound"
	// Locked means the VM is locked by another operation (clone, backup, ...) or its config
	// file lock could not be taken in time; waiting helps.
	Locked Class = "Locked"
	// AlreadyExists means the VMID or name a call wanted to create is taken.
	AlreadyExists Class = "AlreadyExists"
	// AgentNotRunning means the QEMU guest agent does not answer yet.
	AgentNotRunning Class = "AgentNotRunning"
	// NotRunning means the VM is stopped, so a call that needs it running cannot answer.
	NotRunning Class = "NotRunning"
	// AlreadyRunning means a start found the VM running: what the start was for holds already.
	AlreadyRunning Class = "AlreadyRunning"
	// QuotaExceeded means a storage ran out of space.
	QuotaExceeded Class = "QuotaExceeded"
)

// ClassError is an error that already carries its class, such as the client's own
// "token file missing". Classify keeps that class.
type ClassError struct {
	Class Class
	Err   error
}

func (e *ClassError) Error() string { return e.Err.Error() }
func (e *ClassError) Unwrap() error { return e.Err }

// Classified returns err marked with class c.
func Classified(c Class, err error) error {
	return &ClassError{Class: c, Err: err}
}

// IsClass reports whether Classify(err) is c.
func IsClass(err error, c Class) bool {
	return err != nil && Classify(err) == c
}

// errorsAs is errors.As for a target type, returning the match.
func errorsAs[T error](err error) (T, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}

// maxErrorBody caps how much of an error response is read: PVE's error bodies are small, and a
// broken proxy must not make the client buffer an arbitrary amount.
const maxErrorBody = 64 << 10

// ErrorFromResponse builds the APIError for a non-2xx answer from its status code, its reason
// phrase (the status line after the code) and its body. The body may be PVE's JSON
// ({"data":null,"message":"...\n","errors":{...}}), plain text (501, 506 from the HTTP layer) or
// empty (401); only its first 64 KiB are read.
func ErrorFromResponse(status int, reason string, body []byte) *APIError {
	if len(body) > maxErrorBody {
		body = body[:maxErrorBody]
	}
	e := &APIError{Status: status, Reason: strings.TrimSpace(reason)}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return e
	}
	var payload struct {
		Message *string           `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	if trimmed[0] == '{' && json.Unmarshal(trimmed, &payload) == nil {
		if payload.Message != nil {
			e.Message = strings.TrimRight(*payload.Message, "\r\n")
		}
		if len(payload.Errors) > 0 {
			e.Errors = payload.Errors
		}
		return e
	}
	e.Message = strings.TrimSpace(string(trimmed))
	return e
}
