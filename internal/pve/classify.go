package pve

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strings"
)

// Classify says what a caller can do about err. It reads API errors (status, reason phrase and
// body), task errors (the exit status) and transport errors; anything it does not recognise is
// Transient, because a retry is the safe default for an unknown failure.
//
// The texts it matches are PVE 9.x's, and each one is pinned by a fixture in testdata/pve.
func Classify(err error) Class {
	if err == nil {
		return ""
	}
	if ce, ok := errorsAs[*ClassError](err); ok {
		return ce.Class
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	if te, ok := errorsAs[*TaskError](err); ok {
		if c, ok := classifyText(te.ExitStatus); ok {
			return c
		}
		return Transient
	}
	if ae, ok := errorsAs[*APIError](err); ok {
		return classifyAPIError(ae)
	}
	if _, ok := errorsAs[net.Error](err); ok {
		return Transient
	}
	return Transient
}

func classifyAPIError(e *APIError) Class {
	switch {
	case e.Status == 401, e.Status == 403:
		return Permanent
	case e.Status == 400:
		if c, ok := classifyText(e.Text()); ok && c == AlreadyExists {
			return c
		}
		for _, msg := range e.Errors {
			if c, ok := classifyText(msg); ok && c == AlreadyExists {
				return c
			}
		}
		return Permanent
	case e.Status >= 400 && e.Status < 500, e.Status == 501:
		// 404 means the path never exists on PVE (a missing VM is a 500); 501 is an unknown
		// method or path. Neither is fixed by retrying.
		return Permanent
	}
	if c, ok := classifyText(e.Text()); ok {
		return c
	}
	if e.Message != "" && e.Reason != "" {
		if c, ok := classifyText(e.Reason); ok {
			return c
		}
	}
	return Transient
}

// A textRule maps a PVE message to a class. Rules are tried in order; the first match wins.
type textRule struct {
	re    *regexp.Regexp
	class Class
}

var textRules = []textRule{
	// Missing VM: any qemu endpoint on a deleted VM or the wrong node.
	{regexp.MustCompile(`Configuration file '[^']*' does not exist`), NotFound},
	// A storage that is not configured is a configuration mistake, not a missing VM.
	{regexp.MustCompile(`storage '[^']*' does not exist`), Permanent},
	{regexp.MustCompile(`storage '[^']*' is (disabled|not available on node)`), Permanent},
	{regexp.MustCompile(`does not support '[^']*' content`), Permanent},
	{regexp.MustCompile(`Permission check failed`), Permanent},
	// Space.
	{regexp.MustCompile(`not enough free space|No space left on device|out of space`), QuotaExceeded},
	// Locks: the config's lock property, or the flock on its file timing out.
	{regexp.MustCompile(`VM is locked \(`), Locked},
	{regexp.MustCompile(`can't lock file '[^']*' - got timeout`), Locked},
	{regexp.MustCompile(`got lock request timeout`), Locked},
	// VMID collisions: on the same node, or on another node (pmxcfs rename).
	{regexp.MustCompile(`config file already exists`), AlreadyExists},
	{regexp.MustCompile(`failed: File exists`), AlreadyExists},
	{regexp.MustCompile(`^VM \d+ already exists`), AlreadyExists},
	// Guest agent.
	{regexp.MustCompile(`QEMU guest agent is not running`), AgentNotRunning},
	{regexp.MustCompile(`qga command '[^']*' failed - got timeout`), AgentNotRunning},
	{regexp.MustCompile(`No QEMU guest agent configured`), Permanent},
	{regexp.MustCompile(`^VM \d+ is not running`), NotRunning},
	// Things retrying cannot fix.
	{regexp.MustCompile(`shrinking disks is not supported`), Permanent},
	{regexp.MustCompile(`you can't start a vm if it's a template`), Permanent},
	{regexp.MustCompile(`protection mode enabled`), Permanent},
	{regexp.MustCompile(`wrong file extension`), Permanent},
}

func classifyText(msg string) (Class, bool) {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return "", false
	}
	for _, r := range textRules {
		if r.re.MatchString(msg) {
			return r.class, true
		}
	}
	return "", false
}
