package proxyvm

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
)

// GetProxyInput is the input of GetProxy: the proxy's UID, its provider ID, or both, which must
// then name the same proxy.
type GetProxyInput struct {
	UID        string `json:"uid,omitempty"`
	ProviderID string `json:"providerID,omitempty"`
}

// GetProxyResult is a proxy's VM as GetProxy finds it.
type GetProxyResult struct {
	// State is Running (with a routable address), Provisioning (running, none yet) or Stopped.
	State      proxy.State `json:"state"`
	ProviderID string      `json:"providerID"`
	VMID       int         `json:"vmid"`
	Node       string      `json:"node"`
	Name       string      `json:"name"`
	// UID, CreatedAt, InstanceID (cloud-init's, of the VM's seed) and Image are read from the
	// VM's mark; the last two are empty until the VM's first seed.
	UID        string    `json:"uid"`
	CreatedAt  time.Time `json:"createdAt,omitzero"`
	InstanceID string    `json:"instanceID,omitempty"`
	Image      string    `json:"image,omitempty"`
	// NotFound says why there is no such VM when there is none (absent, its VMID now another
	// VM's, not marked as the proxy's), the rest of the result empty: a read that finds nothing
	// completes with that answer rather than failing, so the UI shows no failed workflow for it.
	NotFound string `json:"notFound,omitempty"`
	// Spec is the rest of the spec the mark records (proxy.Spec), nil before the VM's first
	// seed: what an entity that lost its state rebuilds it from.
	Spec *proxy.Spec `json:"spec,omitempty"`
	// RebootOwed is the mark's record of the last operation (proxy.Op) when that owes a reboot:
	// a change written to the VM that its guest has not yet seen; nil when none is.
	RebootOwed *proxy.Op `json:"rebootOwed,omitempty"`
	// IPv4 and IPv6 are net0's routable addresses as the guest agent reports them, and
	// Addresses all of them, "address/prefix-length".
	IPv4      string   `json:"ipv4,omitempty"`
	IPv6      string   `json:"ipv6,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	// Cores, MemoryMiB and DiskGiB (the boot disk's, rounded down) are what the VM's config
	// gives it (proxy.MachineOf), for a caller to compare with its machine type
	// (proxy.Machine.Drift). Each is zero when the config does not tell.
	Cores     int   `json:"cores,omitempty"`
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	DiskGiB   int64 `json:"diskGiB,omitempty"`
	// NICs are the VM's net[n] config values by key, "net0" first (proxy.NICsOf), for a caller to
	// compare with the NICs it wants (proxy.Machine.NICDrift); nil when the config has none.
	NICs pve.VMConfig `json:"nics,omitempty"`
}

// GetProxy finds a proxy's VM and says what it is doing. It reads and never changes anything,
// needs no create to have run, and may run at any time beside the proxy's create and delete.
//
// By UID it finds the VM carrying the UID's mark on the proxy's probe VMIDs or with its name,
// as a create or delete does (lookup); by provider ID it reads the VM at that VMID, which must
// have that name and pveflow's mark. Its calls are cluster resources, the VM's config (the mark,
// the name, the lock) and, for a running VM, the guest agent: three in the common case. The
// status comes from cluster resources, a cache that lags by seconds; the agent confirms a
// running VM, and only when it does not answer does a fourth call, the VM's status, tell a
// paused VM from one that is still booting. A VM the cache shows as not running is read live
// before it is reported stopped: the cache may not have seen it start.
//
// It completes with NotFound set when there is no such VM (absent, its VMID now holds a VM of
// another name or a container, the VM lacks the mark, or it is a template); it fails Transient
// when the VM is locked, still being cloned, or of a status neither the cache nor a live read
// knows (its node is down), and Permanent on bad input or when two VMs carry the proxy's mark.
func (w *Workflows) GetProxy(ctx workflow.Context, in GetProxyInput) (GetProxyResult, error) {
	g := &getter{in: in}
	switch {
	case in.UID == "" && in.ProviderID == "":
		return GetProxyResult{}, core.Permanentf("get proxy: give its UID or its provider ID")
	case in.UID != "":
		if err := proxy.ValidateUID(in.UID); err != nil {
			return GetProxyResult{}, core.Permanentf("get proxy: %v", err)
		}
		g.name = proxy.NameFromUID(in.UID)
	}
	if in.ProviderID != "" {
		vmid, name, err := proxy.ParseProviderID(in.ProviderID)
		if err != nil {
			return GetProxyResult{}, core.Permanentf("get proxy: %v", err)
		}
		g.vmid, g.name = vmid, name
	}
	var s core.Settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return core.SettingsOf(w.Config) }).Get(&s); err != nil {
		return GetProxyResult{}, err
	}
	g.proxyOps = proxyOps{ctx: ctx, s: s, t: core.ReadTracker(ctx), uid: in.UID, name: g.name, read: true}
	find := g.byUID
	if in.ProviderID != "" {
		find = g.byProviderID
	}
	v, status, err := find()
	res := GetProxyResult{}
	if err == nil {
		res, err = g.state(v, status)
	}
	if appErr, ok := errors.AsType[*temporal.ApplicationError](err); ok && appErr.Type() == core.FailNotFound {
		return GetProxyResult{NotFound: appErr.Message()}, nil
	}
	return res, err
}

type getter struct {
	proxyOps
	in GetProxyInput
	// vmid is the provider ID's.
	vmid int
}

// what names the proxy in messages as the caller did.
func (g *getter) what() string {
	if g.in.ProviderID != "" {
		return g.in.ProviderID
	}
	return g.in.UID
}

// byUID finds the one VM carrying the UID's mark, and the status cluster resources shows for it.
func (g *getter) byUID() (vm, string, error) {
	h, err := g.lookup()
	if err != nil {
		return vm{}, "", err
	}
	switch {
	case len(h.Ours) > 1:
		ids := make([]int, len(h.Ours))
		for i, v := range h.Ours {
			ids[i] = v.VMID
		}
		return vm{}, "", core.Permanentf("get proxy %s: VMs %v all carry its mark; keep one and destroy the others", g.uid, ids)
	case len(h.Ours) == 1:
		v := h.Ours[0]
		return v, statusIn(h.Resources, v.VMID), nil
	case len(h.Unsettled) > 0:
		v := h.Unsettled[0]
		return vm{}, "", core.Transientf("get proxy %s: VM %d on node %s is being cloned and shows whose it is only once the clone has written its config", g.uid, v.VMID, v.Node)
	}
	return vm{}, "", core.NotFoundf("get proxy %s: no VM carries its mark", g.uid)
}

// byProviderID reads the VM at the provider ID's VMID, which must carry its name and pveflow's
// mark (with the UID's, when one was given too).
func (g *getter) byProviderID() (vm, string, error) {
	var resources []pve.VMResource
	if err := g.listResources(activities.ResourcesFilter{VMIDs: []int{g.vmid}}, &resources); err != nil {
		return vm{}, "", err
	}
	i := resourceIndex(resources, g.vmid)
	if i < 0 {
		return vm{}, "", core.NotFoundf("get proxy %s: the cluster has no VM %d", g.what(), g.vmid)
	}
	v := vm{Node: resources[i].Node, VMID: g.vmid}
	gone, err := g.readVM(&v, readConfig, activities.WaitNone, 0, &v.Config)
	switch {
	case err != nil:
		return vm{}, "", err
	case gone:
		return vm{}, "", core.NotFoundf("get proxy %s: VM %d is gone", g.what(), g.vmid)
	}
	owner, known := proxy.OwnerOf(v.Config)
	_, managed := proxy.ParseDescription(v.Config["description"])
	switch {
	case !known:
		return vm{}, "", core.Transientf("get proxy %s: VM %d on node %s is being cloned and shows whose it is only once the clone has written its config", g.what(), v.VMID, v.Node)
	case v.Config["template"] == "1":
		return vm{}, "", core.NotFoundf("get proxy %s: VM %d is a template, which is no proxy's VM", g.what(), v.VMID)
	case v.Config["name"] != g.name:
		return vm{}, "", core.NotFoundf("get proxy %s: VM %d is named %q: the proxy's VM is gone and its VMID taken again", g.what(), v.VMID, v.Config["name"])
	case !managed:
		return vm{}, "", core.NotFoundf("get proxy %s: VM %d does not carry pveflow's mark", g.what(), v.VMID)
	case g.uid != "" && owner != g.uid:
		return vm{}, "", core.NotFoundf("get proxy %s: VM %d carries the mark of proxy %q, not of %s", g.what(), v.VMID, owner, g.uid)
	}
	return v, resources[i].Status, nil
}

// state says what VM v, of status status in cluster resources, is doing.
func (g *getter) state(v vm, status string) (GetProxyResult, error) {
	mark, _ := proxy.ParseDescription(v.Config["description"])
	// A value the config does not tell stays zero: a read reports what it finds.
	m, _ := proxy.MachineOf(v.Config)
	res := GetProxyResult{
		ProviderID: proxy.FormatProviderID(v.VMID, v.Config["name"]),
		VMID:       v.VMID,
		Node:       v.Node,
		Name:       v.Config["name"],
		UID:        mark.UID,
		CreatedAt:  mark.CreatedAt,
		InstanceID: mark.InstanceID,
		Image:      mark.Image,
		Spec:       mark.Spec,
		RebootOwed: owedOnly(mark.Op),
		Cores:      m.Cores,
		MemoryMiB:  m.MemoryMiB,
		DiskGiB:    m.DiskGiB,
		NICs:       m.NICs,
	}
	if lock := v.Config["lock"]; lock != "" {
		return GetProxyResult{}, core.Transientf("get proxy %s: VM %d on node %s is locked (%s)", g.what(), v.VMID, v.Node, lock)
	}
	if status != "running" {
		// Cluster resources lag: a VM they show as stopped, or have not seen yet, may run
		// already, as one just created does. Only a live read may call it stopped.
		var st pve.VMStatus
		gone, err := g.readVM(&v, readStatus, activities.WaitNone, 0, &st)
		switch {
		case err != nil && status == "unknown":
			return GetProxyResult{}, core.Transientf("get proxy %s: Proxmox does not know the status of VM %d on node %s, and reading it failed: the node may be down: %v", g.what(), v.VMID, v.Node, err)
		case err != nil:
			return GetProxyResult{}, err
		case gone:
			return GetProxyResult{}, core.NotFoundf("get proxy %s: VM %d is gone", g.what(), v.VMID)
		}
		res.Node = v.Node
		if st.Status != "running" {
			res.State = proxy.Stopped
			return res, nil
		}
		status = st.Status
	}
	var a *activities.Activities
	ref := v.ref()
	step := "read the guest network interfaces of " + ref.String()
	g.t.Step(step)
	var agent activities.AgentResult
	err := core.Execute(g.ctx, g.s.ReadOptions(step), a.AgentNetworkInterfaces,
		activities.AgentRequest{VMRef: ref, MAC: proxy.MACFromNet(v.Config["net0"])}).Get(g.ctx, &agent)
	switch {
	case err == nil:
		res.IPv4, res.IPv6, res.Addresses = agent.IPv4, agent.IPv6, agent.Addresses
		res.State = proxy.MapState(status, "", agent.IPv4 != "" || agent.IPv6 != "")
	case core.IsType(err, activities.ErrNotRunning):
		// The status cache had not seen the VM stop.
		res.State = proxy.Stopped
	case core.IsType(err, activities.ErrAgentNotRunning):
		// A guest booting and a paused VM both leave the agent silent; QEMU's status tells.
		var st pve.VMStatus
		gone, err := g.readVM(&v, readStatus, activities.WaitNone, 0, &st)
		switch {
		case err != nil:
			return GetProxyResult{}, err
		case gone:
			return GetProxyResult{}, core.NotFoundf("get proxy %s: VM %d is gone", g.what(), v.VMID)
		}
		res.Node = v.Node
		res.State = proxy.MapState(st.Status, st.QMPStatus, false)
	default:
		return GetProxyResult{}, core.Fail(step, err)
	}
	return res, nil
}

// resourceIndex is the index of VM vmid in resources, or -1.
func resourceIndex(resources []pve.VMResource, vmid int) int {
	for i, r := range resources {
		if r.Type == "qemu" && r.VMID == vmid {
			return i
		}
	}
	return -1
}

// statusIn is the status cluster resources shows for VM vmid, "" when it does not list it.
func statusIn(resources []pve.VMResource, vmid int) string {
	if i := resourceIndex(resources, vmid); i >= 0 {
		return resources[i].Status
	}
	return ""
}

// owedOnly is op when it owes a reboot, else nil.
func owedOnly(op *proxy.Op) *proxy.Op {
	if !op.OwesReboot() {
		return nil
	}
	return op
}
