package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/pveflow/pveflow/internal/pve"
)

// HAManagerStatus reads the HA manager's status: which nodes are in maintenance mode.
func (a *Activities) HAManagerStatus(ctx context.Context) (pve.HAManagerStatus, error) {
	s, err := a.API.HAManagerStatus(ctx)
	if err != nil {
		return pve.HAManagerStatus{}, failure("read the HA manager's status", err)
	}
	return s, nil
}

// HAResourceRequest is the input of AddHAResource.
type HAResourceRequest struct {
	VMRef
	// State is the HA resource's requested state, such as "started".
	State string `json:"state"`
	// Comment describes the resource in PVE's HA view.
	Comment string `json:"comment,omitempty"`
}

// haSID is the HA resource ID of a VM.
func haSID(vmid int) string { return fmt.Sprintf("vm:%d", vmid) }

// AddHAResource registers the VM as an HA resource. A VM registered already counts as
// registered: an earlier attempt's answer may have been lost.
func (a *Activities) AddHAResource(ctx context.Context, req HAResourceRequest) error {
	req.annotate(ctx)
	sid := haSID(req.VMID)
	err := a.API.AddHAResource(ctx, pve.HAResourceParams{SID: sid, State: req.State, Comment: req.Comment})
	if haAnswered(err, fmt.Sprintf("resource ID '%s' already defined", sid)) {
		return nil
	}
	if err != nil {
		return failure("register "+req.VMRef.String()+" as HA resource "+sid, err)
	}
	return nil
}

// DeleteHAResource removes the VM's HA resource. One that is not there counts as removed.
func (a *Activities) DeleteHAResource(ctx context.Context, ref VMRef) error {
	ref.annotate(ctx)
	sid := haSID(ref.VMID)
	err := a.API.DeleteHAResource(ctx, sid)
	if haAnswered(err, fmt.Sprintf("cannot delete service '%s', not HA managed!", sid)) {
		return nil
	}
	if err != nil {
		return failure("remove HA resource "+sid+" of "+ref.String(), err)
	}
	return nil
}

// haAnswered reports whether err is pve-ha-manager's 500 with message text
// (src/PVE/API2/HA/Resources.pm).
func haAnswered(err error, text string) bool {
	var apiErr *pve.APIError
	return errors.As(err, &apiErr) && apiErr.Status == 500 && apiErr.Message == text
}
