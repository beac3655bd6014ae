package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const commit = "9f1c2ab34d5e6f708192a3b4c5d6e7f8091a2b3c"

// build is the debug.BuildInfo of a build of module version with VCS settings.
func build(version string, settings map[string]string) *debug.BuildInfo {
	info := &debug.BuildInfo{Main: debug.Module{Path: "github.com/pveflow/pveflow", Version: version}, GoVersion: "go1.26.8",
		Deps: []*debug.Module{{Path: "go.temporal.io/sdk", Version: "v1.50.0"}}}
	for k, v := range settings {
		info.Settings = append(info.Settings, debug.BuildSetting{Key: k, Value: v})
	}
	return info
}

func TestInfo_ID(t *testing.T) {
	tests := []struct {
		name     string
		version  string
		settings map[string]string
		want     string
	}{
		{"a clean checkout", "(devel)", map[string]string{"vcs.revision": commit, "vcs.modified": "false"}, "9f1c2ab34d5e"},
		{"uncommitted changes", "(devel)", map[string]string{"vcs.revision": commit, "vcs.modified": "true"}, "9f1c2ab34d5e-dirty"},
		{"a module version", "v1.4.0", nil, "v1.4.0"},
		{"the revision wins over the version", "v1.4.0", map[string]string{"vcs.revision": "abc"}, "abc"},
		{"nothing to go by", "(devel)", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, of(build(tt.version, tt.settings), stamp{}).ID())
		})
	}
}

func TestOf_makesStampWinsOverGoBuildsAndNamesTheVersion(t *testing.T) {
	v := of(build("(devel)", nil), stamp{revision: commit, revisionTime: "2026-12-06T23:00:00Z", modified: "true"})

	assert.Equal(t, Info{Module: "github.com/pveflow/pveflow", Version: "9f1c2ab34d5e-dirty", Revision: commit,
		RevisionTime: "2026-12-06T23:00:00Z", Modified: true, GoVersion: "go1.26.8", TemporalSDK: "v1.50.0"}, v)
}

func TestOf_aReleaseMakeNamedIsTheVersion(t *testing.T) {
	v := of(build("(devel)", nil), stamp{revision: commit, modified: "false", release: "1.0.0"})

	assert.Equal(t, "1.0.0", v.Version)
	assert.Equal(t, "9f1c2ab34d5e", v.ID(), "a deployment's build ID stays the commit")
}

func TestOf_aPlainBuildIsDevel(t *testing.T) {
	assert.Equal(t, "(devel)", of(build("(devel)", nil), stamp{}).Version)
}

func TestInfo_Write(t *testing.T) {
	var b strings.Builder

	require.NoError(t, of(build("(devel)", nil), stamp{revision: commit, revisionTime: "2026-12-06T23:00:00Z", modified: "false"}).Write(&b, "worker"))

	assert.Equal(t, "worker        github.com/pveflow/pveflow 9f1c2ab34d5e\n"+
		"revision      "+commit+" 2026-12-06T23:00:00Z\n"+
		"go            go1.26.8\n"+
		"temporal sdk  v1.50.0\n", b.String())
}

// makeBuildLdflags is the -ldflags of make build's go build line, as make -n prints it.
func makeBuildLdflags(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("make", "-s", "-n", "-C", filepath.Join("..", ".."), "build").CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`(?m) build -ldflags '([^']*)' -o `).FindSubmatch(out)
	require.NotNil(t, m, "make build's go build line passes -ldflags:\n%s", out)
	return string(m[1])
}

func TestMakeBuild_pveflowVersionNamesTheCommit(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "pveflow")
	// -buildvcs=false, as this machine's go env has it: the commit comes from make's stamp.
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", makeBuildLdflags(t), "-o", bin, "./starter/cmd/pveflow")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	version, err := exec.Command(bin, "version").Output()

	require.NoError(t, err)
	assert.Regexp(t, `(?m)^revision +`+strings.TrimSpace(string(head))+` \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`, string(version))
	assert.NotContains(t, string(version), "(devel)")
	// On a release's commit, the release; after it, git describe's name; before any, the commit.
	if described, err := exec.Command("git", "describe", "--tags", "--match", "v[0-9]*", "--dirty").Output(); err == nil {
		assert.Regexp(t, `(?m)^pveflow +github.com/pveflow/pveflow `+regexp.QuoteMeta(strings.TrimPrefix(strings.TrimSpace(string(described)), "v"))+`$`, string(version))
	}
}

// releaseHeading is a release's heading in CHANGELOG.md (Keep a Changelog): its version and date.
var releaseHeading = regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d\d-\d\d)$`)

func TestChangelog_namesEveryReleaseWithItsDateAndLink(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "CHANGELOG.md"))
	require.NoError(t, err)
	changelog := string(data)

	assert.Contains(t, changelog, "\n## [Unreleased]\n", "a section for what comes next")
	releases := releaseHeading.FindAllStringSubmatch(changelog, -1)
	require.NotEmpty(t, releases)
	for i, r := range releases {
		_, err := time.Parse(time.DateOnly, r[2])
		assert.NoError(t, err, "release %s", r[1])
		assert.Contains(t, changelog, "\n["+r[1]+"]: https://github.com/pveflow/pveflow/releases/tag/v"+r[1]+"\n", "release %s has its link", r[1])
		if i > 0 {
			assert.Greater(t, releases[i-1][2], r[2], "the newest release first")
		}
	}
}

func TestChangelog_hasTheLatestReleaseTag(t *testing.T) {
	tag, err := exec.Command("git", "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", "HEAD").Output()
	if err != nil {
		t.Skip("no release tag reaches HEAD: a checkout without tags")
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "CHANGELOG.md"))
	require.NoError(t, err)

	assert.Regexp(t, `(?m)^## \[`+regexp.QuoteMeta(strings.TrimPrefix(strings.TrimSpace(string(tag)), "v"))+`\] - \d{4}-\d\d-\d\d$`, string(data))
}
