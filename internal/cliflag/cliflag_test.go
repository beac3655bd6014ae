package cliflag

import (
	"io"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
)

func TestExplain(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"a long flag with one dash", []string{"-config", "x.yaml"}, "-config: long flags take two dashes: --config"},
		{"a long flag with one dash and a value", []string{"-config=x.yaml"}, "-config: long flags take two dashes: --config"},
		{"an unknown word with one dash", []string{"-bogus"}, "unknown flag: -bogus"},
		{"an unknown word with two dashes", []string{"--bogus"}, "unknown flag: --bogus"},
		{"an unknown letter", []string{"-x"}, "unknown shorthand flag: 'x' in -x"},
		{"a missing value", []string{"--config"}, "flag needs an argument: --config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.String("config", "", "configuration file")
			fs.BoolP("help", "h", false, "help")

			err := Explain(fs, fs.Parse(tt.args))

			assert.EqualError(t, err, tt.want)
		})
	}
}
