package reads

import (
	"cmp"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
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
	// Unreadable are the VMIDs of VMs whose config could not be read: each is skipped, with a
	// log line, and may be a proxy.
	Unreadable []int `json:"unreadable,omitempty"`
}

// ListProxies lists the VMs that carry pveflow's mark, with one cluster resources call, one
// config read per VM in the cluster (templates and containers aside) and one live status read
// per proxy the cache does not show running. It reads and never changes anything. The
// resources call failing fails the list; a VM whose config cannot be read is skipped with a
// log line and reported in Unreadable.
func (w *Workflows) ListProxies(ctx workflow.Context) (ListProxiesResult, error) {
	var s core.Settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return core.SettingsOf(w.Config) }).Get(&s); err != nil {
		return ListProxiesResult{}, err
	}
	c, err := ReadCluster(ctx, s)
	if err != nil {
		return c.ListProxiesResult, err
	}
	return c.ListProxiesResult, readLiveStatus(ctx, s, c.Proxies)
}

// readLiveStatus reads, listConcurrency at a time, the status of each proxy the cache does not
// show running: it lags, and a VM just created shows stopped, or unknown, for seconds. A read
// that fails leaves the cache's status, with a log line.
func readLiveStatus(ctx workflow.Context, s core.Settings, proxies []ListedProxy) error {
	var a *activities.Activities
	t := core.ReadTracker(ctx)
	var stale []int
	for i, p := range proxies {
		if p.Status != "running" {
			stale = append(stale, i)
		}
	}
	for start := 0; start < len(stale); start += ListConcurrency {
		batch := stale[start:min(start+ListConcurrency, len(stale))]
		t.Step("read the status of proxies the cache does not show running")
		reads := make([]workflow.Future, len(batch))
		for i, j := range batch {
			ref := activities.VMRef{Node: proxies[j].Node, VMID: proxies[j].VMID}
			reads[i] = core.Execute(ctx, s.ReadOptions("read status of "+ref.String()), a.VMStatus, activities.VMStatusRequest{VMRef: ref})
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

// ListConcurrency bounds the config reads a list has in flight.
const ListConcurrency = 8

// Cluster is what a read of every VM's config found.
type Cluster struct {
	// ListProxiesResult holds the VMs that carry pveflow's mark, and those that could not be
	// read.
	ListProxiesResult
	// Resources is the cluster resources list the read began with.
	Resources []pve.VMResource
	// Names are the names of every VM, in cluster resources and in its config.
	Names map[string]bool
	// ISOs are the ISO volumes any VM's config refers to (a CD-ROM drive's
	// "local:iso/x.iso,media=cdrom").
	ISOs map[string]bool
	// Specs are the specs the marks of Proxies record, by VMID; none for a VM not given its
	// first seed yet, or marked before marks recorded specs.
	Specs map[int]proxy.Spec
}

// ReadCluster reads the config of every VM that cluster resources lists (templates and
// containers aside) for pveflow's mark. Only the mark tells a proxy: a VM's tag is set after
// its clone, by a step a create may never reach, and its name may be one of the operator's, so
// neither can narrow the reads. A VM gone since the resources call is left out; one whose
// config cannot be read is skipped with a log line and reported in Unreadable. The resources
// call failing, or the workflow being cancelled, fails the whole read.
func ReadCluster(ctx workflow.Context, s core.Settings) (Cluster, error) {
	t := core.ReadTracker(ctx)
	c := Cluster{ListProxiesResult: ListProxiesResult{Proxies: []ListedProxy{}}, Names: map[string]bool{}, ISOs: map[string]bool{},
		Specs: map[int]proxy.Spec{}}
	if err := core.ListResources(ctx, s.ReadOptions("list cluster resources"), t, activities.ResourcesFilter{}, &c.Resources); err != nil {
		return Cluster{}, err
	}
	var vms []pve.VMResource
	for _, r := range c.Resources {
		if r.Name != "" {
			c.Names[r.Name] = true
		}
		if r.Type == "qemu" && !r.Template {
			vms = append(vms, r)
		}
	}
	slices.SortFunc(vms, func(a, b pve.VMResource) int { return cmp.Compare(a.VMID, b.VMID) })
	logger := workflow.GetLogger(ctx)
	var a *activities.Activities
	for start := 0; start < len(vms); start += ListConcurrency {
		batch := vms[start:min(start+ListConcurrency, len(vms))]
		t.Step("read the configs of the cluster's VMs")
		reads := make([]workflow.Future, len(batch))
		for i, r := range batch {
			ref := activities.VMRef{Node: r.Node, VMID: r.VMID}
			reads[i] = core.Execute(ctx, s.ReadOptions("read config of "+ref.String()),
				a.VMConfig, activities.VMConfigRequest{VMRef: ref})
		}
		for i, r := range batch {
			var cfg pve.VMConfig
			err := reads[i].Get(ctx, &cfg)
			switch {
			case temporal.IsCanceledError(err):
				return Cluster{}, err
			case core.IsType(err, activities.ErrNotFound):
				logger.Debug("leaving out a VM gone since cluster resources listed it", "vmid", r.VMID, "node", r.Node)
				continue
			case err != nil:
				logger.Warn("skipping a VM whose config cannot be read", "vmid", r.VMID, "node", r.Node, "error", err)
				c.Unreadable = append(c.Unreadable, r.VMID)
				continue
			}
			if cfg["name"] != "" {
				c.Names[cfg["name"]] = true
			}
			for _, volid := range proxy.ISOVolumes(cfg) {
				c.ISOs[volid] = true
			}
			mark, managed := proxy.ParseDescription(cfg["description"])
			if !managed {
				continue
			}
			c.Proxies = append(c.Proxies, ListedProxy{
				ProviderID: proxy.FormatProviderID(r.VMID, cfg["name"]),
				VMID:       r.VMID,
				Node:       r.Node,
				Name:       cfg["name"],
				UID:        mark.UID,
				CreatedAt:  mark.CreatedAt,
				Status:     r.Status,
			})
			if mark.Spec != nil {
				c.Specs[r.VMID] = *mark.Spec
			}
		}
	}
	return c, nil
}
