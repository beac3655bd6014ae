package proxyvm

import (
	"fmt"
	"strings"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
)

// noMedia is an empty CD-ROM drive: what ide2 holds once the seed is released.
const noMedia = "none,media=cdrom"

// releaseSeed frees VM v from its seed ISO once the guest's boot consumed it, so that the VM
// can migrate: PVE refuses to migrate a VM with an ISO on storage that is not shared ("can't
// migrate local disk '<volid>': local cdrom image"). The guest agent reporting an address is
// the sign: cloud-init-local reads the seed before the network comes up, and cloud-init keeps
// what it read (the seed's vendor-data has it trust that on later boots: nocloud.VendorData).
//
// The seed is ejected, not removed: PVE changes a CD-ROM's medium on a running VM at once,
// while it keeps the removal of an IDE drive pending until the VM restarts, and a pending
// reference blocks migration as an attached one does. Then the ISO is deleted. On shared ISO
// storage the seed stays: it does not block migration, and cloud-init keeps seeing its
// datasource.
//
// It runs only after a seed this run wrote: a create's that started the VM, or a change's
// reseed.
func (o *proxyOps) releaseSeed(v *vm) error {
	var a *activities.Activities
	step := fmt.Sprintf("read status of storage %s on node %s", o.s.ISOStorage, v.Node)
	var st pve.StorageStatus
	if err := core.Call(o.ctx, o.s.CallOptions(step), a.StorageStatus,
		activities.StorageRef{Node: v.Node, Storage: o.s.ISOStorage}).Get(o.ctx, &st); err != nil {
		return core.Fail(step, err)
	}
	if st.Shared {
		o.t.Step(fmt.Sprintf("keep the seed ISO: storage %s is shared", o.s.ISOStorage))
		return nil
	}
	ref := v.ref()
	o.t.Step("release the seed ISO of " + ref.String())
	var cfg pve.VMConfig
	if err := core.Call(o.ctx, o.s.CallOptions("read config of "+ref.String()), a.VMConfig, activities.VMConfigRequest{VMRef: ref}).Get(o.ctx, &cfg); err != nil {
		return core.Fail("read config of "+ref.String(), err)
	}
	volid := proxy.SeedVolID(o.s.ISOStorage, proxy.NameFromUID(o.uid))
	if ide2, _, _ := strings.Cut(cfg["ide2"], ","); ide2 == volid {
		summary := "eject the seed ISO from ide2 of " + ref.String()
		if err := core.Call(o.ctx, o.s.CallOptions(summary), a.SetVMConfig,
			activities.SetVMConfigRequest{VMRef: ref, Params: pve.VMConfig{"ide2": noMedia}}).Get(o.ctx, nil); err != nil {
			return core.Fail(summary, err)
		}
	}
	return o.deleteSeedISO(v.Node, volid)
}

// boolParam is a boolean as PVE's parameters take it.
func boolParam(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
