package workflows_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/workflows"
)

func TestProxySpec_Check(t *testing.T) {
	tests := []struct {
		name     string
		change   func(*workflows.ProxySpec)
		wantKind error
		wantErr  string
	}{
		{"a valid spec", func(*workflows.ProxySpec) {}, nil, ""},
		{"user-data at the limit", func(s *workflows.ProxySpec) { s.UserData = strings.Repeat("s", workflows.MaxUserDataBytes) }, nil, ""},
		{"an invalid UID", func(s *workflows.ProxySpec) { s.UID = "-x" }, workflows.ErrInvalidUID, "create proxy: "},
		{"a name that is not a DNS label", func(s *workflows.ProxySpec) { s.Name = "Proxy_1" }, workflows.ErrInvalidName, "create proxy " + uid + `: name "Proxy_1"`},
		{"an IPv4 without its prefix length", func(s *workflows.ProxySpec) { s.Addresses.IPv4 = "192.0.2.10" }, workflows.ErrInvalidNetwork, "create proxy " + uid + ": addresses: "},
		{"a VLAN out of range", func(s *workflows.ProxySpec) { s.NICs = []config.NIC{{Bridge: "vmbr0", VLAN: 4095}} }, workflows.ErrInvalidNetwork, "create proxy " + uid + ": "},
		{"an address pool beside static addresses", func(s *workflows.ProxySpec) {
			s.AddressPool, s.Addresses = "edge", proxy.Addresses{IPv4: "192.0.2.10/24"}
		}, workflows.ErrInvalidNetwork, "create proxy " + uid + `: address pool "edge" and static addresses are both given: choose one`},
		{"user-data a byte over the limit", func(s *workflows.ProxySpec) { s.UserData = strings.Repeat("s", workflows.MaxUserDataBytes+1) },
			workflows.ErrUserDataTooLarge, "create proxy " + uid + ": user-data is 65537 bytes, more than the limit of 65536 (workflows.MaxUserDataBytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := createInput()
			tt.change(&in)

			err := in.Check()

			if tt.wantKind == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.wantKind)
			assert.True(t, strings.HasPrefix(err.Error(), tt.wantErr), "%q starts with %q", err, tt.wantErr)
			var specErr *workflows.SpecError
			assert.True(t, errors.As(err, &specErr))
		})
	}
}

func TestProxySpec_CheckFor(t *testing.T) {
	cfg := testConfig(t).Proxmox
	tests := []struct {
		name     string
		change   func(*workflows.ProxySpec)
		wantKind error
		wantIn   string
	}{
		{"a spec the configuration serves", func(*workflows.ProxySpec) {}, nil, ""},
		{"what Check refuses", func(s *workflows.ProxySpec) { s.Name = "Proxy_1" }, workflows.ErrInvalidName, "Proxy_1"},
		{"an image the configuration does not have", func(s *workflows.ProxySpec) { s.Image = "plan9" }, workflows.ErrNotConfigured, "plan9"},
		{"a machine type the configuration does not have", func(s *workflows.ProxySpec) { s.MachineType = "huge" }, workflows.ErrNotConfigured, "huge"},
		{"an address pool the configuration does not have", func(s *workflows.ProxySpec) { s.AddressPool = "nowhere" }, workflows.ErrNotConfigured, `address pool "nowhere" is not configured`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := createInput()
			tt.change(&in)

			err := in.CheckFor(cfg)

			if tt.wantKind == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, tt.wantKind)
			assert.ErrorContains(t, err, "create proxy "+uid+": ")
			assert.ErrorContains(t, err, tt.wantIn)
		})
	}
}

func TestChangeRequest_Check(t *testing.T) {
	big := strings.Repeat("x", workflows.MaxUserDataBytes+1)
	small := "#cloud-config\n"
	tests := []struct {
		name     string
		req      workflows.ChangeRequest
		wantKind error
	}{
		{"a new machine type", workflows.ChangeRequest{UID: uid, MachineType: "large"}, nil},
		{"new user-data", workflows.ChangeRequest{UID: uid, UserData: &small}, nil},
		{"an invalid UID", workflows.ChangeRequest{UID: "", Image: "debian13"}, workflows.ErrInvalidUID},
		{"nothing to change", workflows.ChangeRequest{UID: uid}, workflows.ErrNothingToChange},
		{"user-data over the limit", workflows.ChangeRequest{UID: uid, UserData: &big}, workflows.ErrUserDataTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Check()

			if tt.wantKind == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, tt.wantKind)
			assert.True(t, strings.HasPrefix(err.Error(), "change proxy"), err.Error())
		})
	}
}
