package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

func TestPrintHealth_listsEachMissingPrivilegeByNodeAndPath(t *testing.T) {
	missing := []pve.MissingPrivilege{{Path: "/vms/9000", Privilege: "VM.Clone"}, {Path: "/storage/local-lvm", Privilege: "Datastore.AllocateSpace"}}
	res := reads.CheckHealthResult{CheckedAt: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), Nodes: []reads.NodeHealth{
		{Name: "pve1", Reason: reads.ReasonMissingPrivilege, Message: pve.MissingMessage("pve1", missing), MissingPrivileges: missing,
			Details: map[string]string{"pveVersion": "9.2.11", "isoStorage": "local", "isoStorageAvailGiB": "1613", "templates": "1/1"}},
		{Name: "pve2", Healthy: true, Details: map[string]string{"pveVersion": "9.2.11", "isoStorage": "local", "isoStorageAvailGiB": "1613", "templates": "1/1"}},
	}}
	var out bytes.Buffer

	require.NoError(t, (&cli{stdout: &out}).printHealth(res))

	assert.Regexp(t, `pve1 +MissingPrivilege +9\.2\.11 +local \(1613 GiB free\) +1/1 +the API token lacks privileges a proxy on node pve1 needs: VM\.Clone on /vms/9000, Datastore\.AllocateSpace on /storage/local-lvm`, out.String())
	assert.Regexp(t, `\n\nNODE +PATH +MISSING PRIVILEGE\npve1 +/vms/9000 +VM\.Clone\npve1 +/storage/local-lvm +Datastore\.AllocateSpace\n$`, out.String())
}

func TestPrintHealth_aPrivilegeGrantedWithoutPropagateIsListedSo(t *testing.T) {
	missing := []pve.MissingPrivilege{{Path: "/vms", Privilege: "VM.Allocate", Unpropagated: true}}
	res := reads.CheckHealthResult{Nodes: []reads.NodeHealth{{Name: "pve1", Reason: reads.ReasonMissingPrivilege, MissingPrivileges: missing}}}
	var out bytes.Buffer

	require.NoError(t, (&cli{stdout: &out}).printHealth(res))

	assert.Regexp(t, `\npve1 +/vms +VM\.Allocate \(granted without propagate\)\n$`, out.String())
}

func TestPrintHealth_noMissingPrivilegesNoList(t *testing.T) {
	res := reads.CheckHealthResult{Nodes: []reads.NodeHealth{{Name: "pve1", Healthy: true}}}
	var out bytes.Buffer

	require.NoError(t, (&cli{stdout: &out}).printHealth(res))

	assert.NotContains(t, out.String(), "MISSING PRIVILEGE")
}

func TestPrintDeleted_listsTheWarningsOfItsTasks(t *testing.T) {
	const warning = "destroy task UPID:pve1:000C0A88:0A4D4B24:6B00613B:qmdestroy:123456:pveflow@pve!worker: on node pve1: " +
		"Could not remove disk 'local-lvm:vm-123456-disk-0', check manually: lvremove 'pve/vm-123456-disk-0' error:   Logical volume pve/vm-123456-disk-0 in use."
	var out bytes.Buffer

	require.NoError(t, (&cli{stdout: &out}).printDeleted("0f5b1c9e", proxyvm.DeleteProxyResult{Warnings: []string{warning}}))

	assert.Equal(t, "proxy deleted: 0f5b1c9e\n  warning: "+warning+"\n", out.String())
}

func TestPrintHealth_listsAnOrphanDiskAndAStaleCloneLockWithItsCommand(t *testing.T) {
	res := reads.CheckHealthResult{Nodes: []reads.NodeHealth{{Name: "pve1", Healthy: true}},
		OrphanDisks: []reads.GarbageDisk{{VMID: 150000, GarbageVolume: reads.GarbageVolume{VolID: "local-lvm:vm-150000-disk-0", Node: "pve1",
			Outcome: reads.GarbageFound, CreatedAt: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}}},
		CloneLocks: []reads.CloneLock{{VMID: 124973, Node: "pve1", UID: "7d1e2f30-5a4b-4c6d-8e9f-0a1b2c3d4e5f", Stale: true,
			Age: 3 * time.Hour, Command: "qm unlock 124973", Detail: "no clone task runs"}},
	}
	var out bytes.Buffer

	require.NoError(t, (&cli{stdout: &out}).printHealth(res))

	assert.Regexp(t, `\n\nORPHAN DISK +NODE +VMID +CREATED +DETAIL\nlocal-lvm:vm-150000-disk-0 +pve1 +150000 +\S+ \S+ +no VM has it: 'pveflow gc' deletes it\n`, out.String())
	assert.Regexp(t, `\n\nCLONE LOCK +NODE +UID +STALE +WITHOUT A CLONE TASK +RUN ON THE NODE +DETAIL\nVM 124973 +pve1 +7d1e2f30-5a4b-4c6d-8e9f-0a1b2c3d4e5f +yes +at least 3h0m0s +qm unlock 124973 +no clone task runs\n$`, out.String())
}

func TestPrintHealth_noLeftoversNoLists(t *testing.T) {
	res := reads.CheckHealthResult{Nodes: []reads.NodeHealth{{Name: "pve1", Healthy: true}}}
	var out bytes.Buffer

	require.NoError(t, (&cli{stdout: &out}).printHealth(res))

	assert.NotContains(t, out.String(), "ORPHAN DISK")
	assert.NotContains(t, out.String(), "CLONE LOCK")
}
