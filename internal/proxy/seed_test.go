package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSeedVolID(t *testing.T) {
	assert.Equal(t, "proxy-qpm6fsvtzhu6lvk3-seed.iso", SeedISOName("proxy-qpm6fsvtzhu6lvk3"))
	assert.Equal(t, "local:iso/proxy-qpm6fsvtzhu6lvk3-seed.iso", SeedVolID("local", "proxy-qpm6fsvtzhu6lvk3"))
}

func TestSeedISOOwner(t *testing.T) {
	name := NameFromUID("0f5b1c9e-4a7d-4e8b-9a51-7c2e3d4f5a60")
	tests := []struct {
		volid string
		owner string
		ok    bool
	}{
		{SeedVolID("local", name), name, true},
		{SeedVolID("cephfs-iso", name), name, true},
		{SeedVolID("local", "my-own-name"), "", false},
		{"local:iso/debian-13-netinst.iso", "", false},
		{"local:iso/" + name + ".iso", "", false},
		{"local:iso/PROXY-QPM6FSVTZHU6LVK3-seed.iso", "", false},
		{"local:vztmpl/" + SeedISOName(name), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.volid, func(t *testing.T) {
			owner, ok := SeedISOOwner(tt.volid)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.owner, owner)
		})
	}
}
