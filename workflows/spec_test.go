package workflows_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

func TestProxySpec_Check(t *testing.T) {
	tests := []struct {
		name     string
		change   func(*proxyvm.ProxySpec)
		wantKind error
		wantErr  string
	}{
		{"a valid spec", func(*proxyvm.ProxySpec) {}, nil, ""},
		{"user-data at the limit", func(s *proxyvm.ProxySpec) { s.UserData = strings.Repeat("s", proxyvm.MaxUserDataBytes) }, nil, ""},
		{"an invalid UID", func(s *proxyvm.ProxySpec) { s.UID = "-x" }, proxyvm.ErrInvalidUID, "create proxy: "},
		{"a name that is not a DNS label", func(s *proxyvm.ProxySpec) { s.Name = "Proxy_1" }, proxyvm.ErrInvalidName, "create proxy " + uid + `: name "Proxy_1"`},
		{"an IPv4 without its prefix length", func(s *proxyvm.ProxySpec) { s.Addresses.IPv4 = "192.0.2.10" }, proxyvm.ErrInvalidNetwork, "create proxy " + uid + ": addresses: "},
		{"a VLAN out of range", func(s *proxyvm.ProxySpec) { s.NICs = []config.NIC{{Bridge: "vmbr0", VLAN: 4095}} }, proxyvm.ErrInvalidNetwork, "create proxy " + uid + ": "},
		{"an address pool beside static addresses", func(s *proxyvm.ProxySpec) {
			s.AddressPool, s.Addresses = "edge", proxy.Addresses{IPv4: "192.0.2.10/24"}
		}, proxyvm.ErrInvalidNetwork, "create proxy " + uid + `: address pool "edge" and static addresses are both given: choose one`},
		{"user-data a byte over the limit", func(s *proxyvm.ProxySpec) { s.UserData = strings.Repeat("s", proxyvm.MaxUserDataBytes+1) },
			proxyvm.ErrUserDataTooLarge, "create proxy " + uid + ": user-data is 65537 bytes, more than the limit of 65536 (proxyvm.MaxUserDataBytes)"},
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
			var specErr *proxyvm.SpecError
			assert.True(t, errors.As(err, &specErr))
		})
	}
}

func TestProxySpec_CheckFor(t *testing.T) {
	cfg := testConfig(t).Proxmox
	tests := []struct {
		name     string
		change   func(*proxyvm.ProxySpec)
		wantKind error
		wantIn   string
	}{
		{"a spec the configuration serves", func(*proxyvm.ProxySpec) {}, nil, ""},
		{"what Check refuses", func(s *proxyvm.ProxySpec) { s.Name = "Proxy_1" }, proxyvm.ErrInvalidName, "Proxy_1"},
		{"an image the configuration does not have", func(s *proxyvm.ProxySpec) { s.Image = "plan9" }, proxyvm.ErrNotConfigured, "plan9"},
		{"a machine type the configuration does not have", func(s *proxyvm.ProxySpec) { s.MachineType = "huge" }, proxyvm.ErrNotConfigured, "huge"},
		{"an address pool the configuration does not have", func(s *proxyvm.ProxySpec) { s.AddressPool = "nowhere" }, proxyvm.ErrNotConfigured, `address pool "nowhere" is not configured`},
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
	big := strings.Repeat("x", proxyvm.MaxUserDataBytes+1)
	small := "#cloud-config\n"
	tests := []struct {
		name     string
		req      proxyvm.ChangeRequest
		wantKind error
	}{
		{"a new machine type", proxyvm.ChangeRequest{UID: uid, MachineType: "large"}, nil},
		{"new user-data", proxyvm.ChangeRequest{UID: uid, UserData: &small}, nil},
		{"an invalid UID", proxyvm.ChangeRequest{UID: "", Image: "debian13"}, proxyvm.ErrInvalidUID},
		{"nothing to change", proxyvm.ChangeRequest{UID: uid}, proxyvm.ErrNothingToChange},
		{"user-data over the limit", proxyvm.ChangeRequest{UID: uid, UserData: &big}, proxyvm.ErrUserDataTooLarge},
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
