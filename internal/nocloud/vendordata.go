package nocloud

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrInvalidVendorData is wrapped by every VendorData error that comes from the configured
// document. The messages say what is wrong with it, never what it contains.
var ErrInvalidVendorData = errors.New("nocloud: invalid vendor-data")

const (
	cloudConfigHeader = "#cloud-config"

	agentPackage = "qemu-guest-agent"
	// Debian starts the agent from udev when its virtio port appears. On first boot that event
	// came before the package was installed, so nothing would start it until the next boot.
	agentStart = "systemctl enable --now qemu-guest-agent"

	// ReseedDropInPath is where the vendor-data writes the drop-in that runs ReseedScriptPath
	// before cloud-init-local each boot (see keepInstance).
	ReseedDropInPath = reseedDropInDir + "/pveflow-reseed.conf"
	// ReseedScriptPath is the script the drop-in runs.
	ReseedScriptPath = "/usr/local/sbin/pveflow-reseed"

	reseedDropIn = `[Service]
# pveflow: clean cloud-init's trusted cache when a seed of another instance is attached.
ExecStartPre=-` + ReseedScriptPath + `
`
	// reseedScript cleans cloud-init's cache when a NoCloud seed (a filesystem labelled cidata)
	// holds an instance-id other than the cached one: pveflow attached a new seed to have the
	// guest run new user-data. cloud-init-local, which runs next, then finds no cache and reads
	// the seed. The instance-id is read as pveflow's meta-data writes it.
	// installReseedHook writes the reseed script and its drop-in.
	installReseedHook = "mkdir -p " + reseedDropInDir + "\n" +
		"cat > " + ReseedScriptPath + " <<'PVEFLOW'\n" + reseedScript + "PVEFLOW\n" +
		"chmod 0755 " + ReseedScriptPath + "\n" +
		"cat > " + ReseedDropInPath + " <<'PVEFLOW'\n" + reseedDropIn + "PVEFLOW\n"
	reseedDropInDir = "/etc/systemd/system/cloud-init-local.service.d"

	reseedScript = `#!/bin/sh
# pveflow: cloud-init trusts its cache (manual_cache_clean: true), so it never looks at a new
# seed by itself. A seed whose instance-id is not the cached one is a new instance: clean the
# cache so that cloud-init-local, which runs next, reads the seed.
set -u
dev=$(blkid -o device -t LABEL=cidata 2>/dev/null || blkid -o device -t LABEL=CIDATA 2>/dev/null)
dev=$(printf '%s\n' "$dev" | head -n 1)
[ -n "$dev" ] && [ -f /var/lib/cloud/data/instance-id ] || exit 0
dir=$(mktemp -d /run/pveflow-seed.XXXXXX) || exit 0
if mount -o ro "$dev" "$dir"; then
  new=$(sed -n "s/^instance-id: *//p" "$dir/meta-data" | tr -d "\"'")
  umount "$dir"
fi
rmdir "$dir"
old=$(cat /var/lib/cloud/data/instance-id)
if [ -n "${new:-}" ] && [ "$new" != "$old" ]; then
  exec cloud-init clean
fi
`
)

// VendorData merges the configured vendor-data (a cloud-config YAML mapping, may be empty) with
// what installs and enables qemu-guest-agent when installAgent is on, and with what keeps the
// guest's cloud-init instance once its seed is detached (keepInstance), and returns a
// "#cloud-config" document.
//
// Merging works on the YAML tree rather than on decoded Go values, so configured keys keep
// their order and their scalars keep their style: cloud-init reads YAML 1.1, where a plain
// "yes" is true, and a round trip through Go values would quote it into a string.
func VendorData(configured string, installAgent bool) (string, error) {
	root, err := parseMapping(configured)
	if err != nil {
		return "", err
	}

	if installAgent {
		packages, err := sequence(root, "packages")
		if err != nil {
			return "", err
		}
		packages.Content = dedupScalars(append([]*yaml.Node{str(agentPackage)}, packages.Content...))

		runcmd, err := sequence(root, "runcmd")
		if err != nil {
			return "", err
		}
		runcmd.Content = append(runcmd.Content, str(agentStart))
	}
	if err := keepInstance(root); err != nil {
		return "", err
	}

	var b strings.Builder
	b.WriteString(cloudConfigHeader + "\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return "", fmt.Errorf("nocloud: encoding vendor-data: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("nocloud: encoding vendor-data: %w", err)
	}
	return b.String(), nil
}

// keepInstance adds what lets the guest live without its seed, which pveflow detaches and
// deletes once the first boot consumed it (the seed on local storage blocks migration).
//
// cloud-init checks at each boot that the cached instance is still the datasource's. NoCloud's
// check reads only the kernel command line and seed directories, never the CD-ROM, so every boot
// searches for the datasource again; with no seed it finds none, falls back to DataSourceNone,
// and runs as a new instance: per-instance modules again, new SSH host keys, user-data lost.
// manual_cache_clean: true makes cloud-init trust its cache instead (cloud-init's "First boot
// determination"). It is read on later boots from this instance's vendor-data, and cloud-init
// also leaves a marker of it in the instance's directory. A configured value is kept.
//
// Trusting, cloud-init would never see a new seed either, which is how ChangeProxy gives the
// guest new user-data. So a drop-in for cloud-init-local.service runs a script before it at
// each boot that does what cloud-init's docs say leaves the trusted cache, cloud-init clean,
// when an attached seed holds another instance-id. A bootcmd writes both at every boot, not a
// per-instance write_files: a guest whose instance began with an older seed gets them too.
func keepInstance(root *yaml.Node) error {
	if !hasKey(root, "manual_cache_clean") {
		root.Content = append(root.Content, str("manual_cache_clean"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	}
	bootcmd, err := sequence(root, "bootcmd")
	if err != nil {
		return err
	}
	bootcmd.Content = append(bootcmd.Content, &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{
		str("sh"), str("-c"), {Kind: yaml.ScalarNode, Tag: "!!str", Value: installReseedHook, Style: yaml.LiteralStyle},
	}})
	return nil
}

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}

// parseMapping returns the top-level mapping of a cloud-config document. An empty document gives
// an empty mapping, which encodes as "{}": cloud-init warns about a cloud-config part with no
// body at all.
func parseMapping(doc string) (*yaml.Node, error) {
	// The header is a YAML comment that would otherwise ride along on the first key and be
	// printed a second time under ours.
	if strings.HasPrefix(doc, cloudConfigHeader) {
		_, doc, _ = strings.Cut(doc, "\n")
	}

	var n yaml.Node
	// yaml's own messages can quote the offending text, so they are not passed on.
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		return nil, fmt.Errorf("%w: not valid YAML", ErrInvalidVendorData)
	}
	if len(n.Content) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, nil
	}
	if root := n.Content[0]; root.Kind == yaml.MappingNode {
		return root, nil
	}
	return nil, fmt.Errorf("%w: not a YAML mapping", ErrInvalidVendorData)
}

// sequence returns the list under key in m, adding an empty one when the key is absent or null.
func sequence(m *yaml.Node, key string) (*yaml.Node, error) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != key {
			continue
		}
		v := m.Content[i+1]
		switch {
		case v.Kind == yaml.SequenceNode:
			return v, nil
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			*v = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			return v, nil
		default:
			return nil, fmt.Errorf("%w: %s is not a list", ErrInvalidVendorData, key)
		}
	}
	v := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	m.Content = append(m.Content, str(key), v)
	return v, nil
}

// dedupScalars drops scalars seen earlier in nodes. Other entries, such as cloud-init's
// [name, version] pairs, are kept as they are.
func dedupScalars(nodes []*yaml.Node) []*yaml.Node {
	seen := make(map[string]bool, len(nodes))
	out := nodes[:0]
	for _, n := range nodes {
		if n.Kind == yaml.ScalarNode {
			if seen[n.Value] {
				continue
			}
			seen[n.Value] = true
		}
		out = append(out, n)
	}
	return out
}

func str(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
}
