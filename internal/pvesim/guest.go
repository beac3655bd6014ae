package pvesim

import (
	"bytes"
	"io"
	"slices"
	"strings"

	"github.com/kdomanski/iso9660"
)

// guest is what the guest OS inside a VM keeps across its boots: what it found on its NoCloud
// seed, the CD-ROM whose ISO has the volume label "cidata", as cloud-init does at each boot.
type guest struct {
	// seed is the seed's root files by name (meta-data, user-data, vendor-data,
	// network-config) at the last boot; nil when that boot found no seed.
	seed map[string]string
	// cloudInit is the state of the guest's cloud-init.
	cloudInit cloudInit
	// network is what cloud-init configured for the instance: from its seed's network-config,
	// or nil, cloud-init's fallback of DHCP on net0. networkConfig is the text it was read
	// from, which a Snapshot keeps in its place.
	network       *guestNetwork
	networkConfig string
}

// boot is the guest booting with seed, the NoCloud seed attached now (nil: none). cloud-init
// applies a network config only when the boot begins a new instance (NoCloud's default update
// event, boot-new-instance): the instance's network outlives its seed, and a new instance
// without one, DataSourceNone's, gets the fallback. newInstance says whether this boot began
// one.
func (gs *guest) boot(seed map[string]string) (newInstance bool) {
	gs.seed = seed
	before := gs.cloudInit.newInstances
	gs.cloudInit.boot(seed)
	newInstance = gs.cloudInit.newInstances != before
	if newInstance {
		gs.networkConfig = seed["network-config"]
		gs.network = parseNetworkConfig(gs.networkConfig)
	}
	return newInstance
}

// seedLabel is the volume label cloud-init's NoCloud datasource looks for.
const seedLabel = "cidata"

// seedAtBoot is the NoCloud seed a guest booting now finds: the root files of the first CD-ROM
// drive, in PVE's drive-key order, whose volume holds an ISO labelled "cidata"; nil when none
// does. The caller holds c.mu.
func (c *Cluster) seedAtBoot(g *vm) map[string]string {
	keys := make([]string, 0, len(g.cfg))
	for k, v := range g.cfg {
		if isDiskKey(k) && isCDROM(v) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		sid, name, ok := strings.Cut(driveVolID(g.cfg[k]), ":")
		if !ok {
			continue
		}
		st, err := c.storageOn(g.node, sid)
		if err != nil || st.volumes[name] == nil {
			continue
		}
		if files, ok := readSeed(st.volumes[name].data); ok {
			return files
		}
	}
	return nil
}

// readSeed reads a NoCloud seed image: its root files, if it is an ISO 9660 image labelled
// "cidata".
func readSeed(data []byte) (map[string]string, bool) {
	if len(data) == 0 {
		return nil, false
	}
	img, err := iso9660.OpenImage(bytes.NewReader(data))
	if err != nil {
		return nil, false
	}
	if label, err := img.Label(); err != nil || !strings.EqualFold(label, seedLabel) {
		return nil, false
	}
	root, err := img.RootDir()
	if err != nil {
		return nil, false
	}
	children, err := root.GetChildren()
	if err != nil {
		return nil, false
	}
	files := make(map[string]string, len(children))
	for _, f := range children {
		if f.IsDir() {
			continue
		}
		content, err := io.ReadAll(f.Reader())
		if err != nil {
			return nil, false
		}
		files[f.Name()] = string(content)
	}
	return files, true
}
