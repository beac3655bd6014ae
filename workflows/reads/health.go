package reads

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"

	"github.com/pveflow/pveflow/workflows/core"
)

// Reasons a node is unhealthy, in NodeHealth.Reason.
const (
	// ReasonUnauthorized: PVE refused the API token (401).
	ReasonUnauthorized = "Unauthorized"
	// ReasonForbidden: the token lacks a privilege a check needs (403).
	ReasonForbidden = "Forbidden"
	// ReasonUnreachable: no answer came: the connection failed, or the token file is unreadable.
	ReasonUnreachable = "Unreachable"
	// ReasonTimeout: no answer came in time.
	ReasonTimeout = "Timeout"
	// ReasonAPIError: PVE answered with another error.
	ReasonAPIError = "APIError"
	// ReasonStorageNotFound: the ISO storage is not on the node, or does not hold ISO images.
	ReasonStorageNotFound = "StorageNotFound"
	// ReasonTemplateNotFound: a configured template the node clones from is not a template in
	// the cluster.
	ReasonTemplateNotFound = "TemplateNotFound"
	// ReasonMissingPrivilege: the API token lacks a privilege a proxy on the node needs
	// (pve.PrivilegeRules); a create on the node would refuse to start.
	ReasonMissingPrivilege = "MissingPrivilege"
)

// NodeHealth is the health of one configured node.
type NodeHealth struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	// Reason and Message say why an unhealthy node is unhealthy: the first check that failed.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Details are what the checks read, as far as they got: pveVersion, kernel, isoStorage,
	// isoStorageAvailGiB, templates ("<found>/<configured>").
	Details map[string]string `json:"details,omitempty"`
	// MissingPrivileges are the privileges a proxy on the node needs that the API token lacks,
	// by path, whatever else failed.
	MissingPrivileges []pve.MissingPrivilege `json:"missingPrivileges,omitempty"`
}

// CheckHealthResult is what CheckHealth returns.
type CheckHealthResult struct {
	CheckedAt time.Time `json:"checkedAt"`
	// Nodes are the configured nodes, in config order.
	Nodes []NodeHealth `json:"nodes"`
	// OrphanDisks are the disks of VMIDs in pveflow's range that no VM has, older than
	// DefaultGrace, which `pveflow gc` deletes (GarbageSkipped ones it leaves, saying why);
	// CloneLocks are pveflow's VMs with "lock: clone", the stale ones with the command that
	// clears them. Neither makes a node unhealthy.
	OrphanDisks []GarbageDisk `json:"orphanDisks,omitempty"`
	CloneLocks  []CloneLock   `json:"cloneLocks,omitempty"`
	// UnlistedStorages are the storages whose disks could not be listed, each with why.
	UnlistedStorages []string `json:"unlistedStorages,omitempty"`
}

// Healthy reports whether every node is healthy.
func (r CheckHealthResult) Healthy() bool {
	return !slices.ContainsFunc(r.Nodes, func(n NodeHealth) bool { return !n.Healthy })
}

// healthTarget is one node to check, with the templates a proxy on it is cloned from.
type healthTarget struct {
	Node      string        `json:"node"`
	Templates []templateRef `json:"templates"`
	// Required are the privileges a proxy on the node needs, by path.
	Required []pve.PathPrivileges `json:"required,omitempty"`
}

// templateRef is a configured template as a node clones from it.
type templateRef struct {
	Image string `json:"image"`
	VMID  int    `json:"vmid"`
	// OnNode is set for a template of the node's own, which must be on the node; the cluster's
	// one template of an image may be on any node.
	OnNode bool `json:"onNode,omitempty"`
}

// healthSettings are what CheckHealth takes from the worker's configuration, recorded once.
type healthSettings struct {
	Settings core.Settings  `json:"settings"`
	Targets  []healthTarget `json:"targets"`
}

func healthSettingsOf(c config.Config) healthSettings {
	images := make([]string, 0, len(c.Proxmox.Templates))
	for image := range c.Proxmox.Templates {
		images = append(images, image)
	}
	slices.Sort(images)
	hs := healthSettings{Settings: core.SettingsOf(c)}
	for _, node := range c.Proxmox.Nodes {
		target := healthTarget{Node: node, Templates: []templateRef{}}
		for _, image := range images {
			t := c.Proxmox.Templates[image]
			if vmid, ok := t.On(node); ok {
				target.Templates = append(target.Templates, templateRef{Image: image, VMID: vmid, OnNode: len(t.Nodes) > 0})
			}
		}
		target.Required = hs.Settings.PrivilegeTarget(node, nicSets(hs.Settings), anyWaitsForCloudInit(hs.Settings), activities.NetworkAccess{}, target.templateVMIDs(), hs.Settings.Storage).Required()
		hs.Targets = append(hs.Targets, target)
	}
	return hs
}

// nicSets are the NICs of every machine type, in the order of their names: what the health
// check reads the privileges for.
func nicSets(s core.Settings) [][]config.NIC {
	var out [][]config.NIC
	for _, name := range workflow.DeterministicKeys(s.MachineTypes) {
		out = append(out, s.MachineTypes[name].NICs)
	}
	return out
}

// anyWaitsForCloudInit says whether a machine type waits for cloud-init: the health check
// then reads the privilege to read its result through the guest agent.
func anyWaitsForCloudInit(s core.Settings) bool {
	for _, name := range workflow.DeterministicKeys(s.MachineTypes) {
		if s.MachineTypes[name].WaitsForCloudInit() {
			return true
		}
	}
	return false
}

// templateVMIDs are the VMIDs of the templates the node clones from, each once.
func (t healthTarget) templateVMIDs() []int {
	var vmids []int
	for _, ref := range t.Templates {
		vmids = append(vmids, ref.VMID)
	}
	slices.Sort(vmids)
	return slices.Compact(vmids)
}

// CheckHealth checks every configured node, concurrently, and reports them in config order: the
// PVE version, the cluster's templates and the API token's privileges on every path a proxy
// needs them on (one call each, for all nodes; with no proxmox.storage, after the templates'
// configs, for their storage), the node's status, and its ISO storage's status. A node is healthy when every call answers, the ISO storage holds ISO images, every
// template a proxy on the node is cloned from is a template in the cluster, and the token holds
// every privilege a proxy on the node needs (pve.PrivilegeRules).
// An unhealthy node is reported, not a failure: the run fails only when it is cancelled.
func (w *Workflows) CheckHealth(ctx workflow.Context) (CheckHealthResult, error) {
	var hs healthSettings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return healthSettingsOf(w.Config) }).Get(&hs); err != nil {
		return CheckHealthResult{}, err
	}
	s := hs.Settings
	var a *activities.Activities
	readStep := func(summary string, activity any, args ...any) workflow.Future {
		return core.Execute(ctx, s.ReadOptions(summary), activity, args...)
	}
	version := readStep("read the PVE version", a.Version)
	resources := readStep("list cluster resources", a.ClusterResources, activities.ResourcesFilter{})
	privileges, settle := workflow.NewFuture(ctx) // of privilegeCheck
	workflow.Go(ctx, func(ctx workflow.Context) {
		pc, err := readPrivileges(ctx, hs, resources, readStep)
		settle.Set(pc, err)
	})
	res := CheckHealthResult{CheckedAt: workflow.Now(ctx).UTC(), Nodes: make([]NodeHealth, len(hs.Targets))}
	wg := workflow.NewWaitGroup(ctx)
	for i, target := range hs.Targets {
		wg.Add(1)
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer wg.Done()
			c := nodeCheck{
				version:    version,
				resources:  resources,
				privileges: privileges,
				status:     readStep("read status of node "+target.Node, a.NodeStatus, target.Node),
				storage: readStep(fmt.Sprintf("read status of storage %s on node %s", s.ISOStorage, target.Node),
					a.StorageStatus, activities.StorageRef{Node: target.Node, Storage: s.ISOStorage}),
			}
			res.Nodes[i] = c.judge(ctx, s, i, target)
		})
	}
	wg.Wait(ctx)
	if ctx.Err() != nil {
		return CheckHealthResult{}, temporal.NewCanceledError("the health check was cancelled")
	}
	var rs []pve.VMResource
	if resources.Get(ctx, &rs) == nil {
		// What failed clones and destroys left, as a collection would find it.
		lf := LeftoverFinder{Ctx: ctx, Settings: s, Resources: rs, Cutoff: workflow.Now(ctx).Add(-DefaultGrace), Step: func(string) {}}
		left, err := lf.Find()
		if err != nil {
			return CheckHealthResult{}, err
		}
		res.OrphanDisks, res.CloneLocks, res.UnlistedStorages = left.Disks, left.CloneLocks, left.Unlisted
	}
	logger := workflow.GetLogger(ctx)
	for _, n := range res.Nodes {
		logger.Info("node checked", "node", n.Name, "healthy", n.Healthy, "reason", n.Reason, "message", n.Message)
	}
	return res, nil
}

// nodeCheck is the calls one node's health is judged on.
type nodeCheck struct {
	version, resources, status, storage workflow.Future
	// privileges is of a privilegeCheck.
	privileges workflow.Future
}

// privilegeCheck is what the check found of the API token's privileges.
type privilegeCheck struct {
	// Required are the privileges a proxy on each target needs, in the targets' order.
	Required [][]pve.PathPrivileges
	// Held are the token's privileges on each path of Required.
	Held map[string]pve.Privileges
}

// readPrivileges reads the token's privileges on every path a target needs them on. The paths
// of SDN.Use come from the templates' NICs and the vnets' zones (NetworkAccess), of the
// templates the cluster resources list as templates; with no proxmox.storage, a clone
// allocates on its template's boot disk's storage, and their configs are read for it too.
func readPrivileges(ctx workflow.Context, hs healthSettings, resources workflow.Future, readStep func(string, any, ...any) workflow.Future) (privilegeCheck, error) {
	var a *activities.Activities
	pc := privilegeCheck{Required: make([][]pve.PathPrivileges, len(hs.Targets))}
	for i, t := range hs.Targets {
		pc.Required[i] = t.Required
	}
	var rs []pve.VMResource
	if resources.Get(ctx, &rs) == nil {
		req := activities.NetworkAccessRequest{Templates: templateRefs(hs.Targets, rs)}
		networkRead := readStep("read the templates' NICs and the SDN vnets", a.NetworkAccess, req)
		var storages map[int]string
		if hs.Settings.Storage == "" {
			storages = templateStorages(ctx, hs.Targets, rs, readStep)
		}
		var net activities.NetworkAccess
		if err := networkRead.Get(ctx, &net); err != nil {
			return pc, err
		}
		for i, t := range hs.Targets {
			cloneStorages := []string{hs.Settings.Storage}
			for _, vmid := range t.templateVMIDs() {
				if s, ok := storages[vmid]; ok {
					cloneStorages = append(cloneStorages, s)
				}
			}
			pc.Required[i] = hs.Settings.PrivilegeTarget(t.Node, nicSets(hs.Settings), anyWaitsForCloudInit(hs.Settings), net, t.templateVMIDs(), cloneStorages...).Required()
		}
	}
	err := readStep("read the API token's permissions", a.Permissions, activities.PermissionsRequest{Paths: core.RequiredPaths(pc.Required...), Fresh: true}).Get(ctx, &pc.Held)
	return pc, err
}

// templateStorages are the storages of the boot disks of the targets' templates that rs lists,
// by VMID, read concurrently; a template whose config does not read is left out, its node's
// templates check says why.
func templateStorages(ctx workflow.Context, targets []healthTarget, rs []pve.VMResource, readStep func(string, any, ...any) workflow.Future) map[int]string {
	var a *activities.Activities
	configs := map[int]workflow.Future{}
	var vmids []int
	for _, ref := range templateRefs(targets, rs) {
		configs[ref.VMID] = readStep("read config of template "+ref.String(), a.VMConfig, activities.VMConfigRequest{VMRef: ref})
		vmids = append(vmids, ref.VMID)
	}
	storages := map[int]string{}
	for _, vmid := range vmids {
		var cfg pve.VMConfig
		if configs[vmid].Get(ctx, &cfg) != nil {
			continue
		}
		if storage, err := core.BootStorage(cfg); err == nil {
			storages[vmid] = storage
		}
	}
	return storages
}

// templateRefs are the targets' templates that rs lists as templates, each once, in the
// targets' order.
func templateRefs(targets []healthTarget, rs []pve.VMResource) []activities.VMRef {
	var refs []activities.VMRef
	for _, t := range targets {
		for _, vmid := range t.templateVMIDs() {
			i := slices.IndexFunc(rs, func(r pve.VMResource) bool { return r.Type == "qemu" && r.VMID == vmid && r.Template })
			if i >= 0 && !slices.ContainsFunc(refs, func(r activities.VMRef) bool { return r.VMID == vmid }) {
				refs = append(refs, activities.VMRef{Node: rs[i].Node, VMID: vmid})
			}
		}
	}
	return refs
}

// judge waits for every call of the node's check and judges them in order: version, node
// status, ISO storage, templates, privileges. The first that fails gives the reason.
func (c nodeCheck) judge(ctx workflow.Context, s core.Settings, i int, target healthTarget) NodeHealth {
	var (
		v         pve.Version
		ns        pve.NodeStatus
		st        pve.StorageStatus
		resources []pve.VMResource
	)
	versionErr := c.version.Get(ctx, &v)
	statusErr := c.status.Get(ctx, &ns)
	storageErr := c.storage.Get(ctx, &st)
	resourcesErr := c.resources.Get(ctx, &resources)
	var pc privilegeCheck
	privilegesErr := c.privileges.Get(ctx, &pc)

	h := NodeHealth{Name: target.Node, Details: map[string]string{}}
	if privilegesErr == nil {
		h.MissingPrivileges = pve.Missing(pc.Required[i], pc.Held)
	}
	if versionErr != nil {
		return h.failed(callReason(versionErr), versionErr, s)
	}
	h.Details["pveVersion"] = v.Version
	if statusErr != nil {
		return h.failed(callReason(statusErr), statusErr, s)
	}
	h.Details["kernel"] = ns.KVersion
	h.Details["isoStorage"] = s.ISOStorage
	if storageErr != nil {
		reason := callReason(storageErr)
		if reason == ReasonAPIError && core.IsType(storageErr, activities.ErrPermanent) {
			// A storage PVE does not know, or does not have on this node: no retry helps.
			reason = ReasonStorageNotFound
		}
		return h.failed(reason, storageErr, s)
	}
	h.Details["isoStorageAvailGiB"] = strconv.FormatInt(st.Avail>>30, 10)
	if !slices.Contains(strings.Split(st.Content, ","), "iso") {
		h.Reason, h.Message = ReasonStorageNotFound, fmt.Sprintf("storage %s on node %s does not hold ISO images (content: %s)", s.ISOStorage, target.Node, st.Content)
		return h
	}
	if resourcesErr != nil {
		return h.failed(callReason(resourcesErr), resourcesErr, s)
	}
	var missing []string
	for _, t := range target.Templates {
		if !hasTemplate(resources, t, target.Node) {
			where := ""
			if t.OnNode {
				where = " on node " + target.Node
			}
			missing = append(missing, fmt.Sprintf("%s (VMID %d%s)", t.Image, t.VMID, where))
		}
	}
	h.Details["templates"] = fmt.Sprintf("%d/%d", len(target.Templates)-len(missing), len(target.Templates))
	if len(missing) > 0 {
		h.Reason, h.Message = ReasonTemplateNotFound, "no template "+strings.Join(missing, ", ")
		return h
	}
	if privilegesErr != nil {
		return h.failed(callReason(privilegesErr), privilegesErr, s)
	}
	if len(h.MissingPrivileges) > 0 {
		h.Reason, h.Message = ReasonMissingPrivilege, pve.MissingMessage(target.Node, h.MissingPrivileges)
		return h
	}
	h.Healthy = true
	return h
}

// failed is h unhealthy for reason, with the message of the call's failure err.
func (h NodeHealth) failed(reason string, err error, s core.Settings) NodeHealth {
	h.Reason = reason
	var appErr *temporal.ApplicationError
	switch {
	case errors.As(err, &appErr):
		h.Message = appErr.Message()
	case temporal.IsTimeoutError(err):
		h.Message = fmt.Sprintf("no answer within %s", s.Budgets.Request)
	default:
		h.Message = err.Error()
	}
	return h
}

// callReason is the reason a failed call gives a node.
func callReason(err error) string {
	if temporal.IsTimeoutError(err) {
		return ReasonTimeout
	}
	fault, _ := activities.FaultOf(err)
	switch {
	case fault.Timeout:
		return ReasonTimeout
	case fault.HTTPStatus == 401:
		return ReasonUnauthorized
	case fault.HTTPStatus == 403:
		return ReasonForbidden
	case fault.HTTPStatus != 0:
		return ReasonAPIError
	}
	return ReasonUnreachable
}

// hasTemplate reports whether resources list template t as a template, on node when it is the
// node's own.
func hasTemplate(resources []pve.VMResource, t templateRef, node string) bool {
	return slices.ContainsFunc(resources, func(r pve.VMResource) bool {
		return r.Type == "qemu" && r.VMID == t.VMID && r.Template && (!t.OnNode || r.Node == node)
	})
}
