package pveschema_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pveschema"
)

const upid = "UPID:pve1:000A1B2C:0012D687:6750A1B2:qmclone:9000:pveflow@pve!ops:"

func TestValidate_acceptsEverySeamCall(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		params url.Values
	}{
		{"Version", http.MethodGet, "/version", nil},
		{"NodeStatus", http.MethodGet, "/nodes/pve1/status", nil},
		{"StorageStatus", http.MethodGet, "/nodes/pve1/storage/local-lvm/status", nil},
		{"ClusterResources", http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}}},
		{"VMConfig", http.MethodGet, "/nodes/pve1/qemu/100/config", nil},
		{"SetVMConfig", http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{
			"cores":       {"2"},
			"memory":      {"2048"},
			"agent":       {"1"},
			"tags":        {"pveflow;egress-proxy"},
			"ide2":        {"local:iso/egress-1-seed.iso,media=cdrom"},
			"net0":        {"virtio=BC:24:11:2E:C5:4A,bridge=vmbr0"},
			"description": {"pveflow-uid: 6f1c\nmanaged-by: pveflow"},
			"name":        {"egress-1"},
			"delete":      {"unused0,ipconfig0"},
		}},
		{"Clone", http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{
			"newid":       {"123456"},
			"name":        {"egress-1"},
			"description": {"managed-by: pveflow"},
			"full":        {"1"},
			"target":      {"pve2"},
			"storage":     {"local-lvm"},
			"pool":        {"pveflow"},
		}},
		{"Resize", http.MethodPut, "/nodes/pve1/qemu/100/resize", url.Values{"disk": {"scsi0"}, "size": {"20G"}}},
		{"Start", http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil},
		{"Stop", http.MethodPost, "/nodes/pve1/qemu/100/status/stop", nil},
		{"VMStatus", http.MethodGet, "/nodes/pve1/qemu/100/status/current", nil},
		{"Destroy", http.MethodDelete, "/nodes/pve1/qemu/100", url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}}},
		{"TaskStatus", http.MethodGet, "/nodes/pve1/tasks/" + url.PathEscape(upid) + "/status", nil},
		{"AgentNetworkInterfaces", http.MethodGet, "/nodes/pve1/qemu/100/agent/network-get-interfaces", nil},
		{"AgentFileRead", http.MethodGet, "/nodes/pve1/qemu/100/agent/file-read", url.Values{"file": {"/run/cloud-init/result.json"}}},
		{"UploadISO", http.MethodPost, "/nodes/pve1/storage/local/upload", url.Values{"content": {"iso"}, "filename": {"egress-1-seed.iso"}}},
		{"DeleteVolume", http.MethodDelete, "/nodes/pve1/storage/local/content/local:iso%2Fegress-1-seed.iso", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Nil(t, pveschema.Validate(tt.method, tt.path, tt.params))
		})
	}
}

func TestValidate_rejectsWithPVEsAnswer(t *testing.T) {
	const (
		config    = "/nodes/pve1/qemu/100/config"
		badParams = "Parameter verification failed."
	)
	tests := []struct {
		name   string
		method string
		path   string
		params url.Values
		status int
		reason string
		errors map[string]string
	}{
		{
			name: "unknown path", method: http.MethodGet, path: "/nodes/x/bogus",
			status: 501, reason: "Method 'GET /nodes/x/bogus' not implemented",
		},
		{
			name: "unknown method on a known path", method: http.MethodPost, path: "/version",
			status: 501, reason: "Method 'POST /version' not implemented",
		},
		{
			name: "unknown parameter", method: http.MethodPut, path: config, params: url.Values{"bogus": {"1"}},
			status: 400, reason: badParams,
			errors: map[string]string{"bogus": "property is not defined in schema and the schema does not allow additional properties"},
		},
		{
			name: "missing required parameter", method: http.MethodPut, path: "/nodes/pve1/qemu/100/resize",
			params: url.Values{"disk": {"scsi0"}},
			status: 400, reason: badParams,
			errors: map[string]string{"size": "property is missing and it is not optional"},
		},
		{
			name: "bad integer", method: http.MethodPut, path: config, params: url.Values{"cores": {"abc"}},
			status: 400, reason: badParams,
			errors: map[string]string{"cores": "type check ('integer') failed - got 'abc'"},
		},
		{
			name: "boolean true in form encoding", method: http.MethodPost, path: "/nodes/pve1/qemu/9000/clone",
			params: url.Values{"newid": {"101"}, "full": {"true"}},
			status: 400, reason: badParams,
			errors: map[string]string{"full": "type check ('boolean') failed - got 'true'"},
		},
		{
			// pve-vmid's format check runs before the minimum and already refuses it.
			name: "vmid below 100", method: http.MethodPost, path: "/nodes/pve1/qemu/9000/clone",
			params: url.Values{"newid": {"99"}},
			status: 400, reason: badParams,
			errors: map[string]string{"newid": "invalid format - value does not look like a valid VM ID\n"},
		},
		{
			name: "vmid in the path", method: http.MethodGet, path: "/nodes/pve1/qemu/42/config",
			status: 400, reason: badParams,
			errors: map[string]string{"vmid": "invalid format - value does not look like a valid VM ID\n"},
		},
		{
			name: "below minimum", method: http.MethodPut, path: config, params: url.Values{"cores": {"0"}},
			status: 400, reason: badParams,
			errors: map[string]string{"cores": "value must have a minimum value of 1"},
		},
		{
			name: "above maximum", method: http.MethodDelete, path: "/nodes/pve1/storage/local/content/local:iso%2Fa.iso",
			params: url.Values{"delay": {"31"}},
			status: 400, reason: badParams,
			errors: map[string]string{"delay": "value must have a maximum value of 30"},
		},
		{
			name: "not in the enumeration", method: http.MethodGet, path: "/cluster/resources",
			params: url.Values{"type": {"bogus"}},
			status: 400, reason: badParams,
			errors: map[string]string{"type": "value 'bogus' does not have a value in the enumeration 'vm, storage, node, sdn'"},
		},
		{
			name: "pattern", method: http.MethodPut, path: "/nodes/pve1/qemu/100/resize",
			params: url.Values{"disk": {"scsi0"}, "size": {"20 GiB"}},
			status: 400, reason: badParams,
			errors: map[string]string{"size": "value does not match the regex pattern"},
		},
		{
			name: "net99 is past the numbered range", method: http.MethodPut, path: config,
			params: url.Values{"net99": {"virtio,bridge=vmbr0"}},
			status: 400, reason: badParams,
			errors: map[string]string{"net99": "property is not defined in schema and the schema does not allow additional properties"},
		},
		{
			name: "bad node name in the path", method: http.MethodGet, path: "/nodes/pve_1/status",
			status: 400, reason: badParams,
			errors: map[string]string{"node": "invalid format - value does not look like a valid node name\n"},
		},
		{
			name: "bad storage ID", method: http.MethodGet, path: "/nodes/pve1/storage/x/status",
			status: 400, reason: badParams,
			errors: map[string]string{"storage": "invalid format - storage ID 'x' cannot be shorter than 2 characters\n"},
		},
		{
			name: "name is not a DNS name", method: http.MethodPost, path: "/nodes/pve1/qemu/9000/clone",
			params: url.Values{"newid": {"101"}, "name": {"egress_1"}},
			status: 400, reason: badParams,
			errors: map[string]string{"name": "invalid format - value does not look like a valid DNS name\n"},
		},
		{
			name: "bad tag in a tag list", method: http.MethodPut, path: config, params: url.Values{"tags": {"pveflow;-x!"}},
			status: 400, reason: badParams,
			errors: map[string]string{"tags": "invalid format - invalid characters in tag\n"},
		},
		{
			name: "parameter that requires another", method: http.MethodPost, path: "/nodes/pve1/storage/local/upload",
			params: url.Values{"content": {"iso"}, "filename": {"a.iso"}, "checksum": {"abc"}},
			status: 400, reason: badParams,
			errors: map[string]string{"checksum-algorithm": "missing property - 'checksum' requires this property"},
		},
		{
			name: "several bad parameters at once", method: http.MethodPut, path: config,
			params: url.Values{"cores": {"x"}, "bogus": {"1"}},
			status: 400, reason: badParams,
			errors: map[string]string{
				"cores": "type check ('integer') failed - got 'x'",
				"bogus": "property is not defined in schema and the schema does not allow additional properties",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pveschema.Validate(tt.method, tt.path, tt.params)
			require.NotNil(t, got)
			assert.Equal(t, &pve.APIError{Status: tt.status, Reason: tt.reason, Message: tt.reason, Errors: tt.errors}, got)
		})
	}
}

func TestValidate_expandedNumberedKeysAccepted(t *testing.T) {
	for key, value := range map[string]string{"net0": "virtio", "net31": "virtio", "ide3": "x", "scsi30": "x", "virtio15": "x", "sata5": "x",
		"unused255": "x", "ipconfig31": "ip=dhcp", "usb13": "spice"} {
		t.Run(key, func(t *testing.T) {
			assert.Nil(t, pveschema.Validate(http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{key: {value}}))
		})
	}
}

func TestValidate_acceptsPropertyStringsPVEParses(t *testing.T) {
	for key, value := range map[string]string{
		"net0":      "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,firewall=1,tag=20",
		"net1":      "e1000=bc:24:11:00:00:01,bridge=vmbr1,link_down=yes,tag=4094",
		"net2":      "model=virtio,macaddr=BC:24:11:00:00:02,bridge=vmbr2,",
		"ipconfig0": "ip=192.0.2.10/24,gw=192.0.2.1,ip6=2001:db8::10/64,gw6=2001:db8::1",
		"ipconfig1": "ip6=auto",
		"ide2":      "local:iso/seed.iso,media=cdrom",
		"scsi0":     "file=local-lvm:vm-100-disk-0,discard=on,size=32G,ssd=1",
	} {
		t.Run(key, func(t *testing.T) {
			assert.Nil(t, pveschema.Validate(http.MethodPost, "/nodes/pve1/qemu/100/config", url.Values{key: {value}}))
		})
	}
}

// TestValidate_refusesPropertyStringsAsPVEDoes: pve-common's parse_property_string dies on a
// part it cannot read, and with "format error" and a line for each key that fails its check;
// check_prop puts "invalid format - " before either. A key's own format error ends in the
// validator's newline, and the exception's line adds another.
func TestValidate_refusesPropertyStringsAsPVEDoes(t *testing.T) {
	for _, tc := range []struct {
		name, key, value, msg string
	}{
		{"a tag above 4094", "net0", "virtio,bridge=vmbr0,tag=4095", "format error\nnet0.tag: value must have a maximum value of 4094\n"},
		{"a tag of 0", "net1", "virtio,bridge=vmbr0,tag=0", "format error\nnet1.tag: value must have a minimum value of 1\n"},
		{"a tag that is no number", "net0", "virtio,tag=x", "format error\nnet0.tag: type check ('integer') failed - got 'x'\n"},
		{"a boolean PVE cannot read", "net0", "virtio,firewall=maybe", "format error\nnet0.firewall: type check ('boolean') failed - got 'maybe'\n"},
		{"two keys fail", "net0", "virtio,firewall=2,tag=5000", "format error\nnet0.firewall: type check ('boolean') failed - got '2'\nnet0.tag: value must have a maximum value of 4094\n"},
		{"no model", "net0", "bridge=vmbr0", "format error\nnet0.model: property is missing and it is not optional\n"},
		{"a model PVE does not have", "net0", "virtio2,bridge=vmbr0", "format error\nnet0.model: value 'virtio2' does not have a value in the enumeration 'e1000, e1000-82540em, e1000-82544gc, e1000-82545em, e1000e, i82551, i82557b, i82559er, ne2k_isa, ne2k_pci, pcnet, rtl8139, virtio, vmxnet3'\n"},
		{"a multicast MAC", "net0", "virtio=01:24:11:2E:C5:4A", "format error\nnet0.macaddr: invalid format - value does not look like a valid unicast MAC address\n\n"},
		{"a bridge with a space", "net0", "virtio,bridge=vm br0", "format error\nnet0.bridge: invalid format - invalid bridge ID 'vm br0'\n\n"},
		{"an unknown key", "net0", "virtio,vlan=20", "invalid key in comma-separated list property: vlan\n"},
		{"a key twice", "net0", "virtio,bridge=vmbr0,bridge=vmbr1", "duplicate key in comma-separated list property: bridge\n"},
		{"a model twice", "net0", "virtio,e1000=BC:24:11:2E:C5:4A", "key alias 'model' is already defined\n"},
		{"a part without key", "net0", "virtio,=vmbr0", "missing key in comma-separated list property\n"},
		{"a gateway without its address", "ipconfig0", "gw=192.0.2.1", "format error\nipconfig0.ip: missing property required by 'ipconfig0.gw'\n"},
		{"an address without a prefix length", "ipconfig0", "ip=192.0.2.10", "format error\nipconfig0.ip: invalid format - value does not look like a valid ipv4 network configuration\n\n"},
		{"a prefix length under 8", "ipconfig0", "ip6=2001:db8::10/7", "format error\nipconfig0.ip6: invalid format - value does not look like a valid ipv6 network configuration\n\n"},
		{"an IPv6 gateway for IPv4", "ipconfig0", "ip=192.0.2.10/24,gw=2001:db8::1", "format error\nipconfig0.gw: invalid format - value does not look like a valid IPv4 address\n\n"},
		{"no default key in ipconfig", "ipconfig0", "dhcp", "value without key, but schema does not define a default key\n"},
		{"a drive without its volume", "ide2", "media=cdrom", "format error\nide2.file: property is missing and it is not optional\n"},
		{"a drive's value outside its enumeration", "scsi0", "local-lvm:vm-100-disk-0,cache=fast", "format error\nscsi0.cache: value 'fast' does not have a value in the enumeration 'none, writethrough, writeback, unsafe, directsync'\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pveschema.Validate(http.MethodPost, "/nodes/pve1/qemu/100/config", url.Values{tc.key: {tc.value}})
			const badParams = "Parameter verification failed."
			assert.Equal(t, &pve.APIError{Status: 400, Reason: badParams, Message: badParams, Errors: map[string]string{tc.key: "invalid format - " + tc.msg}}, got)
		})
	}
}

func TestValidate_pathValuesOverrideFields(t *testing.T) {
	// PVE takes node and vmid from the path, whatever the body says.
	params := url.Values{"vmid": {"not-a-number"}, "node": {"bad_node"}}
	assert.Nil(t, pveschema.Validate(http.MethodGet, "/nodes/pve1/qemu/100/config", params))
}

func TestLookup_matchesTemplatesAndTakesPathValues(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		want   string
		values map[string]string
	}{
		{
			name: "vm config", method: http.MethodPut, path: "/nodes/pve1/qemu/100/config",
			want: "/nodes/{node}/qemu/{vmid}/config", values: map[string]string{"node": "pve1", "vmid": "100"},
		},
		{
			name: "escaped volume ID is one segment", method: http.MethodDelete,
			path:   "/nodes/pve1/storage/local/content/local:iso%2Fx-seed.iso",
			want:   "/nodes/{node}/storage/{storage}/content/{volume}",
			values: map[string]string{"node": "pve1", "storage": "local", "volume": "local:iso/x-seed.iso"},
		},
		{
			name: "task UPID", method: http.MethodGet, path: "/nodes/pve1/tasks/" + upid + "/status",
			want: "/nodes/{node}/tasks/{upid}/status", values: map[string]string{"node": "pve1", "upid": upid},
		},
		{
			name: "empty segments skipped", method: http.MethodGet, path: "//version/",
			want: "/version", values: map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, ok := pveschema.Lookup(tt.method, tt.path)
			require.True(t, ok)
			assert.Equal(t, tt.want, ep.Path)
			assert.Equal(t, tt.method, ep.Method)
			assert.Equal(t, tt.values, ep.PathParams)
		})
	}
}

func TestLookup_unmatchedPaths(t *testing.T) {
	tests := []struct{ name, method, path string }{
		{"unescaped volume ID", http.MethodDelete, "/nodes/pve1/storage/local/content/local:iso/x.iso"},
		{"white space in a path value", http.MethodGet, "/nodes/pve%201/status"},
		{"bad escape", http.MethodGet, "/nodes/pve%zz/status"},
		{"method not on the path", http.MethodDelete, "/version"},
		{"path outside the slice", http.MethodGet, "/nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ok := pveschema.Lookup(tt.method, tt.path)
			assert.False(t, ok)
		})
	}
}

func TestLookup_describesTheMethod(t *testing.T) {
	ep, ok := pveschema.Lookup(http.MethodPost, "/nodes/pve1/qemu/9000/clone")
	require.True(t, ok)

	assert.Equal(t, "clone_vm", ep.Name)
	assert.True(t, ep.Protected)
	assert.Equal(t, "node", ep.ProxyTo)
	assert.Equal(t, "string", ep.Returns)
	assert.Contains(t, string(ep.Permissions), "VM.Clone")
	newid := ep.Params["newid"]
	assert.Equal(t, "integer", newid.Type)
	assert.False(t, newid.Optional)
	assert.Equal(t, "pve-vmid", newid.Format)
	require.NotNil(t, newid.Minimum)
	require.NotNil(t, newid.Maximum)
	assert.Equal(t, 100.0, *newid.Minimum)
	assert.Equal(t, 999999999.0, *newid.Maximum)
}
