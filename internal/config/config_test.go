package config

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// full is a valid config that sets every field, none of them to its default.
func full() Config {
	return Config{
		Proxmox: Proxmox{
			URL:                   "https://pve.example.com:8006",
			TokenFile:             "/etc/pveflow/pve-token",
			CAFile:                "/etc/pveflow/pve-ca.pem",
			Nodes:                 []string{"pve1", "pve-2"},
			ISOStorage:            "iso-store",
			Storage:               "local-lvm",
			Bridge:                "vmbr1",
			Pool:                  "proxies/pveflow",
			Tags:                  []string{"proxy", "team-a"},
			VMIDRange:             VMIDRange{Min: 200000, Max: 299999},
			Templates:             map[string]Template{"debian13": {VMID: 9000}, "alpine": {Nodes: map[string]int{"pve1": 9001, "pve-2": 9002}}},
			MachineTypes:          map[string]MachineType{"small": {Cores: 2, MemoryMiB: 2048, DiskGiB: 20, Readiness: ReadinessCloudInit}},
			RequestTimeoutSeconds: 45,
			VendorData:            "#cloud-config\ntimezone: Etc/UTC\n",
			InstallGuestAgent:     false,
			Calls:                 Calls{PerSecond: 5.5, Concurrency: 2},
			OnBoot:                false,
			HA:                    HA{Enabled: true, State: "ignored"},
		},
		Clones: Clones{PerStorage: 2, HistoryEvents: 20000},
		Budgets: Budgets{
			Clone: 11 * time.Minute, Upload: 3 * time.Minute, Resize: 3 * time.Minute, Start: 4 * time.Minute,
			Stop: 5 * time.Minute, Destroy: 6 * time.Minute, Running: 70 * time.Second,
			Agent: 8 * time.Minute, CloudInit: 12 * time.Minute, Unlock: 9 * time.Minute, Request: 40 * time.Second,
		},
		Poll:   Poll{InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumInterval: 20 * time.Second},
		Entity: Entity{CheckInterval: 7 * time.Minute, CheckJitter: 30 * time.Second, FixDrift: true, CloseAfter: 2 * time.Hour, HistoryEvents: 3000},
	}
}

// fullWith is the YAML of full() changed by change.
func fullWith(t *testing.T, change func(*Config)) string {
	t.Helper()
	c := full()
	change(&c)
	data, err := yaml.Marshal(c)
	require.NoError(t, err)
	return string(data)
}

const minimalYAML = `
proxmox:
  url: https://pve.example.com:8006
  tokenFile: /etc/pveflow/pve-token
  nodes: [pve1]
  templates: {debian13: {vmid: 9000}}
  machineTypes: {small: {cores: 2, memoryMiB: 2048}}
`

func TestParse_table(t *testing.T) {
	minimal := Default()
	minimal.Proxmox.URL = "https://pve.example.com:8006"
	minimal.Proxmox.TokenFile = "/etc/pveflow/pve-token"
	minimal.Proxmox.Nodes = []string{"pve1"}
	minimal.Proxmox.Templates = map[string]Template{"debian13": {VMID: 9000}}
	minimal.Proxmox.MachineTypes = map[string]MachineType{"small": {Cores: 2, MemoryMiB: 2048}}

	tests := []struct {
		name    string
		yaml    string
		want    Config
		wantErr string
	}{
		{name: "valid full", yaml: fullWith(t, func(*Config) {}), want: full()},
		{name: "valid minimal takes the defaults", yaml: minimalYAML, want: minimal},
		{
			name:    "missing url",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.URL = "" }),
			wantErr: "proxmox.url: must be set",
		},
		{
			name:    "url not parseable",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.URL = "https://[::1" }),
			wantErr: `proxmox.url: "https://[::1" is not a URL`,
		},
		{
			name:    "url with another scheme",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.URL = "ftp://pve.example.com" }),
			wantErr: `proxmox.url: "ftp://pve.example.com" must use http or https`,
		},
		{
			name:    "url without host",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.URL = "https:///api2/json" }),
			wantErr: `proxmox.url: "https:///api2/json" has no host`,
		},
		{
			name:    "missing tokenFile",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.TokenFile = "" }),
			wantErr: "proxmox.tokenFile: must be set",
		},
		{
			name:    "caFile and insecureSkipTLSVerify together",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.InsecureSkipTLSVerify = true }),
			wantErr: "proxmox.caFile: is set together with proxmox.insecureSkipTLSVerify",
		},
		{
			name:    "no nodes",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Nodes = nil }),
			wantErr: "proxmox.nodes: at least one node is needed",
		},
		{
			name:    "node listed twice",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Nodes = []string{"pve1", "pve1"} }),
			wantErr: `proxmox.nodes[1]: "pve1" is listed twice`,
		},
		{
			name:    "node with a slash",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Nodes = []string{"pve1", "pve/2"} }),
			wantErr: `proxmox.nodes[1]: "pve/2" is not a valid node name`,
		},
		{
			name:    "node ending in a hyphen",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Nodes = []string{"pve-"} }),
			wantErr: `proxmox.nodes[0]: "pve-" is not a valid node name`,
		},
		{
			name:    "isoStorage starting with a digit",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.ISOStorage = "1local" }),
			wantErr: `proxmox.isoStorage: "1local" is not a valid storage id`,
		},
		{
			name:    "isoStorage empty",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.ISOStorage = "" }),
			wantErr: `proxmox.isoStorage: "" is not a valid storage id`,
		},
		{
			name:    "storage of one character",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Storage = "a" }),
			wantErr: `proxmox.storage: "a" is not a valid storage id`,
		},
		{
			name:    "bridge with a space",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Bridge = "vmbr 0" }),
			wantErr: `proxmox.bridge: "vmbr 0" is not a valid bridge name`,
		},
		{
			name:    "bridge longer than an interface name",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Bridge = "vmbr0123456789ab" }),
			wantErr: `proxmox.bridge: "vmbr0123456789ab" is not a valid bridge name`,
		},
		{
			name:    "vmidRange min below 100",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.VMIDRange.Min = 50 }),
			wantErr: "proxmox.vmidRange.min: 50 is below 100",
		},
		{
			name:    "vmidRange max above 999999999",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.VMIDRange.Max = 1000000000 }),
			wantErr: "proxmox.vmidRange.max: 1000000000 is above 999999999",
		},
		{
			name:    "vmidRange min not below max",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.VMIDRange = VMIDRange{Min: 300000, Max: 300000} }),
			wantErr: "proxmox.vmidRange: min 300000 is not below max 300000",
		},
		{
			name:    "no templates",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Templates = nil }),
			wantErr: "proxmox.templates: at least one template is needed",
		},
		{
			name:    "template vmid below 100",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Templates["old"] = Template{VMID: 99} }),
			wantErr: "proxmox.templates.old.vmid: 99 is outside 100..999999999",
		},
		{
			name:    "template with an empty name",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Templates[""] = Template{VMID: 9001} }),
			wantErr: "proxmox.templates: a template has an empty name",
		},
		{
			name: "template with both vmid and nodes",
			yaml: fullWith(t, func(c *Config) {
				c.Proxmox.Templates["old"] = Template{VMID: 9010, Nodes: map[string]int{"pve1": 9011}}
			}),
			wantErr: "proxmox.templates.old: sets both vmid and nodes; choose one",
		},
		{
			name:    "template with neither vmid nor nodes",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Templates["old"] = Template{} }),
			wantErr: "proxmox.templates.old: sets neither vmid (one template for the cluster) nor nodes (one per node)",
		},
		{
			name:    "template nodes empty",
			yaml:    strings.Replace(minimalYAML, "{vmid: 9000}", "{nodes: {}}", 1),
			wantErr: "proxmox.templates.debian13.nodes: is empty; name at least one node's template",
		},
		{
			name:    "template on a node that is not configured",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Templates["old"] = Template{Nodes: map[string]int{"pve9": 9010}} }),
			wantErr: `proxmox.templates.old.nodes.pve9: "pve9" is not a node of proxmox.nodes (choices: pve-2, pve1)`,
		},
		{
			name:    "template per node with vmid below 100",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Templates["old"] = Template{Nodes: map[string]int{"pve1": 99}} }),
			wantErr: "proxmox.templates.old.nodes.pve1: 99 is outside 100..999999999",
		},
		{
			name: "template per node with one vmid on two nodes",
			yaml: fullWith(t, func(c *Config) {
				c.Proxmox.Templates["old"] = Template{Nodes: map[string]int{"pve1": 9010, "pve-2": 9010}}
			}),
			wantErr: "proxmox.templates.old.nodes.pve1: 9010 is pve-2's template too, but a VMID names one VM in the cluster",
		},
		{
			name:    "pool with a space",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Pool = "my proxies" }),
			wantErr: `proxmox.pool: "my proxies" is not a valid pool id`,
		},
		{
			name:    "pool with an empty level",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Pool = "proxies//a" }),
			wantErr: `proxmox.pool: "proxies//a" is not a valid pool id`,
		},
		{
			name:    "pool nested four levels",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Pool = "a/b/c/d" }),
			wantErr: `proxmox.pool: "a/b/c/d" is nested 4 levels deep, and PVE allows 3`,
		},
		{
			name:    "empty tag",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Tags = []string{"proxy", ""} }),
			wantErr: `proxmox.tags[1]: "" is not a valid tag`,
		},
		{
			name:    "tag starting with a hyphen",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Tags = []string{"-proxy"} }),
			wantErr: `proxmox.tags[0]: "-proxy" is not a valid tag`,
		},
		{
			name:    "tag holding a list separator",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Tags = []string{"a;b"} }),
			wantErr: `proxmox.tags[0]: "a;b" is not a valid tag`,
		},
		{
			name:    "tag listed twice",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Tags = []string{"proxy", "proxy"} }),
			wantErr: `proxmox.tags[1]: "proxy" is listed twice`,
		},
		{
			name:    "negative clones perStorage",
			yaml:    fullWith(t, func(c *Config) { c.Clones.PerStorage = -1 }),
			wantErr: "clones.perStorage: -1 is negative",
		},
		{
			name:    "no machine types",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.MachineTypes = nil }),
			wantErr: "proxmox.machineTypes: at least one machine type is needed",
		},
		{
			name:    "machine type with an empty name",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.MachineTypes[""] = MachineType{Cores: 1, MemoryMiB: 512} }),
			wantErr: "proxmox.machineTypes: a machine type has an empty name",
		},
		{
			name:    "cores zero",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.MachineTypes["tiny"] = MachineType{MemoryMiB: 512} }),
			wantErr: "proxmox.machineTypes.tiny.cores: 0 is not positive",
		},
		{
			name:    "memoryMiB zero",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.MachineTypes["tiny"] = MachineType{Cores: 1} }),
			wantErr: "proxmox.machineTypes.tiny.memoryMiB: 0 is not positive",
		},
		{
			name:    "negative diskGiB",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.MachineTypes["tiny"] = MachineType{Cores: 1, MemoryMiB: 512, DiskGiB: -1} }),
			wantErr: "proxmox.machineTypes.tiny.diskGiB: -1 is negative",
		},
		{
			name: "unknown readiness",
			yaml: fullWith(t, func(c *Config) {
				c.Proxmox.MachineTypes["tiny"] = MachineType{Cores: 1, MemoryMiB: 512, Readiness: "cloudinit"}
			}),
			wantErr: `proxmox.machineTypes.tiny.readiness: "cloudinit" is not one of address (the default), cloud-init`,
		},
		{
			name:    "cloudInit budget zero",
			yaml:    fullWith(t, func(c *Config) { c.Budgets.CloudInit = 0 }),
			wantErr: "budgets.cloudInit: 0s is not positive",
		},
		{
			name:    "negative requestTimeoutSeconds",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.RequestTimeoutSeconds = -1 }),
			wantErr: "proxmox.requestTimeoutSeconds: -1 is negative",
		},
		{
			name:    "negative calls.perSecond",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Calls.PerSecond = -1 }),
			wantErr: "proxmox.calls.perSecond: -1 is not a finite number >= 0 (0: no limit)",
		},
		{
			name:    "infinite calls.perSecond",
			yaml:    minimalYAML + "  calls: {perSecond: .inf}\n",
			wantErr: "proxmox.calls.perSecond: +Inf is not a finite number >= 0 (0: no limit)",
		},
		{
			name:    "negative calls.concurrency",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.Calls.Concurrency = -1 }),
			wantErr: "proxmox.calls.concurrency: -1 is negative (0: no limit)",
		},
		{
			name:    "vendorData not YAML",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.VendorData = "a: [1\n" }),
			wantErr: "proxmox.vendorData: is not valid YAML",
		},
		{
			name:    "vendorData a sequence",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.VendorData = "#cloud-config\n- packages\n" }),
			wantErr: "proxmox.vendorData: line 2: is a YAML sequence, not a mapping",
		},
		{
			name:    "vendorData with a key given twice",
			yaml:    fullWith(t, func(c *Config) { c.Proxmox.VendorData = "a: 1\na: 2\n" }),
			wantErr: "proxmox.vendorData: is not valid YAML",
		},
		{
			name:    "clone budget zero",
			yaml:    fullWith(t, func(c *Config) { c.Budgets.Clone = 0 }),
			wantErr: "budgets.clone: 0s is not positive",
		},
		{
			name:    "agent budget negative",
			yaml:    fullWith(t, func(c *Config) { c.Budgets.Agent = -time.Second }),
			wantErr: "budgets.agent: -1s is not positive",
		},
		{
			name:    "request budget zero",
			yaml:    fullWith(t, func(c *Config) { c.Budgets.Request = 0 }),
			wantErr: "budgets.request: 0s is not positive",
		},
		{
			name:    "poll initialInterval zero",
			yaml:    fullWith(t, func(c *Config) { c.Poll.InitialInterval = 0 }),
			wantErr: "poll.initialInterval: 0s is not positive",
		},
		{
			name:    "poll backoffCoefficient below 1",
			yaml:    fullWith(t, func(c *Config) { c.Poll.BackoffCoefficient = 0.5 }),
			wantErr: "poll.backoffCoefficient: 0.5 is below 1",
		},
		{
			name:    "poll maximumInterval below initialInterval",
			yaml:    fullWith(t, func(c *Config) { c.Poll.MaximumInterval = time.Second }),
			wantErr: "poll.maximumInterval: 1s is below poll.initialInterval (2s)",
		},
		{
			name:    "entity checkInterval negative",
			yaml:    fullWith(t, func(c *Config) { c.Entity.CheckInterval = -time.Second }),
			wantErr: "entity.checkInterval: -1s is negative",
		},
		{
			name:    "entity backstopInterval negative",
			yaml:    fullWith(t, func(c *Config) { c.Entity.BackstopInterval = -time.Second }),
			wantErr: "entity.backstopInterval: -1s is negative",
		},
		{
			name:    "entity backstopInterval within two checkIntervals",
			yaml:    fullWith(t, func(c *Config) { c.Entity.BackstopInterval = 9 * time.Minute }),
			wantErr: "entity.backstopInterval: 9m0s is less than twice checkInterval (7m0s)",
		},
		{
			name:    "entity closeAfter zero",
			yaml:    fullWith(t, func(c *Config) { c.Entity.CloseAfter = 0 }),
			wantErr: "entity.closeAfter: 0s is not positive",
		},
		{
			name:    "entity historyEvents too small",
			yaml:    fullWith(t, func(c *Config) { c.Entity.HistoryEvents = 10 }),
			wantErr: "entity.historyEvents: 10 is below 100",
		},
		{
			name:    "clones historyEvents too small",
			yaml:    fullWith(t, func(c *Config) { c.Clones.HistoryEvents = 10 }),
			wantErr: "clones.historyEvents: 10 is below 100",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.yaml))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestValidate_acceptsPVEValues(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
	}{
		{name: "pool of one level", change: func(c *Config) { c.Proxmox.Pool = "Proxies_1.a-b" }},
		{name: "pool nested three levels", change: func(c *Config) { c.Proxmox.Pool = "a/b/c" }},
		{name: "no pool", change: func(c *Config) { c.Proxmox.Pool = "" }},
		{name: "tag with every allowed character", change: func(c *Config) { c.Proxmox.Tags = []string{"_Team+a.b-c9"} }},
		{name: "tag of a digit", change: func(c *Config) { c.Proxmox.Tags = []string{"1"} }},
		{name: "pveflow's own tag", change: func(c *Config) { c.Proxmox.Tags = []string{"proxy_operator"} }},
		{name: "no tags", change: func(c *Config) { c.Proxmox.Tags = nil }},
		{name: "clones perStorage zero turns admission off", change: func(c *Config) { c.Clones.PerStorage = 0 }},
		{name: "entity checkInterval zero turns checks off", change: func(c *Config) { c.Entity.CheckInterval = 0 }},
		{name: "entity backstopInterval zero turns the observer off", change: func(c *Config) { c.Entity.BackstopInterval = 0 }},
		{name: "template on a subset of the nodes", change: func(c *Config) {
			c.Proxmox.Templates["alpine"] = Template{Nodes: map[string]int{"pve-2": 9002}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := full()
			tt.change(&c)
			assert.NoError(t, c.Validate())
		})
	}
}

func TestParse_templatePerNode(t *testing.T) {
	c, err := Parse([]byte(`
proxmox:
  url: https://pve.example.com:8006
  tokenFile: /etc/pveflow/pve-token
  nodes: [pve1, pve2]
  templates: {debian13: {nodes: {pve1: 9000, pve2: 9001}}}
  machineTypes: {small: {cores: 2, memoryMiB: 2048}}
`))
	require.NoError(t, err)
	assert.Equal(t, Template{Nodes: map[string]int{"pve1": 9000, "pve2": 9001}}, c.Proxmox.Templates["debian13"])
}

func TestParse_clonesPerStorageDefaultsToFour(t *testing.T) {
	c, err := Parse([]byte(minimalYAML))
	require.NoError(t, err)
	assert.Equal(t, 4, c.Clones.PerStorage)
}

func TestParse_onbootDefaultsToTrue(t *testing.T) {
	c, err := Parse([]byte(minimalYAML))
	require.NoError(t, err)
	assert.True(t, c.Proxmox.OnBoot)
}

func TestParse_onbootFalseIsKept(t *testing.T) {
	c, err := Parse([]byte(minimalYAML + "  onboot: false\n"))
	require.NoError(t, err)
	assert.False(t, c.Proxmox.OnBoot)
}

func TestParse_haStateMustBePVEs(t *testing.T) {
	_, err := Parse([]byte(minimalYAML + "  ha: {enabled: true, state: running}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `proxmox.ha.state: "running" is not one of started, ignored`)
}

func TestParse_haStatesThatKeepProxiesStoppedAreRefused(t *testing.T) {
	for _, state := range []string{"stopped", "disabled"} {
		t.Run(state, func(t *testing.T) {
			_, err := Parse([]byte(minimalYAML + "  ha: {enabled: true, state: " + state + "}\n"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), `proxmox.ha.state: "`+state+`" would have PVE's HA manager stop each proxy as soon as a create registers it, and keep it stopped`)
		})
	}
}

func TestParse_haStateIgnoredIsKept(t *testing.T) {
	c, err := Parse([]byte(minimalYAML + "  ha: {enabled: true, state: ignored}\n"))
	require.NoError(t, err)
	assert.Equal(t, HA{Enabled: true, State: "ignored"}, c.Proxmox.HA)
}

func TestParse_clonesPerStorageZeroIsKept(t *testing.T) {
	c, err := Parse([]byte(minimalYAML + "clones: {perStorage: 0}\n"))
	require.NoError(t, err)
	assert.Equal(t, 0, c.Clones.PerStorage)
}

func TestParse_callCapDefaultsToPveproxysWorkers(t *testing.T) {
	c, err := Parse([]byte(minimalYAML))
	require.NoError(t, err)
	assert.Equal(t, Calls{PerSecond: 50, Concurrency: 3}, c.Proxmox.Calls)
}

func TestParse_callCapZeroIsNoLimit(t *testing.T) {
	c, err := Parse([]byte(minimalYAML + "  calls: {perSecond: 0, concurrency: 0}\n"))
	require.NoError(t, err)
	assert.Equal(t, Calls{}, c.Proxmox.Calls)
}

func TestParse_unknownKeyIsError(t *testing.T) {
	_, err := Parse([]byte(minimalYAML + "  tokenFle: /etc/pveflow/pve-token\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 8")
	assert.Contains(t, err.Error(), "tokenFle")
}

func TestParse_durationMustBeGoDuration(t *testing.T) {
	_, err := Parse([]byte(minimalYAML + "budgets:\n  clone: 600\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 9")
	assert.Contains(t, err.Error(), "time.Duration")
}

func TestParse_secondDocumentIsError(t *testing.T) {
	_, err := Parse([]byte(minimalYAML + "---\nproxmox: {}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "second document")
}

func TestParse_collectsAllProblems(t *testing.T) {
	_, err := Parse([]byte(`
proxmox:
  url: ftp://pve.example.com
  nodes: [pve1]
  templates: {debian13: {vmid: 9000}}
  machineTypes: {small: {cores: 0, memoryMiB: 2048}}
poll:
  backoffCoefficient: 0.9
`))
	require.Error(t, err)
	var joined interface{ Unwrap() []error }
	require.ErrorAs(t, err, &joined)
	assert.Len(t, joined.Unwrap(), 4)
	for _, want := range []string{
		`proxmox.url: "ftp://pve.example.com" must use http or https`,
		"proxmox.tokenFile: must be set",
		"proxmox.machineTypes.small.cores: 0 is not positive",
		"poll.backoffCoefficient: 0.9 is below 1",
	} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestParse_vendorDataErrorDoesNotQuoteIt(t *testing.T) {
	_, err := Parse([]byte(fullWith(t, func(c *Config) { c.Proxmox.VendorData = "hunter2-secret" })))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "proxmox.vendorData: line 1: is a YAML scalar, not a mapping")
	assert.NotContains(t, err.Error(), "hunter2")
}

func TestLoad_exampleFile(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "testdata", "config", "example.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "https://pve.example.com:8006", c.Proxmox.URL)
	assert.Equal(t, []string{"pve1", "pve2"}, c.Proxmox.Nodes)
	assert.Equal(t, Template{Nodes: map[string]int{"pve1": 9000, "pve2": 9001}}, c.Proxmox.Templates["debian13"])
	assert.Equal(t, MachineType{Cores: 2, MemoryMiB: 2048, DiskGiB: 20}, c.Proxmox.MachineTypes["small"])
	assert.True(t, c.Proxmox.InstallGuestAgent)
	// The example writes out every default, so it must agree with Default.
	assert.Equal(t, Default().Clones, c.Clones)
	assert.Equal(t, Default().Budgets, c.Budgets)
	assert.Equal(t, Default().Poll, c.Poll)
	assert.Equal(t, Default().Proxmox.VMIDRange, c.Proxmox.VMIDRange)
	assert.Equal(t, Default().Proxmox.Calls, c.Proxmox.Calls)
}

// The example comments out its optional fields; uncommented, they must be valid too.
func TestLoad_exampleFileCommentedFieldsAreValid(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "config", "example.yaml"))
	require.NoError(t, err)
	text := string(data)
	for old, new := range map[string]string{
		"  # pool: ":  "  pool: ",
		"  # tags: ":  "  tags: ",
		"  # ha: ":    "  ha: ",
		"    # app: ": "    app: ",
		"    debian13: {nodes: {pve1: 9000, pve2: 9001}}": "",
		"    # debian13: {vmid: 9000}":                    "    debian13: {vmid: 9000}",
		"  # addressPools:\n  #   egress:\n  #     ipv4:": "  addressPools:\n    egress:\n      ipv4:",
	} {
		require.Contains(t, text, old)
		text = strings.Replace(text, old, new, 1)
	}
	c, err := Parse([]byte(text))
	require.NoError(t, err)
	assert.Equal(t, "proxies", c.Proxmox.Pool)
	assert.Equal(t, []string{"proxy", "team-a"}, c.Proxmox.Tags)
	assert.Equal(t, Template{VMID: 9000}, c.Proxmox.Templates["debian13"])
	assert.Equal(t, HA{Enabled: true, State: "started"}, c.Proxmox.HA)
	assert.True(t, c.Proxmox.MachineTypes["app"].WaitsForCloudInit())
	assert.Equal(t, 200, c.Proxmox.AddressPools["egress"].Size())
}

func TestLoad_missingFileNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
}

func TestLoad_invalidFileNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte("proxmox: {}\n"), 0o600))
	_, err := Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config "+path+": ")
	assert.Contains(t, err.Error(), "proxmox.url: must be set")
}

func TestPoll_nextLookIsAFifthOfTheTimeWaitedBetweenASecondAndTen(t *testing.T) {
	p := Default().Poll
	for _, tc := range []struct{ waited, next time.Duration }{
		{0, time.Second},
		{4 * time.Second, time.Second},
		{5 * time.Second, time.Second},
		{6 * time.Second, 1200 * time.Millisecond},
		{30 * time.Second, 6 * time.Second},
		{50 * time.Second, 10 * time.Second},
		{10 * time.Minute, 10 * time.Second},
	} {
		assert.Equal(t, tc.next, p.NextLook(tc.waited), "after %s", tc.waited)
	}
}

func TestPoll_nextLookWithCoefficientOneIsAFixedPeriod(t *testing.T) {
	p := Poll{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1, MaximumInterval: time.Second}

	for _, waited := range []time.Duration{0, time.Second, time.Hour} {
		assert.Equal(t, 200*time.Millisecond, p.NextLook(waited), "after %s", waited)
	}
}

// However a wait's looks mix the pace's spacing and the retry policy's (a look that met backend
// trouble), it makes no more of them within its budget than LooksWithin, and with the pace
// alone, as a stalled clone does, exactly as many.
func TestPoll_looksWithinBoundsEveryMixOfThePaceAndTheRetryPolicy(t *testing.T) {
	p := Default().Poll
	rng := rand.New(rand.NewPCG(1, 2))
	for _, budget := range []time.Duration{0, time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute} {
		looks := func(retried func() bool) int {
			n, retry := 0, p.InitialInterval
			for at := time.Duration(0); at <= budget; n++ {
				if retried() {
					at += retry
				} else {
					at += p.NextLook(at)
				}
				retry = min(time.Duration(float64(retry)*p.BackoffCoefficient), p.MaximumInterval)
			}
			return n
		}
		assert.Equal(t, looks(func() bool { return false }), p.LooksWithin(budget), "the pace alone within %s", budget)
		for range 100 {
			assert.LessOrEqual(t, looks(func() bool { return rng.IntN(2) == 0 }), p.LooksWithin(budget), "a mix within %s", budget)
		}
	}
}

func TestPoll_nextLookExpectingLooksAtNineTenthsThenEveryTwentiethUpToSixFifths(t *testing.T) {
	p := Default().Poll
	for _, tc := range []struct {
		name                   string
		waited, expected, next time.Duration
	}{
		{"nothing expected", 30 * time.Second, 0, 6 * time.Second},
		{"the pace's look comes first", 10 * time.Second, 40 * time.Second, 2 * time.Second},
		{"a look lands at nine tenths", 33 * time.Second, 40 * time.Second, 3 * time.Second},
		{"every fortieth from nine tenths", 36 * time.Second, 40 * time.Second, time.Second},
		{"every fortieth up to six fifths", 47 * time.Second, 40 * time.Second, time.Second},
		{"the pace again from six fifths", 48 * time.Second, 40 * time.Second, 9600 * time.Millisecond},
		{"the pace's cap is no later", 10 * time.Minute, 9 * time.Minute, 10 * time.Second},
		{"a short task's step is at least ExpectedLookStep", 1 * time.Second, time.Second, ExpectedLookStep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.next, p.NextLookExpecting(tc.waited, tc.expected))
		})
	}
}

func TestPoll_nextLookExpectingAddsAtMostExpectedLooksAndNeverALaterOne(t *testing.T) {
	p := Default().Poll
	looks := func(expected, until time.Duration) int {
		n := 0
		for waited := time.Duration(0); waited < until; waited += p.NextLookExpecting(waited, expected) {
			require.LessOrEqual(t, p.NextLookExpecting(waited, expected), p.NextLook(waited), "after %s expecting %s", waited, expected)
			n++
		}
		return n
	}
	for _, expected := range []time.Duration{200 * time.Millisecond, time.Second, 4 * time.Second, 30 * time.Second, 10 * time.Minute} {
		for _, until := range []time.Duration{expected / 2, expected, 2 * expected, time.Hour} {
			assert.LessOrEqual(t, looks(expected, until), looks(0, until)+ExpectedLooks, "expecting %s, until %s", expected, until)
		}
	}
}
