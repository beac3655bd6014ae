package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pveschema"
)

func TestEndpoint_expandsNumberedKeys(t *testing.T) {
	raw := json.RawMessage(`{"name":"update_vm","parameters":{"additionalProperties":0,"properties":{
		"ide[n]":{"type":"string","optional":1,"description":"Use volume as IDE hard disk or CD-ROM (n is 0 to 3)."},
		"cores":{"type":"integer","optional":1,"minimum":1}}}}`)

	ep, _, err := endpoint("PUT", "/nodes/{node}/qemu/{vmid}/config", raw)
	require.NoError(t, err)

	assert.Len(t, ep.Params, 5)
	for _, key := range []string{"ide0", "ide1", "ide2", "ide3", "cores"} {
		assert.Contains(t, ep.Params, key)
	}
	assert.True(t, ep.Params["ide3"].Optional)
}

func TestEndpoint_rejectsARangeThatDisagreesWithPVE(t *testing.T) {
	raw := json.RawMessage(`{"parameters":{"additionalProperties":0,"properties":{
		"ide[n]":{"type":"string","description":"(n is 0 to 5)"}}}}`)

	_, _, err := endpoint("PUT", "/x", raw)

	assert.ErrorContains(t, err, "described as 0 to 5, expected 0 to 3")
}

func TestEndpoint_rejectsUnknownNumberedKeys(t *testing.T) {
	raw := json.RawMessage(`{"parameters":{"additionalProperties":0,"properties":{"mp[n]":{"type":"string"}}}}`)

	_, _, err := endpoint("PUT", "/x", raw)

	assert.ErrorContains(t, err, "mp[n]: no known range")
}

func TestEndpoint_rejectsAdditionalProperties(t *testing.T) {
	raw := json.RawMessage(`{"parameters":{"additionalProperties":1,"properties":{}}}`)

	_, _, err := endpoint("POST", "/x", raw)

	assert.ErrorContains(t, err, "allows additional properties")
}

func TestEndpoint_keepsCheckedAttributes(t *testing.T) {
	raw := json.RawMessage(`{"name":"clone_vm","protected":1,"proxyto":"node",
		"permissions":{"check":["perm","/vms/{vmid}",["VM.Clone"]]},"returns":{"type":"string"},
		"parameters":{"additionalProperties":0,"properties":{
		"bwlimit":{"type":"integer","optional":1,"minimum":"0"},
		"format":{"type":"string","optional":1,"enum":["raw","qcow2"]},
		"size":{"type":"string","pattern":"\\+?\\d+[KMGT]?","maxLength":20},
		"net":{"type":"string","format":{"bridge":{"type":"string"}}},
		"checksum":{"type":"string","requires":"checksum-algorithm"},
		"newid":{"type":"integer","format":"pve-vmid","minimum":100,"maximum":999999999}}}}`)

	ep, formats, err := endpoint("POST", "/nodes/{node}/qemu/{vmid}/clone", raw)
	require.NoError(t, err)

	assert.Equal(t, "clone_vm", ep.Name)
	assert.True(t, ep.Protected)
	assert.Equal(t, "node", ep.ProxyTo)
	assert.Equal(t, "string", ep.Returns)
	assert.JSONEq(t, `{"check":["perm","/vms/{vmid}",["VM.Clone"]]}`, string(ep.Permissions))
	require.NotNil(t, ep.Params["bwlimit"].Minimum)
	assert.Equal(t, 0.0, *ep.Params["bwlimit"].Minimum)
	assert.Equal(t, []string{"raw", "qcow2"}, ep.Params["format"].Enum)
	assert.Equal(t, `\+?\d+[KMGT]?`, ep.Params["size"].Pattern)
	require.NotNil(t, ep.Params["size"].MaxLength)
	assert.Equal(t, 20, *ep.Params["size"].MaxLength)
	assert.Empty(t, ep.Params["net"].Format, "an inline property-string format has no name")
	assert.Equal(t, "net", ep.Params["net"].PropertyString, "it is named after its parameter")
	assert.Equal(t, map[string]pveschema.Param{"bridge": {Type: "string"}}, formats["net"])
	assert.Equal(t, "checksum-algorithm", ep.Params["checksum"].Requires)
	assert.Equal(t, "pve-vmid", ep.Params["newid"].Format)
	assert.Equal(t, 999999999.0, *ep.Params["newid"].Maximum)
}

func TestEndpoint_keepsPropertyStringKeysAndNamedFormats(t *testing.T) {
	raw := json.RawMessage(`{"parameters":{"additionalProperties":0,"properties":{
		"net[n]":{"type":"string","optional":1,"format":{
			"model":{"type":"string","default_key":1,"enum":["virtio","e1000"]},
			"virtio":{"alias":"macaddr","keyAlias":"model"},
			"tag":{"type":"integer","optional":1,"minimum":1,"maximum":4094}}},
		"ipconfig[n]":{"type":"string","optional":1,"format":"pve-qm-ipconfig"}}}}`)

	ep, formats, err := endpoint("POST", "/nodes/{node}/qemu/{vmid}/config", raw)
	require.NoError(t, err)

	assert.Equal(t, "net", ep.Params["net31"].PropertyString)
	assert.True(t, formats["net"]["model"].DefaultKey)
	assert.Equal(t, pveschema.Param{Alias: "macaddr", KeyAlias: "model"}, formats["net"]["virtio"])
	assert.Equal(t, 4094.0, *formats["net"]["tag"].Maximum)
	assert.Equal(t, "pve-qm-ipconfig", ep.Params["ipconfig0"].PropertyString, "a format PVE registers by name")
	assert.Equal(t, "ip", formats["pve-qm-ipconfig"]["gw"].Requires)
}
