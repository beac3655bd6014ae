// Package compose holds the files docker-compose.yaml mounts into its containers, and tests
// that keep that file, what README.md says of it, and pveflow's code in step. No Docker engine
// runs where the tests do: `make compose-check` validates the file with docker-compose config,
// and these tests check what validation cannot.
package compose

import (
	"bufio"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/pveflow/pveflow/workflows/core"
)

const (
	composePath = "../docker-compose.yaml"
	readmePath  = "../README.md"
	// readmeSection is the README's heading over the table of compose services.
	readmeSection = "## Docker Compose"
)

type composeService struct {
	Image    string   `yaml:"image"`
	Build    any      `yaml:"build"`
	Ports    []string `yaml:"ports"`
	Profiles []string `yaml:"profiles"`
	Volumes  []string `yaml:"volumes"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var f composeFile
	readYAML(t, composePath, &f)
	require.NotEmpty(t, f.Services)
	return f
}

// hostAddresses are the host addresses a service publishes: "127.0.0.1:8080" of
// "127.0.0.1:8080:8080". Only that form is allowed: a port without an address would be open to
// every network the host is on.
func hostAddresses(t *testing.T, name string, s composeService) []string {
	t.Helper()
	var addrs []string
	for _, p := range s.Ports {
		i := strings.LastIndex(p, ":")
		require.True(t, i > 0 && strings.HasPrefix(p, "127.0.0.1:"),
			"service %s publishes %q: want 127.0.0.1:HOST_PORT:CONTAINER_PORT", name, p)
		addrs = append(addrs, p[:i])
	}
	slices.Sort(addrs)
	return addrs
}

// readmeService is one row of the README's table of compose services.
type readmeService struct {
	profile string
	host    []string
}

type readme struct {
	services map[string]readmeService
	volumes  []string
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	hostAddr   = regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+:\d+$`)
)

// loadReadme reads the compose section of README.md: its table, | `service` | `profile` |
// what it runs | `host:port`... |, and its paragraph "Volumes: `name` ...".
func loadReadme(t *testing.T) readme {
	t.Helper()
	f, err := os.Open(readmePath)
	require.NoError(t, err)
	defer f.Close()
	r := readme{services: map[string]readmeService{}}
	in, inVolumes := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == readmeSection
			continue
		}
		if !in {
			continue
		}
		inVolumes = strings.HasPrefix(line, "Volumes:") || inVolumes && line != ""
		switch {
		case strings.HasPrefix(line, "| `"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			require.Len(t, cells, 4, "README compose table row %q", line)
			name := firstBackticked(cells[0])
			var s readmeService
			s.profile = firstBackticked(cells[1])
			for _, m := range backticked.FindAllStringSubmatch(cells[3], -1) {
				if hostAddr.MatchString(m[1]) {
					s.host = append(s.host, m[1])
				}
			}
			slices.Sort(s.host)
			r.services[name] = s
		case inVolumes:
			for _, m := range backticked.FindAllStringSubmatch(line, -1) {
				r.volumes = append(r.volumes, m[1])
			}
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, r.services, "README.md has no table of services under %q", readmeSection)
	return r
}

func firstBackticked(s string) string {
	if m := backticked.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

func TestReadme_namesEveryComposeServiceAndNoOther(t *testing.T) {
	c, r := loadCompose(t), loadReadme(t)
	assert.ElementsMatch(t, slices.Collect(maps.Keys(c.Services)), slices.Collect(maps.Keys(r.services)))
}

func TestReadme_givesEachServicesProfileAndHostPorts(t *testing.T) {
	c, r := loadCompose(t), loadReadme(t)
	for name, doc := range r.services {
		s, ok := c.Services[name]
		if !ok {
			continue // reported by TestReadme_namesEveryComposeServiceAndNoOther
		}
		assert.Equal(t, hostAddresses(t, name, s), doc.host, "host addresses of %s", name)
		assert.Equal(t, strings.Join(s.Profiles, ","), doc.profile, "profile of %s", name)
	}
}

func TestReadme_namesEveryComposeVolumeAndNoOther(t *testing.T) {
	c, r := loadCompose(t), loadReadme(t)
	assert.ElementsMatch(t, slices.Collect(maps.Keys(c.Volumes)), r.volumes)
}

// Every image pulled from a registry must be cited in the file's header: the tag of each is
// one Temporal publishes, and the header says where.
func TestComposeFile_citesEveryImageTagItPulls(t *testing.T) {
	c := loadCompose(t)
	data, err := os.ReadFile(composePath)
	require.NoError(t, err)
	var header strings.Builder
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "#") {
			break
		}
		header.WriteString(line)
	}
	for name, s := range c.Services {
		if s.Build != nil {
			continue
		}
		require.Contains(t, s.Image, ":", "service %s pins no tag", name)
		assert.Contains(t, header.String(), s.Image, "service %s: its image is not cited in the header", name)
	}
}

// operatorDir is the directory of the operator's files, which is never committed.
const operatorDir = "./deploy"

// Every file or directory of the repository that a service mounts exists: docker-compose
// config does not look, and Docker would mount an empty directory in the place of a missing one.
func TestComposeFile_mountsOnlyFilesTheRepositoryHolds(t *testing.T) {
	c := loadCompose(t)
	mounts := 0
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			source, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(source, "./") || source == operatorDir {
				continue // a named volume, or the operator's files
			}
			mounts++
			_, err := os.Stat(filepath.Join("..", source))
			assert.NoError(t, err, "service %s mounts %s", name, source)
		}
	}
	assert.NotZero(t, mounts, "no service mounts a file of the repository")
}

// Grafana shows the dashboard only when the provider's path is where the dashboards are
// mounted, and each panel's data only when it names the provisioned datasource: neither fails
// Grafana's start. (worker/dashboard_test.go checks the panels' queries.)
func TestGrafana_findsTheDashboardsAndTheirDatasource(t *testing.T) {
	var providers struct {
		Providers []struct {
			Options struct{ Path string }
		}
	}
	readYAML(t, filepath.Join("grafana", "dashboards.yaml"), &providers)
	require.Len(t, providers.Providers, 1)
	assert.Contains(t, loadCompose(t).Services["grafana"].Volumes,
		"./compose/grafana/dashboards:"+providers.Providers[0].Options.Path+":ro", "the dashboards' mount")

	var datasources struct{ Datasources []struct{ Name string } }
	readYAML(t, filepath.Join("grafana", "datasource.yaml"), &datasources)
	require.Len(t, datasources.Datasources, 1)
	data, err := os.ReadFile(filepath.Join("grafana", "dashboards", "pveflow.json"))
	require.NoError(t, err)
	var dashboard struct {
		Panels []struct{ Type, Title, Datasource string }
	}
	require.NoError(t, json.Unmarshal(data, &dashboard))
	for _, p := range dashboard.Panels {
		if p.Type != "row" {
			assert.Equal(t, datasources.Datasources[0].Name, p.Datasource, "datasource of panel %q", p.Title)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, v), path)
}

var registerLine = regexp.MustCompile(`(?m)^register (\S+) (\S+)$`)

func TestNamespaceScript_registersEverySearchAttributeOfTheWorkflows(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("temporal", "namespace.sh"))
	require.NoError(t, err)
	registered := map[string]string{}
	for _, m := range registerLine.FindAllStringSubmatch(string(data), -1) {
		registered[m[1]] = m[2]
	}
	assert.Equal(t, core.SearchAttributes, registered)
}
