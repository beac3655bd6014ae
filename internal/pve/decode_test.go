package pve

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type decodeTarget struct {
	Count    int64             `json:"count"`
	Small    int8              `json:"small"`
	Ratio    float64           `json:"ratio"`
	On       bool              `json:"on"`
	Text     string            `json:"text"`
	Items    []decodeItem      `json:"items"`
	Labels   map[string]string `json:"labels"`
	Skipped  string            `json:"-"`
	Untagged string
}

type decodeItem struct {
	Name string `json:"name"`
}

func TestDecodeData_toleratesPerlScalars(t *testing.T) {
	tests := []struct {
		name string
		data string
		want decodeTarget
	}{
		{"numbers", `{"count":42,"ratio":0.25}`, decodeTarget{Count: 42, Ratio: 0.25}},
		{"numbers as strings", `{"count":"42","ratio":"0.25"}`, decodeTarget{Count: 42, Ratio: 0.25}},
		{"integer with exponent", `{"count":1e3}`, decodeTarget{Count: 1000}},
		{"fraction into an integer truncates", `{"count":"2.9"}`, decodeTarget{Count: 2}},
		{"boolean true", `{"on":true}`, decodeTarget{On: true}},
		{"boolean 1", `{"on":1}`, decodeTarget{On: true}},
		{"boolean \"1\"", `{"on":"1"}`, decodeTarget{On: true}},
		{"boolean 0", `{"on":0}`, decodeTarget{}},
		{"Perl's empty false", `{"on":""}`, decodeTarget{}},
		{"number into a string", `{"text":3.5}`, decodeTarget{Text: "3.5"}},
		{"boolean into a string", `{"text":true}`, decodeTarget{Text: "1"}},
		{"null leaves the zero value", `{"count":null,"text":null,"items":null}`, decodeTarget{}},
		{"unknown keys ignored", `{"other":{"deep":[1,2]},"text":"x"}`, decodeTarget{Text: "x"}},
		{"dash tag skipped", `{"-":"x","Skipped":"y"}`, decodeTarget{}},
		{"untagged field by its name", `{"Untagged":"x"}`, decodeTarget{Untagged: "x"}},
		{"nested", `{"items":[{"name":"a"},{"name":"b"}],"labels":{"k":1,"n":null}}`,
			decodeTarget{Items: []decodeItem{{"a"}, {"b"}}, Labels: map[string]string{"k": "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got decodeTarget
			require.NoError(t, decodeData([]byte(tt.data), &got))
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeData_rendersVMConfigScalarsAsStrings(t *testing.T) {
	var got VMConfig

	err := decodeData([]byte(`{"cores":2,"memory":"2048","agent":1,"cpulimit":1.5,"big":1.5e21,
		"onboot":true,"protection":false,"balloon":0,"name":"proxy-1"}`), &got)

	require.NoError(t, err)
	assert.Equal(t, VMConfig{
		"cores":      "2",
		"memory":     "2048",
		"agent":      "1",
		"cpulimit":   "1.5",
		"big":        "1500000000000000000000",
		"onboot":     "1",
		"protection": "0",
		"balloon":    "0",
		"name":       "proxy-1",
	}, got)
}

func TestDecodeData_mismatchesNameTheField(t *testing.T) {
	tests := []struct {
		name string
		data string
		want string
	}{
		{"text into an integer", `{"count":"abc"}`, `data.count: want an integer, got "abc"`},
		{"integer overflow", `{"small":300}`, `data.small: want an integer, got 300`},
		{"two into a boolean", `{"on":2}`, `data.on: want a boolean, got 2`},
		{"word into a boolean", `{"on":"yes"}`, `data.on: want a boolean, got "yes"`},
		{"object into a string", `{"text":{"a":1}}`, `data.text: want a scalar, got an object`},
		{"string into a list", `{"items":"a"}`, `data.items: want an array, got "a"`},
		{"nested field", `{"items":[{"name":[1]}]}`, `data.items[0].name: want a scalar, got an array`},
		{"long string is not quoted", `{"count":"` + strings.Repeat("x", 40) + `"}`, `data.count: want an integer, got a string of 40 bytes`},
		{"not an object", `[1]`, `data: want an object, got an array`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got decodeTarget
			assert.EqualError(t, decodeData([]byte(tt.data), &got), tt.want)
		})
	}
}
