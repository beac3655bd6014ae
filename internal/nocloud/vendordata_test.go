package nocloud

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var agentDoc = `#cloud-config
packages:
  - qemu-guest-agent
runcmd:
  - systemctl enable --now qemu-guest-agent
` + keepDoc

// keepDoc is what every vendor-data ends with when nothing configured bootcmd: what keeps the
// instance once the seed is detached.
var keepDoc = "manual_cache_clean: true\nbootcmd:\n" + reseedBootcmd

// reseedBootcmd is the bootcmd entry that installs the reseed hook.
var reseedBootcmd = "  - - sh\n    - -c\n    - |\n" + indent(installReseedHook)

func indent(s string) string {
	return "      " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n      ") + "\n"
}

func TestVendorData_table(t *testing.T) {
	tests := []struct {
		name         string
		configured   string
		installAgent bool
		want         string
	}{
		{
			name: "agent off, nothing configured",
			want: "#cloud-config\n" + keepDoc,
		},
		{
			name:         "agent on, nothing configured",
			installAgent: true,
			want:         agentDoc,
		},
		{
			name:         "agent on, only the header configured",
			configured:   "#cloud-config\n",
			installAgent: true,
			want:         agentDoc,
		},
		{
			name:       "agent off keeps the configured document and its YAML 1.1 booleans",
			configured: "#cloud-config\nssh_pwauth: yes\ntimezone: Europe/Berlin\n",
			want:       "#cloud-config\nssh_pwauth: yes\ntimezone: Europe/Berlin\n" + keepDoc,
		},
		{
			name:         "configured packages appended and deduplicated",
			configured:   "packages:\n  - curl\n  - qemu-guest-agent\n  - curl\n  - [squid, 6.13-2]\n",
			installAgent: true,
			want: `#cloud-config
packages:
  - qemu-guest-agent
  - curl
  - [squid, 6.13-2]
runcmd:
  - systemctl enable --now qemu-guest-agent
` + keepDoc,
		},
		{
			name:         "configured runcmd kept, ours after",
			configured:   "runcmd:\n  - [sh, -c, echo one]\n  - echo two\n",
			installAgent: true,
			want: `#cloud-config
runcmd:
  - [sh, -c, echo one]
  - echo two
  - systemctl enable --now qemu-guest-agent
packages:
  - qemu-guest-agent
` + keepDoc,
		},
		{
			name:         "null packages and runcmd become lists",
			configured:   "packages:\nruncmd: ~\n",
			installAgent: true,
			want:         agentDoc,
		},
		{
			name:         "other keys kept in their order",
			configured:   "#cloud-config\ntimezone: UTC\npackage_update: true\nwrite_files:\n  - path: /etc/motd\n    content: |\n      hello\n",
			installAgent: true,
			want: `#cloud-config
timezone: UTC
package_update: true
write_files:
  - path: /etc/motd
    content: |
      hello
packages:
  - qemu-guest-agent
runcmd:
  - systemctl enable --now qemu-guest-agent
` + keepDoc,
		},
		{
			name:       "a configured manual_cache_clean is kept",
			configured: "manual_cache_clean: false\n",
			want:       "#cloud-config\nmanual_cache_clean: false\nbootcmd:\n" + reseedBootcmd,
		},
		{
			name:       "configured bootcmd kept, ours after",
			configured: "bootcmd:\n  - echo early\n",
			want:       "#cloud-config\nbootcmd:\n  - echo early\n" + reseedBootcmd + "manual_cache_clean: true\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := VendorData(tt.configured, tt.installAgent)

			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestVendorData_refusesWithoutEchoingContent(t *testing.T) {
	tests := []struct {
		name         string
		configured   string
		installAgent bool
		wantMsg      string
	}{
		{"sequence", "- " + secret + "\n", false, "nocloud: invalid vendor-data: not a YAML mapping"},
		{"scalar", secret, false, "nocloud: invalid vendor-data: not a YAML mapping"},
		{"broken YAML", "a: [" + secret, false, "nocloud: invalid vendor-data: not valid YAML"},
		{"packages not a list", "packages: " + secret + "\n", true, "nocloud: invalid vendor-data: packages is not a list"},
		{"runcmd not a list", "runcmd: {x: " + secret + "}\n", true, "nocloud: invalid vendor-data: runcmd is not a list"},
		{"bootcmd not a list", "bootcmd: " + secret + "\n", false, "nocloud: invalid vendor-data: bootcmd is not a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := VendorData(tt.configured, tt.installAgent)

			require.ErrorIs(t, err, ErrInvalidVendorData)
			assert.EqualError(t, err, tt.wantMsg)
		})
	}
}
