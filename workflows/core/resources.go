package core

import (
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/pve"
)

// ListResources lists the cluster's VMs that filter wants, as a call under opts, showing it as
// t's step.
func ListResources(ctx workflow.Context, opts workflow.ActivityOptions, t *Tracker, filter activities.ResourcesFilter, out *[]pve.VMResource) error {
	var a *activities.Activities
	t.Step("list cluster resources")
	if err := Call(ctx, opts, a.ClusterResources, filter).Get(ctx, out); err != nil {
		return Fail("list cluster resources", err)
	}
	return nil
}
