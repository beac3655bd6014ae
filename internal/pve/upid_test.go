package pve_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

func TestParseUPID_table(t *testing.T) {
	tests := []struct {
		name string
		upid pve.UPID
		want pve.UPIDInfo
	}{
		{
			name: "clone names the source vmid and the token",
			upid: "UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:pveflow@pve!worker:",
			want: pve.UPIDInfo{Node: "pve1", PID: 0xB41E2, PStart: 0x0A4D4B24, StartTime: 0x6B005320,
				Type: "qmclone", ID: "9000", User: "pveflow@pve!worker"},
		},
		{
			name: "imgcopy has an empty id",
			upid: "UPID:pve1:000B4391:0A4D4B24:6B005360:imgcopy::pveflow@pve!worker:",
			want: pve.UPIDInfo{Node: "pve1", PID: 0xB4391, PStart: 0x0A4D4B24, StartTime: 0x6B005360,
				Type: "imgcopy", User: "pveflow@pve!worker"},
		},
		{
			name: "hyphenated node and another token",
			upid: "UPID:pve-mp:00000ACD:00006AE8:679A423B:qmclone:112:capmox@pve!capi:",
			want: pve.UPIDInfo{Node: "pve-mp", PID: 0xACD, PStart: 0x6AE8, StartTime: 0x679A423B,
				Type: "qmclone", ID: "112", User: "capmox@pve!capi"},
		},
		{
			name: "nine-digit pstart",
			upid: "UPID:pve1:0003A2B1:1A2B3C4D5:6B005320:qmstart:123456:root@pam:",
			want: pve.UPIDInfo{Node: "pve1", PID: 0x3A2B1, PStart: 0x1A2B3C4D5, StartTime: 0x6B005320,
				Type: "qmstart", ID: "123456", User: "root@pam"},
		},
		{
			name: "imgdel names the storage",
			upid: "UPID:pve1:000C0B02:0A4D4B24:6B006146:imgdel:local:pveflow@pve!worker:",
			want: pve.UPIDInfo{Node: "pve1", PID: 0xC0B02, PStart: 0x0A4D4B24, StartTime: 0x6B006146,
				Type: "imgdel", ID: "local", User: "pveflow@pve!worker"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pve.ParseUPID(tt.upid)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseUPID_malformed(t *testing.T) {
	for name, upid := range map[string]pve.UPID{
		"empty":                    "",
		"not a upid":               "OK",
		"no trailing colon":        "UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:root@pam",
		"short pid":                "UPID:pve1:B41E2:0A4D4B24:6B005320:qmclone:9000:root@pam:",
		"ten-digit pstart":         "UPID:pve1:000B41E2:1A2B3C4D5E:6B005320:qmclone:9000:root@pam:",
		"node starts with hyphen":  "UPID:-pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:root@pam:",
		"no user":                  "UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000::",
		"slash in id":              "UPID:pve1:000B41E2:0A4D4B24:6B005320:imgdel:local/iso:root@pam:",
		"not hex":                  "UPID:pve1:000B41G2:0A4D4B24:6B005320:qmclone:9000:root@pam:",
		"missing type":             "UPID:pve1:000B41E2:0A4D4B24:6B005320::9000:root@pam:",
		"trailing text after user": "UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:root@pam:x",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pve.ParseUPID(upid)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "malformed proxmox task id")
		})
	}
}

// PVE's UPIDs are upper-case hex, zero-padded to 8 digits: formatting one taken apart gives it
// back unchanged, so a UPID survives a trip through workflow state.
func TestUPIDInfo_stringRoundTrip(t *testing.T) {
	upids := []pve.UPID{"UPID:pve1:0003A2B1:1A2B3C4D5:6B005320:qmstart:123456:root@pam:"}
	for _, name := range []string{"clone_response", "resize_response", "start_response", "stop_response",
		"reboot_response", "destroy_response", "upload_response", "content_delete_response"} {
		upids = append(upids, data[pve.UPID](t, name))
	}
	for _, name := range fixtureNames(t) {
		if strings.HasPrefix(name, "task_status_") {
			upids = append(upids, data[pve.TaskStatus](t, name).UPID)
		}
	}
	for _, u := range upids {
		info, err := pve.ParseUPID(u)
		require.NoError(t, err)
		assert.Equal(t, string(u), info.String())
	}
}

func TestUPID_node(t *testing.T) {
	assert.Equal(t, "pve1", data[pve.UPID](t, "clone_response").Node())
	assert.Empty(t, pve.UPID("UPID:pve1:bogus").Node())
}

func TestTaskStatus_doneOnlyWhenStopped(t *testing.T) {
	assert.False(t, data[pve.TaskStatus](t, "task_status_running").Done())
	assert.True(t, data[pve.TaskStatus](t, "task_status_stopped_ok").Done())
}

func TestTaskStatus_result(t *testing.T) {
	failed := data[pve.TaskStatus](t, "task_status_stopped_error")
	tests := []struct {
		name         string
		status       pve.TaskStatus
		wantWarnings int
		wantErr      error
	}{
		{"ok", data[pve.TaskStatus](t, "task_status_stopped_ok"), 0, nil},
		{"warnings", data[pve.TaskStatus](t, "task_status_stopped_warnings"), 2, nil},
		{"error exit", failed, 0, &pve.TaskError{UPID: failed.UPID, ExitStatus: failed.ExitStatus}},
		{"warnings without a count", pve.TaskStatus{UPID: failed.UPID, Status: pve.TaskStopped, ExitStatus: "WARNINGS: some"},
			0, &pve.TaskError{UPID: failed.UPID, ExitStatus: "WARNINGS: some"}},
		{"process gone", pve.TaskStatus{UPID: failed.UPID, Status: pve.TaskStopped, ExitStatus: "unexpected status"},
			0, &pve.TaskError{UPID: failed.UPID, ExitStatus: "unexpected status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, err := tt.status.Result()
			assert.Equal(t, tt.wantWarnings, warnings)
			assert.Equal(t, tt.wantErr, err)
		})
	}
}

func TestTaskError_errorNamesTypeUPIDNodeAndExit(t *testing.T) {
	_, err := data[pve.TaskStatus](t, "task_status_no_space_lvm").Result()
	require.Error(t, err)
	assert.Equal(t, "proxmox qmclone task UPID:pve1:000B5502:0A4D4B24:6B00580C:qmclone:9000:pveflow@pve!worker: "+
		"on node pve1 failed: clone failed: not enough free space (2093056 < 3145728)", err.Error())
}

func TestTaskError_errorWithMalformedUPIDStillNamesIt(t *testing.T) {
	err := &pve.TaskError{UPID: "UPID:bogus", ExitStatus: "unexpected status"}
	assert.Equal(t, "proxmox task UPID:bogus failed: unexpected status", err.Error())
}
