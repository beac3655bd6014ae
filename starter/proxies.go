package starter

import (
	"context"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// EntityProxies is a worker's activities.Proxies: it sends the requests of RequestChange and
// RequestDelete (Rollout's and CollectGarbage's, which a workflow cannot send itself) to the
// proxies' entities through Client, with the request's ID as the Update ID, so that a retried
// activity joins the request its attempt before sent.
type EntityProxies struct{ Client *Client }

// ChangeProxy sends req's change and waits for the operation that serves it.
func (p EntityProxies) ChangeProxy(ctx context.Context, req activities.ProxyChange) (activities.ProxyChangeOutcome, error) {
	change := proxyvm.ChangeRequest{UID: req.UID, Image: req.Image, MachineType: req.MachineType}
	r, err := p.Client.Change(ctx, change, WithUpdateID(req.RequestID))
	res, err := result[proxyvm.ChangeProxyResult](ctx, r, err)
	return activities.ProxyChangeOutcome{
		VMID: res.VMID, Node: res.Node, IPv4: res.IPv4, Changed: res.Changed, Restarted: res.Restarted, Rebuilt: res.Rebuilt,
	}, err
}

// DeleteProxy sends req's delete and waits for the operation that serves it.
func (p EntityProxies) DeleteProxy(ctx context.Context, req activities.ProxyDelete) (activities.ProxyDeleteOutcome, error) {
	del := proxyvm.DeleteProxyInput{UID: req.UID, UnlessWantedSince: req.UnlessWantedSince}
	r, err := p.Client.Delete(ctx, del, WithUpdateID(req.RequestID))
	res, err := result[proxyvm.DeleteProxyResult](ctx, r, err)
	return activities.ProxyDeleteOutcome{Destroyed: res.Destroyed}, err
}

// result waits for the result of r, the request sent unless err says why not.
func result[T any](ctx context.Context, r *Request, err error) (T, error) {
	var res T
	if err != nil {
		return res, err
	}
	return res, r.Get(ctx, &res)
}
