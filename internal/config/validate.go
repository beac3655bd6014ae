package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// PVE's own formats (pve-common JSONSchema.pm), so that a name PVE would refuse is refused here,
// before any workflow starts.
var (
	nodeNameRE  = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$`)
	storageIDRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.-]*[a-zA-Z0-9]$`)
	// bridgeRE is a Linux interface name (at most 15 bytes) as PVE's bridges and SDN vnets use.
	bridgeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.-]{0,14}$`)
	// poolIDRE is pve-poolid (pve-access-control AccessControl.pm verify_poolname): a name, or
	// up to three of them joined by "/" for a nested pool.
	poolIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+){0,2}$`)
	// tagRE is pve-tag (pve-common JSONSchema.pm $PVE_TAG_RE, matched case-insensitively).
	tagRE = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_+.-]*$`)
)

// The VMIDs PVE accepts.
const (
	minVMID = 100
	maxVMID = 999999999
)

// problems collects everything wrong with a config, so that one run reports all of it.
type problems []error

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// Validate reports every problem of c, each naming the field and the bad value.
func (c Config) Validate() error {
	var p problems
	c.Proxmox.validate(&p)
	c.Clones.validate(&p)
	c.Budgets.validate(&p)
	c.Entity.validate(&p)
	c.Poll.validate(&p)
	return errors.Join(p...)
}

func (c Proxmox) validate(p *problems) {
	validateURL(p, c.URL)
	if c.TokenFile == "" {
		p.add("proxmox.tokenFile", "must be set")
	}
	if c.CAFile != "" && c.InsecureSkipTLSVerify {
		p.add("proxmox.caFile", "is set together with proxmox.insecureSkipTLSVerify; choose one")
	}
	validateNodes(p, c.Nodes)
	if !storageIDRE.MatchString(c.ISOStorage) {
		p.add("proxmox.isoStorage", "%q is not a valid storage id", c.ISOStorage)
	}
	if c.Storage != "" && !storageIDRE.MatchString(c.Storage) {
		p.add("proxmox.storage", "%q is not a valid storage id", c.Storage)
	}
	if c.Bridge != "" && !bridgeRE.MatchString(c.Bridge) {
		p.add("proxmox.bridge", "%q is not a valid bridge name", c.Bridge)
	}
	if c.Pool != "" {
		validatePool(p, c.Pool)
	}
	validateNameservers(p, c.Nameservers)
	validateTags(p, c.Tags)
	c.VMIDRange.validate(p)
	validateTemplates(p, c.Templates, c.Nodes)
	validateMachineTypes(p, c.MachineTypes)
	validateAddressPools(p, c.AddressPools)
	if c.RequestTimeoutSeconds < 0 {
		p.add("proxmox.requestTimeoutSeconds", "%d is negative", c.RequestTimeoutSeconds)
	}
	if c.VendorData != "" {
		if err := validateVendorData(c.VendorData); err != nil {
			p.add("proxmox.vendorData", "%v", err)
		}
	}
	c.HA.validate(p)
	c.Calls.validate(p)
}

// validate takes PVE's enum for an HA resource's state, but for enabled, its alias of started,
// and refuses the states in which the HA manager keeps the VM stopped: PVE's CRM adds such a
// resource as request_stop (pve-ha-manager Manager.pm), so each proxy would be stopped right
// after its create answered it ready, and kept stopped.
func (h HA) validate(p *problems) {
	switch h.State {
	case "started", "ignored":
	case "stopped", "disabled":
		p.add("proxmox.ha.state", "%q would have PVE's HA manager stop each proxy as soon as a create registers it, and keep it stopped; "+
			"use started (the HA manager keeps the proxy running), or ignored (registered, but left alone)", h.State)
	default:
		p.add("proxmox.ha.state", "%q is not one of started, ignored (stopped and disabled would keep proxies stopped)", h.State)
	}
}

func (c Calls) validate(p *problems) {
	if c.PerSecond < 0 || math.IsInf(c.PerSecond, 0) || math.IsNaN(c.PerSecond) {
		p.add("proxmox.calls.perSecond", "%v is not a finite number >= 0 (0: no limit)", c.PerSecond)
	}
	if c.Concurrency < 0 {
		p.add("proxmox.calls.concurrency", "%d is negative (0: no limit)", c.Concurrency)
	}
}

func validateURL(p *problems, raw string) {
	const path = "proxmox.url"
	if raw == "" {
		p.add(path, "must be set")
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		p.add(path, "%q is not a URL", raw)
	case u.Scheme != "http" && u.Scheme != "https":
		p.add(path, "%q must use http or https", raw)
	case u.Host == "":
		p.add(path, "%q has no host", raw)
	}
}

func validateNodes(p *problems, nodes []string) {
	if len(nodes) == 0 {
		p.add("proxmox.nodes", "at least one node is needed")
	}
	validateNames(p, "proxmox.nodes", nodes, nodeNameRE, "node name")
}

// validateNames checks a list of names: each of the form re matches, none listed twice.
func validateNames(p *problems, field string, names []string, re *regexp.Regexp, what string) {
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		path := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case !re.MatchString(n):
			p.add(path, "%q is not a valid %s", n, what)
		case seen[n]:
			p.add(path, "%q is listed twice", n)
		}
		seen[n] = true
	}
}

func validatePool(p *problems, pool string) {
	if poolIDRE.MatchString(pool) {
		return
	}
	levels := strings.Split(pool, "/")
	if len(levels) > 3 && !slices.ContainsFunc(levels, func(l string) bool { return !poolIDRE.MatchString(l) }) {
		p.add("proxmox.pool", "%q is nested %d levels deep, and PVE allows 3", pool, len(levels))
		return
	}
	p.add("proxmox.pool", "%q is not a valid pool id", pool)
}

func validateTags(p *problems, tags []string) {
	validateNames(p, "proxmox.tags", tags, tagRE, "tag")
}

func (r VMIDRange) validate(p *problems) {
	if r.Min < minVMID {
		p.add("proxmox.vmidRange.min", "%d is below %d", r.Min, minVMID)
	}
	if r.Max > maxVMID {
		p.add("proxmox.vmidRange.max", "%d is above %d", r.Max, maxVMID)
	}
	if r.Min >= r.Max {
		p.add("proxmox.vmidRange", "min %d is not below max %d", r.Min, r.Max)
	}
}

func validateTemplates(p *problems, templates map[string]Template, nodes []string) {
	if len(templates) == 0 {
		p.add("proxmox.templates", "at least one template is needed")
	}
	for _, name := range slices.Sorted(maps.Keys(templates)) {
		if name == "" {
			p.add("proxmox.templates", "a template has an empty name")
			continue
		}
		path, t := "proxmox.templates."+name, templates[name]
		switch {
		case t.VMID != 0 && t.Nodes != nil:
			p.add(path, "sets both vmid and nodes; choose one")
		case t.Nodes != nil:
			validateTemplateNodes(p, path+".nodes", t.Nodes, nodes)
		case t.VMID == 0:
			p.add(path, "sets neither vmid (one template for the cluster) nor nodes (one per node)")
		default:
			validateVMID(p, path+".vmid", t.VMID)
		}
	}
}

// validateTemplateNodes checks a template per node: each on a configured node, and no VMID
// twice, as a VMID names one VM in the whole cluster.
func validateTemplateNodes(p *problems, path string, perNode map[string]int, nodes []string) {
	if len(perNode) == 0 {
		p.add(path, "is empty; name at least one node's template")
	}
	nodeOf := make(map[int]string, len(perNode))
	for _, node := range slices.Sorted(maps.Keys(perNode)) {
		vmid := perNode[node]
		if !slices.Contains(nodes, node) {
			p.add(path+"."+node, "%q is not a node of proxmox.nodes (choices: %s)", node, choices(nodes))
		}
		validateVMID(p, path+"."+node, vmid)
		if other, ok := nodeOf[vmid]; ok {
			p.add(path+"."+node, "%d is %s's template too, but a VMID names one VM in the cluster", vmid, other)
		}
		nodeOf[vmid] = node
	}
}

func validateVMID(p *problems, path string, vmid int) {
	if vmid < minVMID || vmid > maxVMID {
		p.add(path, "%d is outside %d..%d", vmid, minVMID, maxVMID)
	}
}

func validateMachineTypes(p *problems, types map[string]MachineType) {
	if len(types) == 0 {
		p.add("proxmox.machineTypes", "at least one machine type is needed")
	}
	for _, name := range slices.Sorted(maps.Keys(types)) {
		if name == "" {
			p.add("proxmox.machineTypes", "a machine type has an empty name")
			continue
		}
		path, mt := "proxmox.machineTypes."+name, types[name]
		if mt.Cores <= 0 {
			p.add(path+".cores", "%d is not positive", mt.Cores)
		}
		if mt.MemoryMiB <= 0 {
			p.add(path+".memoryMiB", "%d is not positive", mt.MemoryMiB)
		}
		if mt.DiskGiB < 0 {
			p.add(path+".diskGiB", "%d is negative", mt.DiskGiB)
		}
		validateNICs(p, path+".nics", mt.NICs)
		switch mt.Readiness {
		case "", ReadinessAddress, ReadinessCloudInit:
		default:
			p.add(path+".readiness", "%q is not one of %s (the default), %s", mt.Readiness, ReadinessAddress, ReadinessCloudInit)
		}
	}
}

// validateVendorData checks that vendor-data can be merged: a YAML mapping, or an empty document
// such as a lone "#cloud-config" line. Its errors never quote the text, which may hold secrets.
func validateVendorData(s string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
		return fmt.Errorf("is not valid YAML: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	switch root := doc.Content[0]; root.Kind {
	case yaml.SequenceNode:
		return fmt.Errorf("line %d: is a YAML sequence, not a mapping", root.Line)
	case yaml.ScalarNode:
		return fmt.Errorf("line %d: is a YAML scalar, not a mapping", root.Line)
	}
	// Decoding catches what the node tree keeps, such as a key given twice.
	var m map[string]any
	if err := doc.Decode(&m); err != nil {
		return fmt.Errorf("is not valid YAML: %w", err)
	}
	return nil
}

func (c Clones) validate(p *problems) {
	if c.PerStorage < 0 {
		p.add("clones.perStorage", "%d is negative", c.PerStorage)
	}
	if c.HistoryEvents < 100 {
		p.add("clones.historyEvents", "%d is below 100: the admission would continue as new at almost every grant", c.HistoryEvents)
	}
}

func (e Entity) validate(p *problems) {
	if e.CheckInterval < 0 {
		p.add("entity.checkInterval", "%v is negative", e.CheckInterval)
	}
	if e.CheckJitter < 0 {
		p.add("entity.checkJitter", "%v is negative", e.CheckJitter)
	}
	if e.BackstopInterval < 0 {
		p.add("entity.backstopInterval", "%v is negative", e.BackstopInterval)
	} else if e.BackstopInterval > 0 && e.BackstopInterval < 2*e.CheckInterval {
		p.add("entity.backstopInterval", "%v is less than twice checkInterval (%v): the backstops would cost more than the observer saves; 0 turns the observer off", e.BackstopInterval, e.CheckInterval)
	}
	if e.CloseAfter <= 0 {
		p.add("entity.closeAfter", "%v is not positive", e.CloseAfter)
	}
	if e.HistoryEvents < 100 {
		p.add("entity.historyEvents", "%d is below 100: the entity would continue as new at almost every request", e.HistoryEvents)
	}
}

func (b Budgets) validate(p *problems) {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"clone", b.Clone},
		{"upload", b.Upload},
		{"resize", b.Resize},
		{"start", b.Start},
		{"stop", b.Stop},
		{"destroy", b.Destroy},
		{"running", b.Running},
		{"agent", b.Agent},
		{"cloudInit", b.CloudInit},
		{"unlock", b.Unlock},
		{"request", b.Request},
	} {
		if f.d <= 0 {
			p.add("budgets."+f.name, "%v is not positive", f.d)
		}
	}
}

func (c Poll) validate(p *problems) {
	if c.InitialInterval <= 0 {
		p.add("poll.initialInterval", "%v is not positive", c.InitialInterval)
	}
	if c.BackoffCoefficient < 1 {
		p.add("poll.backoffCoefficient", "%v is below 1", c.BackoffCoefficient)
	}
	if c.MaximumInterval < c.InitialInterval {
		p.add("poll.maximumInterval", "%v is below poll.initialInterval (%v)", c.MaximumInterval, c.InitialInterval)
	}
}
