package workflows_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// At info a create logs its outcome and nothing else: no line per step or Proxmox call.
func TestCreate_logsItsOutcomeAtInfoOnce(t *testing.T) {
	w := newWorld(t)

	res, err := w.create(createInput())

	require.NoError(t, err)
	var info []string
	for _, line := range strings.Split(w.log.String(), "\n") {
		// The SDK logs the stub entity's start of the create as its child.
		if strings.Contains(line, "level=INFO") && !strings.Contains(line, "msg=ExecuteChildWorkflow") {
			info = append(info, line)
		}
	}
	require.Len(t, info, 1, w.log.String())
	assert.Regexp(t, `msg="create completed" .*uid=`+uid+` duration=\S+ vmid=`+itoa(res.VMID)+` node=pve1`, info[0])
}
