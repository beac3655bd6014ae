package proxy

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
)

func TestNameFromUID_table(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	tests := []struct {
		uid  string
		want string // pinned: a name is an identity, it must never change
	}{
		{uid: "3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c00", want: "proxy-qpm6fsvtzhu6lvk3"},
		{uid: "", want: "proxy-4oymiquy7qobjgx3"},
		{uid: "3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c01"},
		{uid: "Ünïcode UID with spaces"},
		{uid: strings.Repeat("x", 1000)},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		name := NameFromUID(tt.uid)
		if tt.want != "" {
			assert.Equal(t, tt.want, name)
		}
		assert.Equal(t, name, NameFromUID(tt.uid), "deterministic")
		assert.Len(t, name, 22)
		assert.True(t, strings.HasPrefix(name, "proxy-"), name)
		assert.Regexp(t, label, name)
		assert.NotContains(t, seen, name, "UIDs %q and %q share a name", seen[name], tt.uid)
		seen[name] = tt.uid
	}
}

func TestFormatProviderID_roundTrip(t *testing.T) {
	tests := []struct {
		vmid int
		name string
	}{
		{vmid: 100, name: "a"},
		{vmid: 183951, name: NameFromUID("3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c00")},
		{vmid: 999999999, name: strings.Repeat("a", 63)},
	}
	for _, tt := range tests {
		id := FormatProviderID(tt.vmid, tt.name)
		vmid, name, err := ParseProviderID(id)
		require.NoError(t, err, id)
		assert.Equal(t, tt.vmid, vmid, id)
		assert.Equal(t, tt.name, name, id)
	}
	assert.Equal(t, "vms/183951/proxy-qpm6fsvtzhu6lvk3", FormatProviderID(183951, "proxy-qpm6fsvtzhu6lvk3"))
}

func TestProviderID_everyAcceptedNameRoundTrips(t *testing.T) {
	generated := NameFromUID("3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c00")
	names := []string{"Egress-EU-1", "egress.eu-1", "egress_1", "a", "A", "-a", "a-", strings.Repeat("a", 63), strings.Repeat("a", 64), generated}
	// Random names of a label's characters, and of those and the ones PVE or a hostname take
	// that a label does not (a dot, an underscore), and some nothing takes.
	alphabets := [][]rune{[]rune("aZ9-"), []rune("aZ9-._/ é")}
	rng := rand.New(rand.NewPCG(19, 11))
	for range 20000 {
		alphabet := alphabets[rng.IntN(len(alphabets))]
		name := make([]rune, rng.IntN(66))
		for i := range name {
			name[i] = alphabet[rng.IntN(len(alphabet))]
		}
		names = append(names, string(name))
	}
	accepted := 0
	for _, name := range names {
		if ValidateName(name) != nil {
			continue
		}
		accepted++
		id := FormatProviderID(183951, name)
		vmid, got, err := ParseProviderID(id)
		if assert.NoError(t, err, "accepted name %q", name) {
			assert.Equal(t, 183951, vmid, id)
			assert.Equal(t, name, got, id)
		}
	}
	assert.Greater(t, accepted, 1000, "the random names hold enough accepted ones to tell")
	for _, name := range []string{"Egress-EU-1", generated} {
		assert.NoError(t, ValidateName(name), name)
	}
	assert.ErrorContains(t, ValidateName("egress.eu-1"), `name "egress.eu-1" is not a DNS label`)
}

func TestParseProviderID_malformed(t *testing.T) {
	tests := []struct {
		name string
		id   string
	}{
		{"empty", ""},
		{"prefix only", "vms"},
		{"two parts", "vms/123"},
		{"four parts", "vms/123/proxy-a/b"},
		{"leading slash", "/vms/123/proxy-a"},
		{"other prefix", "vm/123/proxy-a"},
		{"upper-case prefix", "VMS/123/proxy-a"},
		{"vmid with sign", "vms/+123/proxy-a"},
		{"negative vmid", "vms/-123/proxy-a"},
		{"vmid with leading zero", "vms/0123/proxy-a"},
		{"vmid below 100", "vms/99/proxy-a"},
		{"vmid above 999999999", "vms/1000000000/proxy-a"},
		{"vmid not a number", "vms/abc/proxy-a"},
		{"empty name", "vms/123/"},
		{"name starting with a hyphen", "vms/123/-proxy"},
		{"name ending with a hyphen", "vms/123/proxy-"},
		{"name with an underscore", "vms/123/proxy_a"},
		{"name with a dot", "vms/123/proxy.example"},
		{"name longer than 63", "vms/123/" + strings.Repeat("a", 64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseProviderID(tt.id)
			require.Error(t, err)
			assert.Contains(t, err.Error(), `provider id "`+tt.id+`"`)
		})
	}
}

func TestVMIDFor_deterministicAndInRange(t *testing.T) {
	uid := "3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c00"
	def := config.VMIDRange{Min: 100000, Max: 199999}
	// Pinned: a VMID once allocated must be found again by the same UID after an upgrade.
	assert.Equal(t, 183951, VMIDFor(uid, def, 0))

	ranges := []config.VMIDRange{def, {Min: 100, Max: 101}, {Min: 100, Max: 999999999}, {Min: 5000, Max: 5009}}
	for _, r := range ranges {
		for i := range 200 {
			uid := NameFromUID(strings.Repeat("u", i))
			for _, attempt := range []int{0, 1, 7, 1000003} {
				got := VMIDFor(uid, r, attempt)
				assert.Equal(t, got, VMIDFor(uid, r, attempt))
				assert.GreaterOrEqual(t, got, r.Min)
				assert.LessOrEqual(t, got, r.Max)
			}
		}
	}
}

func TestVMIDFor_probesForwardAndWraps(t *testing.T) {
	r := config.VMIDRange{Min: 5000, Max: 5009}
	const span = 10
	for _, uid := range []string{"a", "b", "c", "d", "e"} {
		home := VMIDFor(uid, r, 0)
		visited := map[int]bool{}
		for attempt := range span {
			got := VMIDFor(uid, r, attempt)
			want := home + attempt
			if want > r.Max {
				want -= span
			}
			assert.Equal(t, want, got, "uid %q attempt %d", uid, attempt)
			visited[got] = true
		}
		assert.Len(t, visited, span, "probing visits every VMID of the range once")
		assert.Equal(t, home, VMIDFor(uid, r, span), "probing wraps back home")
	}
}
