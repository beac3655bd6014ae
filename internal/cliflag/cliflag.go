// Package cliflag words the command-line mistakes that pflag reports, for pveflow's programs:
// the CLI and the worker.
package cliflag

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// Explain rewrites pflag's error for an argument of one dash and several letters. pflag reads
// "-config" as the shorthands c, o, n, f, i, g, and its error, "unknown shorthand flag: 'c' in
// -config", names a letter nobody typed. Explain names the argument instead, and the flag meant
// when fs has one of that name: "-config: long flags take two dashes: --config". Any other
// error is returned as it is.
func Explain(fs *pflag.FlagSet, err error) error {
	var notExist *pflag.NotExistError
	if !errors.As(err, &notExist) {
		return err
	}
	arg, _, _ := strings.Cut(notExist.GetSpecifiedShortnames(), "=")
	switch {
	case len(arg) < 2:
		return err
	case fs.Lookup(arg) != nil:
		return fmt.Errorf("-%s: long flags take two dashes: --%s", arg, arg)
	}
	return fmt.Errorf("unknown flag: -%s", arg)
}
