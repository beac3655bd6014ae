package pvesim

import (
	"fmt"
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
	// installsHook is whether the cached instance's cloud-config has a bootcmd that installs
	// pveflow's reseed hook (nocloud.VendorData).
	installsHook bool
	// reseedHook is pveflow's reseed hook in /etc, which outlives cloud-init's cache: before
	// cloud-init-local, it cleans the cache when the attached seed holds another instance-id.
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
//     An instance-id other than the cached one is a new instance; either way the instance's
//     configuration is the datasource's now.
//   - bootcmd runs at every boot, from the instance's configuration.
func (ci *cloudInit) boot(seed map[string]string) {
	iid := datasourceNoneID
	if seed != nil {
		iid = seedInstanceID(seed)
	}
	if ci.reseedHook && seed != nil && iid != ci.instanceID {
		*ci = cloudInit{newInstances: ci.newInstances, reseedHook: true} // cloud-init clean
	}
	if ci.instanceID == "" || !ci.trust {
		userData, vendorData := cloudConfig(seed["user-data"]), cloudConfig(seed["vendor-data"])
		if iid != ci.instanceID {
			ci.newInstances++
			ci.instanceID, ci.trust = iid, false
		}
		// User-data's cloud-config overrides vendor-data's (helpers.ConfigMerger). The marker
		// cloud-init writes from it stays with the instance.
		if v, ok := userData["manual_cache_clean"].(bool); ok {
			ci.trust = ci.trust || v
		} else if v, ok := vendorData["manual_cache_clean"].(bool); ok {
			ci.trust = ci.trust || v
		}
		ci.installsHook = installsReseedHook(userData) || installsReseedHook(vendorData)
	}
	ci.reseedHook = ci.reseedHook || ci.installsHook
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

// installsReseedHook reports whether a cloud-config's bootcmd writes pveflow's reseed hook.
func installsReseedHook(cfg map[string]any) bool {
	cmds, _ := cfg["bootcmd"].([]any)
	return slices.ContainsFunc(cmds, func(cmd any) bool {
		return strings.Contains(fmt.Sprint(cmd), nocloud.ReseedDropInPath)
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
