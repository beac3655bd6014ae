package starter

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows/addresspool"
)

// AddressPools is a worker's activities.AddressPools: it sends the allocate and free Updates
// of CreateProxy and DeleteProxy, and the reconcile Update of CollectGarbage, which a workflow
// cannot send itself, to the pools' workflows through Client.
type AddressPools struct{ Client *Client }

// Allocate gives req.UID its addresses in req.Pool, starting the pool's workflow when none
// runs, and waits for the answer.
func (p AddressPools) Allocate(ctx context.Context, req activities.AddressRequest) (proxy.Addresses, error) {
	c := p.Client.temporal
	start := c.NewWithStartWorkflowOperation(addresspool.AddressPoolOptions(req.TaskQueue, req.Pool), addresspool.AddressPoolName,
		addresspool.AddressPoolState{Pool: req.Pool})
	handle, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName:   addresspool.AllocateAddressUpdate,
			Args:         []any{addresspool.AllocateAddressRequest{UID: req.UID, Range: req.Range}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var addrs proxy.Addresses
	if err != nil {
		return addrs, fmt.Errorf("send allocate of proxy %s to %s: %w", req.UID, addresspool.AddressPoolWorkflowID(req.TaskQueue, req.Pool), err)
	}
	return addrs, handle.Get(ctx, &addrs)
}

// Free takes req.UID's addresses in req.Pool back, and returns them. A pool whose workflow
// does not run holds no addresses, so it frees nothing.
func (p AddressPools) Free(ctx context.Context, req activities.AddressRequest) (proxy.Addresses, error) {
	id := addresspool.AddressPoolWorkflowID(req.TaskQueue, req.Pool)
	handle, err := p.Client.temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateName:   addresspool.FreeAddressUpdate,
		Args:         []any{addresspool.FreeAddressRequest{UID: req.UID}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var addrs proxy.Addresses
	if _, gone := errors.AsType[*serviceerror.NotFound](err); gone {
		return addrs, nil
	}
	if err != nil {
		return addrs, fmt.Errorf("send free of proxy %s to %s: %w", req.UID, id, err)
	}
	return addrs, handle.Get(ctx, &addrs)
}

// Reconcile sends req.Pool the reconcile Update and waits for the answer. It starts the pool's
// workflow when none runs and the Update restores what VMs hold; a dry run, or one that holds
// nothing, is sent only to a pool that runs: one that does not is pve.NotFound, as it holds
// nothing, and starting it would change something.
func (p AddressPools) Reconcile(ctx context.Context, req activities.ReconcileRequest) (activities.Reconciled, error) {
	c := p.Client.temporal
	id := addresspool.AddressPoolWorkflowID(req.TaskQueue, req.Pool)
	update := client.UpdateWorkflowOptions{
		UpdateName:   addresspool.ReconcileAddressesUpdate,
		Args:         []any{req.AddressReconcile},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	}
	var handle client.WorkflowUpdateHandle
	var err error
	if req.DryRun || len(req.Held) == 0 {
		update.WorkflowID = id
		handle, err = c.UpdateWorkflow(ctx, update)
	} else {
		start := c.NewWithStartWorkflowOperation(addresspool.AddressPoolOptions(req.TaskQueue, req.Pool), addresspool.AddressPoolName,
			addresspool.AddressPoolState{Pool: req.Pool})
		handle, err = c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: start, UpdateOptions: update})
	}
	var res activities.Reconciled
	if _, gone := errors.AsType[*serviceerror.NotFound](err); gone {
		return res, pve.Classified(pve.NotFound, fmt.Errorf("%s does not run", id))
	}
	if err != nil {
		return res, fmt.Errorf("send reconcile to %s: %w", id, err)
	}
	return res, handle.Get(ctx, &res)
}

// AddressPool asks the workflow of pool on the Client's task queue for its allocations.
func (c *Client) AddressPool(ctx context.Context, pool string) (addresspool.AddressPoolState, error) {
	var st addresspool.AddressPoolState
	id := addresspool.AddressPoolWorkflowID(c.taskQueue, pool)
	v, err := c.temporal.QueryWorkflow(ctx, id, "", addresspool.AddressPoolQuery)
	if err != nil {
		return st, fmt.Errorf("query %s: %w", id, err)
	}
	return st, v.Get(&st)
}
