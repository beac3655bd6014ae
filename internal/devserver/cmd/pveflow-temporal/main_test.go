package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSearchAttributes_setAddsOrReplaces(t *testing.T) {
	a := searchAttributes{"ProxyUID": "Keyword"}

	require.NoError(t, a.Set("Region=Keyword"))
	require.NoError(t, a.Set("ProxyUID=Text"))

	assert.Equal(t, searchAttributes{"ProxyUID": "Text", "Region": "Keyword"}, a)
	assert.Equal(t, "ProxyUID=Text,Region=Keyword", a.String())
}

func TestSearchAttributes_setRefusesMalformed(t *testing.T) {
	for _, arg := range []string{"ProxyUID", "=Keyword", "ProxyUID=", ""} {
		t.Run(arg, func(t *testing.T) {
			assert.Error(t, searchAttributes{}.Set(arg))
		})
	}
}
