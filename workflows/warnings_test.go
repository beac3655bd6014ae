package workflows_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

func TestDelete_aDestroyWithAWarningCarriesItInTheResult(t *testing.T) {
	w, vm := created(t)
	disk := fmt.Sprintf("local-lvm:vm-%d-disk-1", vm.VMID)
	w.cluster.BusyVolume(disk)

	res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Equal(t, []activities.VMRef{{Node: "pve1", VMID: vm.VMID}}, res.Destroyed)
	require.Len(t, res.Warnings, 1)
	assert.Regexp(t, `^destroy task UPID:pve1:[0-9A-F]+:[0-9A-F]+:[0-9A-F]+:qmdestroy:`+fmt.Sprint(vm.VMID)+`:[^ ]+ on node pve1: `, res.Warnings[0])
	assert.True(t, strings.HasSuffix(res.Warnings[0], fmt.Sprintf(
		": Could not remove disk '%s', check manually: lvremove 'pve/vm-%d-disk-1' error:   Logical volume pve/vm-%d-disk-1 in use.", disk, vm.VMID, vm.VMID)),
		res.Warnings[0])
	assert.Empty(t, w.vms())
}

func TestDelete_aDestroyWithoutWarningsHasNone(t *testing.T) {
	w, _ := created(t)

	res, err := w.delete(proxyvm.DeleteProxyInput{UID: uid})

	require.NoError(t, err)
	assert.Empty(t, res.Warnings)
	assert.Zero(t, w.cluster.CallCount("TaskLog"), "only a task with warnings has its log read")
}
