package proxyvm

import (
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"

	"github.com/pveflow/pveflow/workflows/core"
)

func unknownPool(pool string, known []string) error {
	if len(known) == 0 {
		return fmt.Errorf("address pool %q is not configured: proxmox.addressPools is empty", pool)
	}
	return fmt.Errorf("address pool %q is not configured: proxmox.addressPools has %s", pool, strings.Join(known, ", "))
}

// allocateAddresses gives the create the addresses of its UID from its address pool, before
// anything is made in Proxmox: the seed's network-config is written with them.
func (c *create) allocateAddresses() error {
	if c.in.AddressPool == "" {
		return nil
	}
	addrs, err := c.poolAddresses("create", c.in.AddressPool)
	c.in.Addresses = addrs
	return err
}

// poolAddresses are the addresses of the proxy's UID in pool, allocated if it holds none yet.
// An allocation is idempotent: a change asks again for the ones its create was given, as the
// entity keeps the pool's name, not the addresses.
func (o *proxyOps) poolAddresses(op, pool string) (proxy.Addresses, error) {
	r, ok := o.s.AddressPools[pool]
	if !ok {
		return proxy.Addresses{}, core.Permanentf("%s proxy %s: %v", op, o.name, unknownPool(pool, o.s.AddressPoolNames))
	}
	var a *activities.Activities
	step := fmt.Sprintf("allocate addresses from pool %s", pool)
	o.t.Phase(core.PhaseValidating, step)
	req := activities.AddressRequest{TaskQueue: workflow.GetInfo(o.ctx).TaskQueueName, Pool: pool, UID: o.uid, Range: r}
	var addrs proxy.Addresses
	if err := core.Call(o.ctx, o.s.CallOptions(step), a.AllocateAddress, req).Get(o.ctx, &addrs); err != nil {
		return proxy.Addresses{}, core.Fail(step, err)
	}
	return addrs, nil
}

// freeAddresses takes the proxy's addresses back in every configured pool, once its VM is
// gone: the delete does not know which pool a create took them from (the entity forgets a
// failed create's spec), and a pool where the UID holds none frees nothing. The first half of
// a rebuild keeps them, so the proxy comes back with the addresses partners know.
func (d *deletion) freeAddresses() error {
	if d.in.KeepAddresses || len(d.s.AddressPoolNames) == 0 {
		return nil
	}
	var a *activities.Activities
	d.t.Phase(core.PhaseCleaning, "free the proxy's addresses")
	taskQueue := workflow.GetInfo(d.ctx).TaskQueueName
	futures := make([]workflow.Future, len(d.s.AddressPoolNames))
	for i, pool := range d.s.AddressPoolNames {
		step := "free addresses in pool " + pool
		futures[i] = core.Execute(d.ctx, d.s.CallOptions(step), a.FreeAddress, activities.AddressRequest{TaskQueue: taskQueue, Pool: pool, UID: d.uid})
	}
	var errs []error
	for i, f := range futures {
		if err := f.Get(d.ctx, nil); err != nil {
			errs = append(errs, core.Fail("free addresses in pool "+d.s.AddressPoolNames[i], err))
		}
	}
	return errors.Join(errs...)
}
