package pvesim

import (
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/pveflow/pveflow/internal/nocloud"
)

// cloudInit is what the guest's cloud-init keeps in /var/lib/cloud across boots, and what it
// decides at each boot, as cloud-init 25.x does (cloudinit/cmd/main.py main_init, stages.py
// Init._get_data_source, sources/DataSourceNoCloud.py).
type cloudInit struct {
	// instanceID is the cached instance's instance-id (/var/lib/cloud/data/instance-id); empty
	// before cloud-init first ran, or after its cache was cleaned.
	instanceID string
	// newInstances counts the boots cloud-init took for a new instance's first boot: each ran
	// the per-instance modules again (user-data's runcmd, SSH host keys, users).
	newInstances int
	// trust is manual_cache_clean in the cached instance: set in its user-data or vendor-data
	// cloud-config, which cloud-init reads through /var/lib/cloud/instance on the next boot, or
	// its marker (instance/manual-clean) that cloud-init writes from it. The next boot restores
	// the cache without looking for the datasource.
	trust bool
	// reseedHook is pveflow's reseed hook, written into /etc by a seed's write_files: before
	// cloud-init-local, it cleans the cache when the attached seed holds another instance-id.
	// /etc outlives cloud-init's cache.
	reseedHook bool
}

// datasourceNoneID is DataSourceNone's instance-id: a boot that finds no datasource falls back
// to it (it ends every default datasource_list).
const datasourceNoneID = "iid-datasource-none"

// boot is cloud-init running in a boot that finds seed (nil: no NoCloud seed attached).
//
//   - The reseed hook runs first, and cleans the cache when seed's instance-id is not the
//     cached one.
//   - manual_cache_clean set: the cache is trusted, whatever is attached ("trust").
//   - Otherwise the cache is checked. NoCloud's check_instance_id reads the kernel command line
//     and seed directories, never the CD-ROM, so the check fails and cloud-init looks for the
//     datasource again: the seed's instance-id, or DataSourceNone's when no seed is attached.
//     An instance-id other than the cached one is a new instance.
func (ci *cloudInit) boot(seed map[string]string) {
	iid := datasourceNoneID
	if seed != nil {
		iid = seedInstanceID(seed)
	}
	if ci.reseedHook && seed != nil && iid != ci.instanceID {
		ci.instanceID, ci.trust = "", false // cloud-init clean
	}
	if ci.instanceID != "" && ci.trust {
		return
	}
	userData, vendorData := cloudConfig(seed["user-data"]), cloudConfig(seed["vendor-data"])
	if iid != ci.instanceID {
		ci.newInstances++
		ci.instanceID, ci.trust = iid, false
		// write_files is per-instance: it writes on a new instance's boot only.
		ci.reseedHook = ci.reseedHook || writesFile(userData, nocloud.ReseedDropInPath) || writesFile(vendorData, nocloud.ReseedDropInPath)
	}
	// User-data's cloud-config overrides vendor-data's (helpers.ConfigMerger).
	if v, ok := userData["manual_cache_clean"].(bool); ok {
		ci.trust = ci.trust || v
	} else if v, ok := vendorData["manual_cache_clean"].(bool); ok {
		ci.trust = ci.trust || v
	}
}

// seedInstanceID is the instance-id of a NoCloud seed's meta-data; NoCloud's default,
// "nocloud", when it has none.
func seedInstanceID(seed map[string]string) string {
	var md struct {
		InstanceID string `yaml:"instance-id"`
	}
	if yaml.Unmarshal([]byte(seed["meta-data"]), &md) != nil || md.InstanceID == "" {
		return "nocloud"
	}
	return md.InstanceID
}

// cloudConfig is a "#cloud-config" document's mapping; nil for any other part (a script, a
// MIME multipart) or one that does not parse.
func cloudConfig(doc string) map[string]any {
	if !strings.HasPrefix(doc, "#cloud-config") {
		return nil
	}
	var m map[string]any
	if yaml.Unmarshal([]byte(doc), &m) != nil {
		return nil
	}
	return m
}

// writesFile reports whether a cloud-config's write_files writes path.
func writesFile(cfg map[string]any, path string) bool {
	files, _ := cfg["write_files"].([]any)
	return slices.ContainsFunc(files, func(f any) bool {
		m, _ := f.(map[string]any)
		return m["path"] == path
	})
}

// CloudInit is what the guest's cloud-init of a VM has cached: its instance's instance-id, and
// how many boots it took for a new instance's first. ok is false for an unknown VMID.
func (c *Cluster) CloudInit(vmid int) (instanceID string, newInstances int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.vms[vmid]
	if g == nil {
		return "", 0, false
	}
	return g.guest.cloudInit.instanceID, g.guest.cloudInit.newInstances, true
}

// GuestSeed is the NoCloud seed the guest of a VM found at its last boot: its root files by
// name, nil when it found none. ok is false for an unknown VMID.
func (c *Cluster) GuestSeed(vmid int) (files map[string]string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.vms[vmid]
	if g == nil {
		return nil, false
	}
	return maps.Clone(g.guest.seed), true
}
