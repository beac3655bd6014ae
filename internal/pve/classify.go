package pve

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
)

// Classify says what a caller can do about err. It reads API errors (status, then Proxmox's
// message), task errors (the exit status) and errors that already carry a class; anything it
// does not recognise, a transport error included, is Transient, because a retry is the safe
// default for an unknown failure.
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
		return classifyText(te.ExitStatus)
	}
	if ae, ok := errorsAs[*APIError](err); ok {
		return classifyAPIError(ae)
	}
	return Transient
}

func classifyAPIError(e *APIError) Class {
	switch {
	case e.Status == http.StatusBadRequest:
		// A parameter PVE refused. The one a caller acts on is a taken VMID, which
		// /cluster/nextid reports as a parameter error.
		for _, msg := range e.Errors {
			if classifyText(msg) == AlreadyExists {
				return AlreadyExists
			}
		}
		return Permanent
	case e.Status >= 400 && e.Status < 500, e.Status == http.StatusNotImplemented:
		// 401 and 403 are the token and its privileges; 404 means the path never exists on
		// PVE (a missing VM is a 500); 501 is an unknown method or path. Retrying fixes none.
		return Permanent
	}
	return classifyText(e.Text())
}

// A textRule maps a PVE message to a class. Rules are tried in order; the first match wins.
type textRule struct {
	re    *regexp.Regexp
	class Class
}

var textRules = []textRule{
	// Missing VM: any qemu endpoint on a deleted VM or the wrong node.
	{regexp.MustCompile(`Configuration file '[^']*' does not exist`), NotFound},
	// A storage that is missing, switched off, not on this node or not for ISOs is a
	// configuration mistake, not a missing VM.
	{regexp.MustCompile(`storage '[^']*' does not exist`), Permanent},
	{regexp.MustCompile(`storage '[^']*' is (disabled|not available on node)`), Permanent},
	{regexp.MustCompile(`does not support '[^']*' content`), Permanent},
	// Space: LVM says so itself; ZFS's words come through as "zfs error: ...".
	{regexp.MustCompile(`not enough free space|out of space`), QuotaExceeded},
	// Locks: the config's lock property, or a flock (a VM's config, a local storage) or a
	// cluster lock (a shared storage) not taken in time.
	{regexp.MustCompile(`VM is locked \(`), Locked},
	{regexp.MustCompile(`can't lock file '[^']*' - got timeout`), Locked},
	{regexp.MustCompile(`got lock request timeout`), Locked},
	// VMID collisions: on the same node, on another node (pmxcfs refuses the rename), or
	// found by /cluster/nextid.
	{regexp.MustCompile(`config file already exists`), AlreadyExists},
	{regexp.MustCompile(`failed: File exists`), AlreadyExists},
	{regexp.MustCompile(`^VM \d+ already exists`), AlreadyExists},
	// Guest agent: not answering yet, versus not configured (a template bug) or a stopped VM.
	{regexp.MustCompile(`QEMU guest agent is not running`), AgentNotRunning},
	{regexp.MustCompile(`qga command '[^']*' failed - got timeout`), AgentNotRunning},
	{regexp.MustCompile(`No QEMU guest agent configured`), Permanent},
	{regexp.MustCompile(`^VM \d+ is not running`), NotRunning},
	{regexp.MustCompile(`^VM \d+ already running`), AlreadyRunning},
	// Things retrying cannot fix. A missing Content-Length is a client bug: pveproxy refuses
	// chunked uploads.
	{regexp.MustCompile(`shrinking disks is not supported`), Permanent},
	{regexp.MustCompile(`you can't start a vm if it's a template`), Permanent},
	{regexp.MustCompile(`protection mode enabled`), Permanent},
	{regexp.MustCompile(`upload without content length header not supported`), Permanent},
}

// configFlockRE is a VM's config flock not taken in time, naming the VM.
var configFlockRE = regexp.MustCompile(`can't lock file '/var/lock/qemu-server/lock-(\d+)\.conf' - got timeout`)

// ConfigFlockTimeout reports whether msg says that the config flock of VM vmid could not be
// taken in time. A clone whose task fails so on its new VMID lost a race for that VMID to another
// clone, which holds the flock while it copies; a lock on the template or a storage is not that.
func ConfigFlockTimeout(msg string, vmid int) bool {
	m := configFlockRE.FindStringSubmatch(msg)
	return m != nil && m[1] == strconv.Itoa(vmid)
}

// classifyText is the class of the first rule msg matches, Transient when none does.
func classifyText(msg string) Class {
	for _, r := range textRules {
		if r.re.MatchString(msg) {
			return r.class
		}
	}
	return Transient
}
