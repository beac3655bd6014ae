package testserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/pveflow/pveflow/starter"
)

// DialFrontends is a client of namespace, logging to logger (nil: the SDK's default), made as
// the worker and the CLI make theirs: TEMPORAL_ADDRESS lists the frontends at addresses, as make
// cluster sets it, so starter.ClientOptions spreads the calls over them and the client goes on
// with the others when one dies. No user's client config file is read. It closes when t ends.
func DialFrontends(t testing.TB, namespace string, logger log.Logger, addresses ...string) client.Client {
	t.Helper()
	env := map[string]string{"TEMPORAL_ADDRESS": strings.Join(addresses, ","), "TEMPORAL_NAMESPACE": namespace,
		"TEMPORAL_CONFIG_FILE": filepath.Join(t.TempDir(), "none.toml")}
	require.NoError(t, os.WriteFile(env["TEMPORAL_CONFIG_FILE"], nil, 0o600))
	opts, err := starter.ClientOptions(func(name string) string { return env[name] })
	require.NoError(t, err)
	if logger != nil {
		opts.Logger = logger
	}
	c, err := starter.Dial(t.Context(), opts)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}
