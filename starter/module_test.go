package starter_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// programOnly are the packages, by import path prefix, that only pveflow's programs (the worker,
// the pveflow CLI) need: the OpenTelemetry SDK and exporters, the Prometheus client, the traced
// HTTP transport. Package telemetry/export holds what uses them.
var programOnly = []string{
	"github.com/prometheus/",
	"go.opentelemetry.io/otel/exporters/",
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/contrib/",
}

// TestLibraryPackagesPullNoExporter keeps the import graph of the packages a program imports to
// drive pveflow free of what only pveflow's programs need, as README.md promises.
func TestLibraryPackagesPullNoExporter(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./starter", "./workflows", "./activities")
	cmd.Dir = ".."
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps")

	var pulled []string
	for pkg := range strings.FieldsSeq(string(out)) {
		for _, prefix := range programOnly {
			if strings.HasPrefix(pkg, prefix) {
				pulled = append(pulled, pkg)
			}
		}
	}
	assert.Empty(t, pulled, "imported by starter, workflows or activities: move its user to internal/telemetry/export")
}

// consumerClientGo is the client-go a Kubernetes controller importing the starter might pin:
// older than the one the Temporal server's dependency graph would raise it to.
const consumerClientGo = "v0.31.0"

// TestImportingStarterLeavesAConsumersDependenciesAlone builds a throwaway module, as an
// operator's controller would be, that imports the starter, the workflows and the activities
// beside client-go at an older minor, and tidies it with the Go module proxy.
func TestImportingStarterLeavesAConsumersDependenciesAlone(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write("go.mod", "module example.com/proxycontroller\n\ngo 1.26.0\n\n"+
		"require (\n\tgithub.com/pveflow/pveflow v0.0.0\n\tk8s.io/client-go "+consumerClientGo+"\n)\n\n"+
		"replace github.com/pveflow/pveflow => "+root+"\n")
	write("controller.go", `package proxycontroller

import (
	_ "github.com/pveflow/pveflow/activities"
	_ "github.com/pveflow/pveflow/starter"
	_ "github.com/pveflow/pveflow/workflows"
	_ "k8s.io/client-go/util/cert"
)
`)
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}

	goCmd("mod", "tidy")

	assert.Equal(t, "k8s.io/client-go "+consumerClientGo, strings.TrimSpace(goCmd("list", "-m", "k8s.io/client-go")))
	graph := goCmd("mod", "graph")
	assert.NotContains(t, graph, "go.temporal.io/server")
	assert.NotContains(t, graph, "github.com/temporalio/ui-server")
	goMod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(goMod), "\ngo 1.26.0\n", "pveflow asks no newer Go than its SDK does")
}
