// Package config is pveflow's configuration file: where the Proxmox cluster is and how to reach
// it, the catalogue of templates and machine types a proxy is placed with, how many clones may
// run at once, and how long each wait of a workflow may take. docs/config.md is the reference for
// every field.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole configuration file.
type Config struct {
	Proxmox Proxmox `yaml:"proxmox" json:"proxmox"`
	Clones  Clones  `yaml:"clones" json:"clones"`
	Budgets Budgets `yaml:"budgets" json:"budgets"`
	Poll    Poll    `yaml:"poll" json:"poll"`
	Entity  Entity  `yaml:"entity" json:"entity"`
}

// Proxmox says how to reach the cluster and what a proxy VM is made from.
type Proxmox struct {
	// URL is the base address of the API, such as https://pve.example.com:8006.
	URL string `yaml:"url" json:"url"`
	// TokenFile holds the API token as "user@realm!tokenid=secret". It is read on every request,
	// so a rotated token takes effect without a restart.
	TokenFile string `yaml:"tokenFile" json:"tokenFile"`
	// CAFile is a PEM bundle that verifies the API's certificate instead of the system roots.
	CAFile                string `yaml:"caFile" json:"caFile,omitempty"`
	InsecureSkipTLSVerify bool   `yaml:"insecureSkipTLSVerify" json:"insecureSkipTLSVerify,omitempty"`
	// Nodes are the nodes a proxy may be placed on; a placement's zone names one of them.
	Nodes []string `yaml:"nodes" json:"nodes"`
	// ISOStorage is the storage that receives the seed ISOs; it must allow content "iso".
	ISOStorage string `yaml:"isoStorage" json:"isoStorage"`
	// Storage is the target of the full clone; empty keeps the template's storage.
	Storage string `yaml:"storage" json:"storage,omitempty"`
	// Bridge replaces the bridge of the clone's net0; empty keeps the template's.
	Bridge string `yaml:"bridge" json:"bridge,omitempty"`
	// Nameservers are the DNS resolvers written into the seed's network-config (on net0)
	// whenever one is written: a proxy with a static IPv4 has no DHCP to learn them from.
	Nameservers []string `yaml:"nameservers,omitempty" json:"nameservers,omitempty"`
	// Pool is the resource pool the clone joins (the clone call's pool); empty joins none.
	Pool string `yaml:"pool" json:"pool,omitempty"`
	// Tags are extra tags for a proxy's VM, written together with the template's tags and
	// pveflow's own.
	Tags      []string  `yaml:"tags" json:"tags,omitempty"`
	VMIDRange VMIDRange `yaml:"vmidRange" json:"vmidRange"`
	// Templates maps an image name (a placement's image) to the template it is cloned from.
	Templates map[string]Template `yaml:"templates" json:"templates"`
	// MachineTypes maps a machine type name (a placement's machine type) to its size.
	MachineTypes map[string]MachineType `yaml:"machineTypes" json:"machineTypes"`
	// RequestTimeoutSeconds bounds one HTTP request of the API client; 0 means the client's
	// default, 30. The caller's deadline (budgets.request inside an activity) bounds it too.
	RequestTimeoutSeconds int `yaml:"requestTimeoutSeconds" json:"requestTimeoutSeconds"`
	// VendorData is cloud-init vendor-data (a YAML mapping) merged into what pveflow writes.
	VendorData string `yaml:"vendorData" json:"vendorData,omitempty"`
	// InstallGuestAgent makes the vendor-data install and start qemu-guest-agent, which
	// pveflow needs to learn the proxy's address. Turn it off only for images that have it.
	InstallGuestAgent bool `yaml:"installGuestAgent" json:"installGuestAgent"`
	// AddressPools maps a pool name (a create's address pool) to the static addresses it gives.
	AddressPools map[string]AddressPool `yaml:"addressPools,omitempty" json:"addressPools,omitempty"`
	// Calls caps the API requests pveflow sends to the cluster.
	Calls Calls `yaml:"calls" json:"calls"`
	// OnBoot is the VM's onboot option, written by a create: whether PVE starts the proxy when
	// its node boots. A template's own value would otherwise be inherited by the clone.
	OnBoot bool `yaml:"onboot" json:"onboot"`
	// HA registers each proxy's VM as a resource of PVE's HA manager.
	HA HA `yaml:"ha" json:"ha,omitzero"`
}

// HA is how proxies join PVE's HA manager: a create registers the VM as HA resource
// vm:<vmid> once it is ready, and a delete removes it before it stops the VM.
type HA struct {
	Enabled bool `yaml:"enabled" json:"enabled,omitempty"`
	// State is the resource's requested state: started (the default), in which the HA manager
	// keeps the proxy running, or ignored, in which it leaves the proxy alone. Stopped and
	// disabled are refused: the HA manager would stop each proxy and keep it stopped.
	State string `yaml:"state" json:"state,omitempty"`
}

// Calls caps the API requests that every worker of a task queue sends to its cluster together
// (see docs/proxmox.md, "The call cap"): each worker sends its share. Zero turns a cap off.
type Calls struct {
	// PerSecond is the rate of requests: token buckets that hold a second's worth together,
	// whose tokens come at most ceil(PerSecond) + PerSecond*T in any T seconds.
	PerSecond float64 `yaml:"perSecond" json:"perSecond"`
	// Concurrency is how many requests the workers have in flight at once.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
}

// VMIDRange is the inclusive range pveflow allocates VMIDs from. PVE shares VMIDs with people and
// other tools, so the range should be one they do not use.
type VMIDRange struct {
	Min int `yaml:"min" json:"min"`
	Max int `yaml:"max" json:"max"`
}

// Template is a prepared VM template that proxies are cloned from: either one template for the
// whole cluster (VMID) or one per node (Nodes), never both. On says which a node clones from.
type Template struct {
	// VMID is the one template of the cluster. A proxy on another node than the template's is
	// cloned across nodes, which PVE allows only from shared storage.
	VMID int `yaml:"vmid,omitempty" json:"vmid"`
	// Nodes maps a node to its own template, for clusters whose storage is local to each node.
	// Only these nodes can take a proxy of this image.
	Nodes map[string]int `yaml:"nodes,omitempty" json:"nodes,omitempty"`
}

// MachineType is the size of a proxy VM.
type MachineType struct {
	Cores     int   `yaml:"cores" json:"cores"`
	MemoryMiB int64 `yaml:"memoryMiB" json:"memoryMiB"`
	// DiskGiB grows the boot disk to this size; 0 keeps the template's. Disks never shrink.
	DiskGiB int64 `yaml:"diskGiB" json:"diskGiB,omitempty"`
	// NICs are the VM's network devices, net0 first (see NIC), and all of them: a create or
	// change removes the VM's others. Empty is the template's net0 alone, on proxmox.bridge.
	NICs []NIC `yaml:"nics,omitempty" json:"nics,omitempty"`
	// Readiness is what a create, heal or change waits for before it answers the proxy ready:
	// ReadinessAddress (empty) is the guest agent reporting net0's addresses, ReadinessCloudInit
	// that and cloud-init having finished (read through the agent, which needs
	// VM.GuestAgent.FileRead).
	Readiness string `yaml:"readiness,omitempty" json:"readiness,omitempty"`
}

// The values of MachineType.Readiness.
const (
	// ReadinessAddress: ready once the guest agent reports net0's addresses. The default.
	ReadinessAddress = "address"
	// ReadinessCloudInit: ready once, besides, cloud-init has finished all its stages without
	// errors (/run/cloud-init/result.json).
	ReadinessCloudInit = "cloud-init"
)

// WaitsForCloudInit reports whether a proxy of this machine type is ready only once cloud-init
// has finished.
func (m MachineType) WaitsForCloudInit() bool { return m.Readiness == ReadinessCloudInit }

// Entity is how a proxy's entity workflow (Proxy) looks after its proxy between requests.
type Entity struct {
	// CheckInterval is how often a present proxy's VM is checked, and healed: a VM found stopped
	// is started again, one found gone is created again. 0 turns the checks off.
	CheckInterval time.Duration `yaml:"checkInterval" json:"checkInterval"`
	// CheckJitter is the most a check is moved later at random, so a fleet's checks spread out.
	CheckJitter time.Duration `yaml:"checkJitter" json:"checkJitter"`
	// BackstopInterval is how often an entity whose VM the cluster's observer watches checks it
	// all the same (on average; each backstop falls between half and one and a half of it), so
	// an observer that stopped cannot leave it unwatched for longer. 0 makes every entity check
	// itself every CheckInterval, with no observer.
	BackstopInterval time.Duration `yaml:"backstopInterval" json:"backstopInterval"`
	// FixDrift makes a check that finds the VM's cores, memory, disk or NICs off the machine type
	// put them back (a ChangeProxy); otherwise drift is only reported in the proxy's status.
	FixDrift bool `yaml:"fixDrift" json:"fixDrift"`
	// CloseAfter is how long the entity of an absent proxy waits for a request before it
	// closes.
	CloseAfter time.Duration `yaml:"closeAfter" json:"closeAfter"`
	// HistoryEvents is the history length at which the entity continues as new, carrying its
	// state, once no request is in flight; Temporal's own suggestion also makes it.
	HistoryEvents int `yaml:"historyEvents" json:"historyEvents"`
}

// Clones is how clones are admitted to Proxmox.
type Clones struct {
	// PerStorage is how many clones may run at once onto one target storage, across all
	// workers; 0 admits every clone at once.
	PerStorage int `yaml:"perStorage" json:"perStorage"`
	// HistoryEvents is the history length at which a storage's admission continues as new,
	// carrying its leases and queue; Temporal's own suggestion also makes it.
	HistoryEvents int `yaml:"historyEvents" json:"historyEvents"`
}

// Budgets are how long each wait may take in all, retries included (an activity's
// ScheduleToClose), and how long one attempt of one call may take (StartToClose).
type Budgets struct {
	Clone   time.Duration `yaml:"clone" json:"clone"`
	Upload  time.Duration `yaml:"upload" json:"upload"`
	Resize  time.Duration `yaml:"resize" json:"resize"`
	Start   time.Duration `yaml:"start" json:"start"`
	Stop    time.Duration `yaml:"stop" json:"stop"`
	Destroy time.Duration `yaml:"destroy" json:"destroy"`
	// Running is the wait for a started VM to report status running.
	Running time.Duration `yaml:"running" json:"running"`
	// Agent is the wait for the guest agent to report a routable IPv4 address.
	Agent time.Duration `yaml:"agent" json:"agent"`
	// CloudInit is the wait, after Agent's, for cloud-init to finish, for the machine types
	// whose readiness is cloud-init.
	CloudInit time.Duration `yaml:"cloudInit" json:"cloudInit,omitempty"`
	// Unlock is the wait for a lock left by another operation (a clone, a backup) to go.
	Unlock time.Duration `yaml:"unlock" json:"unlock"`
	// Request bounds one attempt of one call.
	Request time.Duration `yaml:"request" json:"request"`
}

// Poll spaces the attempts of a wait: brisk while it is young, backing off to a cap, so that
// a long clone costs few polls and a quick start is seen quickly. A wait's looks are spaced by
// NextLook; calls PVE refuses for now (a lock, backend trouble) are retried as Temporal's retry
// policy with these fields spaces them.
type Poll struct {
	InitialInterval    time.Duration `yaml:"initialInterval" json:"initialInterval"`
	BackoffCoefficient float64       `yaml:"backoffCoefficient" json:"backoffCoefficient"`
	MaximumInterval    time.Duration `yaml:"maximumInterval" json:"maximumInterval"`
}

// NextLook is how long a wait that has waited so long waits before its next look: the part
// BackoffCoefficient-1 of the time waited (a fifth by default), no less than InitialInterval and
// no more than MaximumInterval. Past its first seconds each look then comes BackoffCoefficient
// times as long after the wait began as the one before, so what the wait waits for is seen within
// that part of the time it took, or InitialInterval, whichever is more (until MaximumInterval
// caps the interval). A backoff by the attempt's number alone, as a retry policy's, looks
// InitialInterval later than that at every step.
func (p Poll) NextLook(waited time.Duration) time.Duration {
	return min(max(time.Duration(math.Round((p.BackoffCoefficient-1)*float64(waited))), p.InitialInterval), p.MaximumInterval)
}

// LooksWithin is the most looks a wait makes within budget, its first at once: each comes no
// sooner after the one before than NextLook puts it or, for a look that met backend trouble,
// than Temporal's retry policy with these fields puts the next attempt
// (InitialInterval·BackoffCoefficient^(n-1), up to MaximumInterval), whichever is sooner. With
// the defaults, about 74 in 10 minutes. Looks gathered around an expected end
// (NextLookExpecting) come on top, ExpectedLooks at most. It is counted by the server's clock:
// a worker whose clock runs behind it paces its looks a little closer.
func (p Poll) LooksWithin(budget time.Duration) int {
	looks, at, retry := 1, time.Duration(0), p.InitialInterval
	for looks < maxLooks {
		at += max(min(p.NextLook(at), retry), time.Nanosecond)
		if at > budget {
			break
		}
		looks++
		retry = min(time.Duration(float64(retry)*p.BackoffCoefficient), p.MaximumInterval)
	}
	return looks
}

// maxLooks bounds LooksWithin for a budget that is long for its intervals.
const maxLooks = 1 << 20

// NextLookExpecting is NextLook for a wait whose end is expected after about expected (a clone,
// from the storage's last clones; any other task, from the worker's last ones of its kind): it
// looks at nine tenths of it, then every fortieth of it (every ExpectedLookStep at least) up to
// six fifths of it, and at NextLook's pace before and after, whichever look comes first. A wait
// that ends as expected is then seen within a fortieth of its time, where NextLook alone sees it
// within BackoffCoefficient-1 of it: a clone's slot, which creates queue for, stands free that
// much shorter. An expectation that is wrong costs at most ExpectedLooks looks more, never a
// later one. Zero expects nothing: NextLook.
func (p Poll) NextLookExpecting(waited, expected time.Duration) time.Duration {
	next := p.NextLook(waited)
	from := expected * 9 / 10
	switch {
	case PastExpectedEnd(waited, expected):
		return next
	case waited < from:
		return min(next, from-waited)
	}
	return min(next, max(expected/40, ExpectedLookStep))
}

// PastExpectedEnd reports whether a wait that has waited so long is past where
// NextLookExpecting gathers its looks around expected, six fifths of it, or expects nothing.
func PastExpectedEnd(waited, expected time.Duration) bool {
	return expected <= 0 || waited >= expected*6/5
}

// ExpectedLookStep is the shortest step of NextLookExpecting's looks near the expected end, and
// ExpectedLooks the most looks they add to a wait: one at nine tenths, and twelve at most from
// there to six fifths in fortieths. With steps of a twentieth and 100 ms at least, a 1 s clone's
// end was seen 50 ms late on average, most of a clone slot's turn in a fleet
// (docs/performance.md, What the turn of a clone slot costs).
const (
	ExpectedLookStep = 25 * time.Millisecond
	ExpectedLooks    = 13
)

// Default is the configuration with every default set. It is not valid by itself: the
// cluster's address, token, nodes, templates and machine types have no defaults.
func Default() Config {
	return Config{
		Proxmox: Proxmox{
			ISOStorage:            "local",
			VMIDRange:             VMIDRange{Min: 100000, Max: 199999},
			RequestTimeoutSeconds: 30,
			InstallGuestAgent:     true,
			// pveproxy and pvedaemon each run 3 worker processes by default (pve-manager
			// PVE/Service/pveproxy.pm and pvedaemon.pm, max_workers => 3): pveflow keeps no
			// more requests in flight than one of them can work on. The rate lets a fleet's
			// creates go at the pace of their clone slots (docs/proxmox.md, The call cap).
			Calls:  Calls{PerSecond: 50, Concurrency: 3},
			OnBoot: true,
			HA:     HA{State: "started"},
		},
		Clones: Clones{PerStorage: 4, HistoryEvents: 10000},
		Budgets: Budgets{
			Clone:   10 * time.Minute,
			Upload:  2 * time.Minute,
			Resize:  2 * time.Minute,
			Start:   2 * time.Minute,
			Stop:    2 * time.Minute,
			Destroy: 5 * time.Minute,
			Running: 60 * time.Second,
			Agent:   5 * time.Minute,
			// cloud-init's final stage runs the user's runcmd and package installs, which
			// take minutes on a slow mirror; ten leaves room for that without waiting
			// forever for a guest that never finishes.
			CloudInit: 10 * time.Minute,
			Unlock:    10 * time.Minute,
			Request:   30 * time.Second,
		},
		Entity: Entity{
			CheckInterval:    5 * time.Minute,
			CheckJitter:      time.Minute,
			BackstopInterval: 48 * time.Hour,
			CloseAfter:       time.Hour,
			HistoryEvents:    2000,
		},
		Poll: Poll{
			InitialInterval:    time.Second,
			BackoffCoefficient: 1.2,
			MaximumInterval:    10 * time.Second,
		},
	}
}

// Load reads and parses the configuration file at path.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes a YAML configuration over the defaults and validates the result. Unknown keys
// are errors, so a misspelt key is reported instead of silently leaving its default in place.
func Parse(data []byte) (Config, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return Config{}, fmt.Errorf("yaml: line %d: a second document, but a config file holds one", extra.Line)
	case !errors.Is(err, io.EOF):
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
