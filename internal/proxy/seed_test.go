package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSeedVolID(t *testing.T) {
	assert.Equal(t, "proxy-qpm6fsvtzhu6lvk3-seed.iso", SeedISOName("proxy-qpm6fsvtzhu6lvk3"))
	assert.Equal(t, "local:iso/proxy-qpm6fsvtzhu6lvk3-seed.iso", SeedVolID("local", "proxy-qpm6fsvtzhu6lvk3"))
}
