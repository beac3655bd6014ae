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
	// Status is PVE's status ("running", "stopped", "unknown"): from cluster resources, a cache
	// that lags by seconds, when it says running, and else read live, as the cache may not have
	// seen the VM start. "unknown" is a VM whose status no read could give (its node is down).
	// GetProxy tells what a VM is doing.
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

// ListProxies lists the VMs that carry pveflow's mark, with one cluster resources call, one
// config read per candidate (proxy.MayBeProxy: a VM with pveflow's tag or name) and one live
// status read per proxy the cache does not show running. It reads and never changes anything.
// The resources call failing fails the list; a candidate whose config cannot be read is skipped
// with a log line and reported in Unreadable.
func (w *Workflows) ListProxies(ctx workflow.Context) (ListProxiesResult, error) {
	var s settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return settingsOf(w.Config) }).Get(&s); err != nil {
		return ListProxiesResult{}, err
	}
	res, _, err := listMarked(ctx, s)
	if err != nil {
		return res, err
	}
	return res, readLiveStatus(ctx, s, res.Proxies)
}

// readLiveStatus reads, listConcurrency at a time, the status of each proxy the cache does not
// show running: it lags, and a VM just created shows stopped, or unknown, for seconds. A read
// that fails leaves the cache's status, with a log line.
func readLiveStatus(ctx workflow.Context, s settings, proxies []ListedProxy) error {
	var a *activities.Activities
	t := readTracker(ctx)
	var stale []int
	for i, p := range proxies {
		if p.Status != "running" {
			stale = append(stale, i)
		}
	}
	for start := 0; start < len(stale); start += listConcurrency {
		batch := stale[start:min(start+listConcurrency, len(stale))]
		t.step("read the status of proxies the cache does not show running")
		reads := make([]workflow.Future, len(batch))
		for i, j := range batch {
			ref := activities.VMRef{Node: proxies[j].Node, VMID: proxies[j].VMID}
			reads[i] = execute(ctx, s.readOptions("read status of "+ref.String()), a.VMStatus, activities.VMStatusRequest{VMRef: ref})
		}
		for i, j := range batch {
			var st pve.VMStatus
			err := reads[i].Get(ctx, &st)
			switch {
			case temporal.IsCanceledError(err):
				return err
			case err != nil:
				workflow.GetLogger(ctx).Warn("keeping the cached status of a VM whose status cannot be read", "vmid", proxies[j].VMID, "node", proxies[j].Node, "error", err)
			default:
				proxies[j].Status = st.Status
			}
		}
	}
	return nil
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
