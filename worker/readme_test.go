package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pveflow/pveflow/internal/docsection"
)

var update = flag.Bool("update", false, "write the README's list of the worker's flags instead of checking it")

// flagReference is the README's table of the worker's flags, made from their help.
func flagReference() string {
	var o options
	var b strings.Builder
	b.WriteString("| flag | variable | default | what it sets |\n| --- | --- | --- | --- |\n")
	flagSet(&o).VisitAll(func(f *pflag.Flag) {
		if actions[f.Name] {
			return
		}
		name, usage := pflag.UnquoteUsage(f)
		synopsis := "--" + f.Name
		if name != "" {
			synopsis += " " + name
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = "`" + f.DefValue + "`"
		}
		usage = strings.TrimSuffix(usage, " ($"+flagEnv(f.Name)+")")
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", synopsis, flagEnv(f.Name), def, usage)
	})
	return b.String()
}

func TestREADME_workerFlagsAreTheWorkersHelp(t *testing.T) {
	docsection.Check(t, filepath.Join("..", "README.md"), "worker flags",
		"go test ./worker -run TestREADME -update", flagReference(), *update)
}
