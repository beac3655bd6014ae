package workflows

import (
	"cmp"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// ListedProxy is a VM that carries pveflow's mark, as ListProxies finds it.
type ListedProxy struct {
	ProviderID string `json:"providerID"`
	VMID       int    `json:"vmid"`
	Node       string `json:"node"`
	Name       string `json:"name"`
	// UID and CreatedAt are read from the mark; UID is empty on a VM marked as pveflow's
	// without one.
	UID       string    `json:"uid"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	// Status is PVE's status in cluster resources ("running", "stopped", "unknown"): a cache
	// that lags by seconds. GetProxy tells what a VM is doing.
	Status string `json:"status"`
}

// ListProxiesResult is what ListProxies returns.
type ListProxiesResult struct {
	// Proxies are the marked VMs, by VMID.
	Proxies []ListedProxy `json:"proxies"`
	// Unreadable are the VMIDs of candidates whose config could not be read: each is skipped,
	// with a log line, and may be a proxy.
	Unreadable []int `json:"unreadable,omitempty"`
}

// ListProxies lists the VMs that carry pveflow's mark, with one cluster resources call and one
// config read per candidate (proxy.MayBeProxy: a VM with pveflow's tag or name). It reads and
// never changes anything. The resources call failing fails the list; a candidate whose config
// cannot be read is skipped with a log line and reported in Unreadable.
func (w *Workflows) ListProxies(ctx workflow.Context) (ListProxiesResult, error) {
	var s settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return settingsOf(w.Config) }).Get(&s); err != nil {
		return ListProxiesResult{}, err
	}
	res, _, err := listMarked(ctx, s)
	return res, err
}

// listConcurrency bounds the config reads a list has in flight.
const listConcurrency = 8

// listMarked finds every VM that carries pveflow's mark: the candidates cluster resources lists
// (proxy.MayBeProxy), each one's config read for the mark. A VM gone since the resources call
// is left out; one whose config cannot be read is skipped with a log line and reported in
// Unreadable. The resources call failing, or the workflow being cancelled, fails the whole list.
// It returns the resources list it read too.
func listMarked(ctx workflow.Context, s settings) (ListProxiesResult, []pve.VMResource, error) {
	o := proxyOps{ctx: ctx, s: s, t: readTracker(ctx), read: true}
	var resources []pve.VMResource
	if err := o.listResources(&resources); err != nil {
		return ListProxiesResult{}, nil, err
	}
	var candidates []pve.VMResource
	for _, r := range resources {
		if proxy.MayBeProxy(r) {
			candidates = append(candidates, r)
		}
	}
	slices.SortFunc(candidates, func(a, b pve.VMResource) int { return cmp.Compare(a.VMID, b.VMID) })
	res := ListProxiesResult{Proxies: []ListedProxy{}}
	logger := workflow.GetLogger(ctx)
	var a *activities.Activities
	for start := 0; start < len(candidates); start += listConcurrency {
		batch := candidates[start:min(start+listConcurrency, len(candidates))]
		o.t.step("read the configs of candidate VMs")
		reads := make([]workflow.Future, len(batch))
		for i, r := range batch {
			ref := activities.VMRef{Node: r.Node, VMID: r.VMID}
			reads[i] = execute(ctx, s.readOptions("read config of "+ref.String()),
				a.VMConfig, activities.VMConfigRequest{VMRef: ref})
		}
		for i, r := range batch {
			var cfg pve.VMConfig
			err := reads[i].Get(ctx, &cfg)
			switch {
			case temporal.IsCanceledError(err):
				return ListProxiesResult{}, nil, err
			case isType(err, activities.ErrNotFound):
				logger.Debug("leaving out a VM gone since cluster resources listed it", "vmid", r.VMID, "node", r.Node)
				continue
			case err != nil:
				logger.Warn("skipping a VM whose config cannot be read", "vmid", r.VMID, "node", r.Node, "error", err)
				res.Unreadable = append(res.Unreadable, r.VMID)
				continue
			}
			mark, managed := proxy.ParseDescription(cfg["description"])
			if !managed {
				continue
			}
			res.Proxies = append(res.Proxies, ListedProxy{
				ProviderID: proxy.FormatProviderID(r.VMID, cfg["name"]),
				VMID:       r.VMID,
				Node:       r.Node,
				Name:       cfg["name"],
				UID:        mark.UID,
				CreatedAt:  mark.CreatedAt,
				Status:     r.Status,
			})
		}
	}
	return res, resources, nil
}
