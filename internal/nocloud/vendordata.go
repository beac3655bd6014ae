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
)

// VendorData merges the configured vendor-data (a cloud-config YAML mapping, may be empty) with
// what installs and enables qemu-guest-agent when installAgent is on, and returns a
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
