package pve_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

// classByFixture is the class of the error every error fixture becomes: the *APIError of an
// HTTP error, or the *TaskError of a task that stopped with an error.
var classByFixture = map[string]pve.Class{
	"err_vm_missing":           pve.NotFound,
	"err_vm_missing_pve82":     pve.NotFound,
	"err_locked":               pve.Locked,
	"err_ct_locked":            pve.Locked,
	"err_lock_timeout":         pve.Locked,
	"err_newid_in_use":         pve.AlreadyExists,
	"err_nextid_exists":        pve.AlreadyExists,
	"err_agent_not_running":    pve.AgentNotRunning,
	"err_agent_timeout":        pve.AgentNotRunning,
	"err_agent_vm_stopped":     pve.NotRunning,
	"err_reboot_not_running":   pve.NotRunning,
	"err_agent_not_configured": pve.Permanent,
	// A file the agent cannot open: whoever reads it decides (cloud-init's result not written yet).
	"err_agent_file_missing":                 pve.Transient,
	"err_unauthorized":                       pve.Permanent,
	"err_no_ticket":                          pve.Permanent,
	"err_forbidden":                          pve.Permanent,
	"err_forbidden_bare":                     pve.Permanent,
	"err_bad_param":                          pve.Permanent,
	"err_storage_missing":                    pve.Permanent,
	"err_storage_no_such":                    pve.Permanent,
	"err_storage_disabled":                   pve.Permanent,
	"err_storage_not_on_node":                pve.Permanent,
	"err_upload_no_iso_content":              pve.Permanent,
	"err_migrate_storage_no_images":          pve.Permanent,
	"err_alloc_unsupported_format":           pve.Permanent,
	"err_volume_name_unparsable":             pve.Permanent,
	"err_volume_id_unparsable":               pve.Permanent,
	"task_status_clone_no_alloc_iscsi":       pve.Permanent,
	"err_chunked":                            pve.Permanent,
	"err_pool_missing":                       pve.Permanent,
	"err_not_implemented":                    pve.Permanent,
	"err_destroy_protected":                  pve.Permanent,
	"err_destroy_running":                    pve.Transient,
	"err_migrate_running_not_online":         pve.Transient,
	"err_migrate_target_local":               pve.Permanent,
	"task_status_migrate_aborted":            pve.Transient,
	"err_proxy_timeout":                      pve.Transient,
	"err_proxy_refused":                      pve.Transient,
	"err_proxy_broken_pipe":                  pve.Transient,
	"err_proxy_redirections":                 pve.Transient,
	"err_post_too_large":                     pve.Permanent,
	"err_multipart_not_upload":               pve.Permanent,
	"err_internal_generic":                   pve.Transient,
	"task_status_stopped_error":              pve.Transient,
	"task_status_clone_file_exists":          pve.AlreadyExists,
	"task_status_clone_config_exists":        pve.AlreadyExists,
	"task_status_clone_disk_exists_lvm":      pve.AlreadyExists,
	"task_status_clone_disk_exists_dir":      pve.AlreadyExists,
	"task_status_lock_timeout":               pve.Locked,
	"task_status_clone_storage_lock_timeout": pve.Locked,
	"task_status_clone_cfs_lock_timeout":     pve.Locked,
	"task_status_vm_locked":                  pve.Locked,
	"task_status_no_space_lvm":               pve.QuotaExceeded,
	"task_status_no_space_zfs":               pve.QuotaExceeded,
	"task_status_resize_shrink":              pve.Permanent,
	"task_status_start_template":             pve.Permanent,
	"task_status_start_already_running":      pve.AlreadyRunning,
}

func TestClassify_table(t *testing.T) {
	type row struct {
		name string
		err  error
		want pve.Class
	}
	var rows []row
	for _, name := range slices.Sorted(maps.Keys(classByFixture)) {
		err := fixtureErr(t, name)
		require.Error(t, err, name)
		rows = append(rows, row{name, err, classByFixture[name]})
	}
	rows = append(rows, []row{
		{"nil has no class", nil, ""},
		{"context canceled", context.Canceled, pve.Transient},
		{"context deadline exceeded", fmt.Errorf("get task status: %w", context.DeadlineExceeded), pve.Transient},
		{"net op error", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, pve.Transient},
		{"unknown error", errors.New("x"), pve.Transient},
		{"classified keeps its class", pve.Classified(pve.Permanent, errors.New("token file missing")), pve.Permanent},
		{"classified wins over the api text", pve.Classified(pve.Transient, fixtureErr(t, "err_vm_missing")), pve.Transient},
		{"wrapped classified", fmt.Errorf("read token: %w", pve.Classified(pve.Permanent, errors.New("no '!'"))), pve.Permanent},
		{"wrapped api error", fmt.Errorf("clone: %w", fixtureErr(t, "err_newid_in_use")), pve.AlreadyExists},
		{"wrapped task error", fmt.Errorf("wait for clone: %w", fixtureErr(t, "task_status_no_space_lvm")), pve.QuotaExceeded},
	}...)
	for _, tt := range rows {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, pve.Classify(tt.err), "%v", tt.err)
		})
	}
}

// A status that says the request itself was refused decides the class whatever the text, so bad
// input never falls through to the Transient default for texts no rule knows; a status that says
// pveproxy could not relay the request decides it too.
func TestClassify_statusDecidesWhateverTheText(t *testing.T) {
	tests := []struct {
		status int
		want   pve.Class
	}{
		{400, pve.Permanent},
		{401, pve.Permanent},
		{403, pve.Permanent},
		{404, pve.Permanent},
		{413, pve.Permanent},
		{501, pve.Permanent},
		{506, pve.Permanent},
		{595, pve.Transient},
		{596, pve.Transient},
		{597, pve.Transient},
		{598, pve.Transient},
		{599, pve.Transient},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			for _, text := range []string{"no rule knows this text", "VM is locked (backup)", "QEMU guest agent is not running"} {
				err := &pve.APIError{Status: tt.status, Reason: text, Message: text}
				assert.Equal(t, tt.want, pve.Classify(err), text)
			}
		})
	}
}

func TestClassify_unknownTextOfA500IsTransient(t *testing.T) {
	err := &pve.APIError{Status: 500, Reason: "no rule knows this text", Message: "no rule knows this text"}
	assert.Equal(t, pve.Transient, pve.Classify(err))
}

func TestClassify_everyErrorFixtureHasAClass(t *testing.T) {
	for _, name := range fixtureNames(t) {
		if fixtureErr(t, name) != nil {
			assert.Contains(t, classByFixture, name, "error fixture without an expected class")
		}
	}
}

// Every rule must decide the class of at least one fixture's text: a rule no fixture reaches
// (or one an earlier rule always shadows) matches a message nobody has seen PVE send.
func TestClassify_everyRuleHasAFixture(t *testing.T) {
	patterns := pve.TextRulePatterns()
	used := make([]bool, len(patterns))
	for _, name := range fixtureNames(t) {
		for _, text := range fixtureTexts(t, name) {
			if i := slices.IndexFunc(patterns, func(re *regexp.Regexp) bool { return re.MatchString(text) }); i >= 0 {
				used[i] = true
			}
		}
	}
	for i, re := range patterns {
		assert.True(t, used[i], "rule %q matches no fixture", re)
	}
}

// fixtureTexts are the Proxmox texts the classifier reads in a fixture's error.
func fixtureTexts(t *testing.T, name string) []string {
	t.Helper()
	err := fixtureErr(t, name)
	if ae, ok := errors.AsType[*pve.APIError](err); ok {
		return append([]string{ae.Text()}, slices.Collect(maps.Values(ae.Errors))...)
	}
	if te, ok := errors.AsType[*pve.TaskError](err); ok {
		return []string{te.ExitStatus}
	}
	return nil
}

func TestConfigFlockTimeout_namesTheVM(t *testing.T) {
	text := fixtureErr(t, "task_status_lock_timeout").Error()
	tests := []struct {
		name string
		msg  string
		vmid int
		want bool
	}{
		{name: "this VM's config", msg: text, vmid: 123456, want: true},
		{name: "another VM's config", msg: text, vmid: 12345},
		{name: "a storage lock", msg: fixtureErr(t, "task_status_clone_storage_lock_timeout").Error(), vmid: 123456},
		{name: "no lock at all", msg: "clone failed: boom", vmid: 123456},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, pve.ConfigFlockTimeout(tt.msg, tt.vmid))
		})
	}
}
