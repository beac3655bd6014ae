package starter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// RolloutOptions are the options of Rollout: the change, how many proxies may be changing at
// once, and which proxies, by UID or by a selector.
type RolloutOptions struct {
	// Image and MachineType are the change; empty leaves that part of a proxy as it is. At
	// least one is required.
	Image       string
	MachineType string
	// MaxUnavailable is how many proxies may be changing (and so without their IPv4) at once;
	// at least 1.
	MaxUnavailable int
	// UIDs are the proxies to change, in order. Give them or Selector, not both.
	UIDs []string
	// Selector is a Temporal visibility filter, such as "PveNode = 'pve1'", ANDed with
	// ProxySelection: the proxies whose running entities match it, in the order of their UIDs.
	Selector string
}

// ProxySelection is the filter a RolloutOptions.Selector narrows: the Proxy entities that run
// and whose proxy is not absent.
var ProxySelection = fmt.Sprintf("WorkflowType = %s AND ExecutionStatus = 'Running' AND %s != %s",
	strconv.Quote(core.ProxyName), core.ProxyPhaseKey.GetName(), strconv.Quote(proxyvm.ProxyAbsent))

// ErrNoRollout is what errors.Is finds in the error of Rollout given options that change
// nothing or nobody (no image or machine type, no UIDs or selector, a selector that matches no
// proxy, MaxUnavailable below 1) or both UIDs and a selector. No rollout was started.
var ErrNoRollout = errors.New("no rollout")

// Rollout starts the Rollout workflow of opts and returns its workflow ID, which RolloutStatus,
// ResumeRollout and RolloutResult take. A selector is resolved to UIDs here, once: a proxy
// created later is not in the rollout. An invalid UID fails with ErrInvalidUID, options that
// roll out nothing with ErrNoRollout.
func (c *Client) Rollout(ctx context.Context, opts RolloutOptions) (string, error) {
	switch {
	case opts.MaxUnavailable < 1:
		return "", fmt.Errorf("%w: max unavailable is %d: want at least 1", ErrNoRollout, opts.MaxUnavailable)
	case opts.Image == "" && opts.MachineType == "":
		return "", fmt.Errorf("%w: nothing to change: give an image, a machine type or both", ErrNoRollout)
	case len(opts.UIDs) > 0 && opts.Selector != "":
		return "", fmt.Errorf("%w: give UIDs or a selector, not both", ErrNoRollout)
	case len(opts.UIDs) == 0 && opts.Selector == "":
		return "", fmt.Errorf("%w: give the UIDs of the proxies to change, or a selector", ErrNoRollout)
	}
	for i, uid := range opts.UIDs {
		if err := checkUID(uid); err != nil {
			return "", fmt.Errorf("rollout: %w", err)
		}
		if slices.Contains(opts.UIDs[:i], uid) {
			return "", fmt.Errorf("%w: proxy %s is listed twice", ErrNoRollout, uid)
		}
	}
	uids := opts.UIDs
	if opts.Selector != "" {
		var err error
		if uids, err = c.selectProxies(ctx, opts.Selector); err != nil {
			return "", err
		}
		if len(uids) == 0 {
			return "", fmt.Errorf("%w: no proxy matches %s AND (%s)", ErrNoRollout, ProxySelection, opts.Selector)
		}
	}
	in := fleet.RolloutInput{UIDs: uids, Image: opts.Image, MachineType: opts.MachineType, MaxUnavailable: opts.MaxUnavailable, Selector: opts.Selector}
	id := core.RolloutWorkflowID(requestID())
	if _, err := c.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: c.taskQueue}, core.RolloutName, in); err != nil {
		return "", fmt.Errorf("start rollout of %d proxies: %w", len(uids), err)
	}
	return id, nil
}

// selectProxies lists the UIDs of the Proxy entities selector picks out of ProxySelection, in
// order.
func (c *Client) selectProxies(ctx context.Context, selector string) ([]string, error) {
	query := ProxySelection + " AND (" + selector + ")"
	var uids []string
	var token []byte
	for {
		resp, err := c.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("select proxies (%s): %w", query, err)
		}
		for _, info := range resp.GetExecutions() {
			p, err := proxyOf(info)
			if err != nil {
				return nil, fmt.Errorf("select proxies: workflow %s: %w", info.GetExecution().GetWorkflowId(), err)
			}
			if p.UID != "" && !slices.Contains(uids, p.UID) {
				uids = append(uids, p.UID)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	slices.Sort(uids)
	return uids, nil
}

// RolloutStatus asks the rollout with workflow ID id where it is: what is done, changing and
// pending, and whether it is paused, by which failure. A closed rollout answers too, as long as a
// worker runs to replay it.
func (c *Client) RolloutStatus(ctx context.Context, id string) (fleet.RolloutStatus, error) {
	val, err := c.temporal.QueryWorkflow(ctx, id, "", core.StatusQuery)
	if err != nil {
		return fleet.RolloutStatus{}, fmt.Errorf("status of rollout %s: %w", id, err)
	}
	var st fleet.RolloutStatus
	if err := val.Get(&st); err != nil {
		return fleet.RolloutStatus{}, fmt.Errorf("status of rollout %s: %w", id, err)
	}
	return st, nil
}

// ResumeRollout resumes the paused rollout with workflow ID id: the changes that failed are made
// again, and it goes on. It returns the status once resumed. A rollout that is not paused
// refuses, and nothing changes.
func (c *Client) ResumeRollout(ctx context.Context, id string) (fleet.RolloutStatus, error) {
	handle, err := c.temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateName:   fleet.ResumeUpdate,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return fleet.RolloutStatus{}, fmt.Errorf("resume rollout %s: %w", id, err)
	}
	var st fleet.RolloutStatus
	if err := handle.Get(ctx, &st); err != nil {
		return fleet.RolloutStatus{}, fmt.Errorf("resume rollout %s: %w", id, err)
	}
	return st, nil
}

// RolloutResult waits for the rollout with workflow ID id to end, through its runs, and returns
// its last status: every proxy done. A paused rollout does not end: follow it with
// RolloutStatus meanwhile.
func (c *Client) RolloutResult(ctx context.Context, id string) (fleet.RolloutStatus, error) {
	var st fleet.RolloutStatus
	if err := c.temporal.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil {
		return fleet.RolloutStatus{}, fmt.Errorf("rollout %s: %w", id, err)
	}
	return st, nil
}
