package pve

import (
	"fmt"
	"regexp"
	"strconv"
)

// UPID is a Proxmox task ID: "UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:".
// It names the node that runs the task, so a task is always polled on that node.
type UPID string

// UPIDInfo is a UPID taken apart.
type UPIDInfo struct {
	Node      string
	PID       int
	PStart    int64
	StartTime int64
	// Type is the task type: qmclone, qmstart, qmstop, qmdestroy, resize, imgcopy, imgdel, ...
	Type string
	// ID is the object the task works on; for qmclone it is the source VMID, for imgcopy empty.
	ID   string
	User string
}

// upidRE is PVE's own UPID pattern (pve-common PVE/UPID.pm).
var upidRE = regexp.MustCompile(`^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$`)

// ParseUPID takes a UPID apart.
func ParseUPID(u UPID) (UPIDInfo, error) {
	m := upidRE.FindStringSubmatch(string(u))
	if m == nil {
		return UPIDInfo{}, fmt.Errorf("malformed proxmox task id %q", string(u))
	}
	pid, _ := strconv.ParseInt(m[3], 16, 64)
	pstart, _ := strconv.ParseInt(m[4], 16, 64)
	start, _ := strconv.ParseInt(m[5], 16, 64)
	return UPIDInfo{
		Node:      m[1],
		PID:       int(pid),
		PStart:    pstart,
		StartTime: start,
		Type:      m[6],
		ID:        m[7],
		User:      m[8],
	}, nil
}

// String formats the UPID the way PVE does: upper-case hex, zero-padded to 8 digits.
func (i UPIDInfo) String() string {
	return fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", i.Node, i.PID, i.PStart, i.StartTime, i.Type, i.ID, i.User)
}

// Node is the node that runs the task, or "" for a malformed UPID.
func (u UPID) Node() string {
	info, err := ParseUPID(u)
	if err != nil {
		return ""
	}
	return info.Node
}

// Done reports whether the task has stopped.
func (s TaskStatus) Done() bool { return s.Status == TaskStopped }

// warningsRE is PVE's success-with-warnings exit status (PVE::UPID::status_is_error).
var warningsRE = regexp.MustCompile(`^WARNINGS: (\d+)$`)

// Result interprets the exit status of a task that is Done: OK is success, "WARNINGS: N" is success with N
// warnings, anything else is a *TaskError carrying the exit status.
func (s TaskStatus) Result() (warnings int, err error) {
	if s.ExitStatus == "OK" {
		return 0, nil
	}
	if m := warningsRE.FindStringSubmatch(s.ExitStatus); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, nil
	}
	return 0, &TaskError{UPID: s.UPID, ExitStatus: s.ExitStatus}
}
