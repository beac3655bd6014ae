package upgrade

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The builds of the worker the tests run. Each but the release is the release with deliberate
// changes, written into copies of its workflow files at test time and compiled in by go build
// -overlay, so the repository's workflows/ never holds them.
const (
	// release is the tree as it is.
	release = "release"
	// next changes a long-lived workflow behind workflow.GetVersion and a short one without:
	// the two kinds of change docs/architecture.md, *Changing a workflow*, allows.
	next = "next"
	// nextWithoutGetVersion makes next's change to the long-lived workflow without its
	// GetVersion: the change docs/architecture.md forbids, which an upgrade must catch.
	nextWithoutGetVersion = "next-without-getversion"
)

// The summaries of the timers the changes add. A timer is a command: a history that holds one
// replays only on code that makes it at that point, which is what makes these changes the kind
// that needs care. Its summary, recorded on its TimerStarted event, tells the test that the
// changed code ran a run's workflow task.
const (
	entityChangeSummary = "upgrade test: the long-lived change"
	createChangeSummary = "upgrade test: the short change"
)

// entityChangeID is the change ID of next's GetVersion. In every run that takes the new branch
// the SDK records a marker for it and upserts the TemporalChangeVersion search attribute with
// "<changeID>-<version>": how an operator finds those runs (docs/deploy.md).
const entityChangeID = "upgrade-test-entity-change"

// entityChangeVersion is the TemporalChangeVersion value of a run that took next's branch.
const entityChangeVersion = entityChangeID + "-1"

// An edit inserts text into a workflow file before its anchor, which must occur in the file
// exactly once: when the code moves, the build fails loudly rather than test a change that no
// longer sits where the test means it to.
type edit struct {
	file   string // relative to the repository's root
	anchor string
	insert string
}

// entityAnchor is where the entity's change goes: at the start of startChange, which the entity
// runs on every change request, a path that some entities took on the release before the
// upgrade and take again after it. The timer comes before the ChangeProxy child's start, so a
// history of the release's startChange holds the child's start where the changed code makes the
// timer.
const entityAnchor = "\tin := ProxySpec{UID: e.uid, Name: spec.Name,"

// createAnchor is where the create's change goes: before newCreate, whose side effect (the run's
// settings) is CreateProxy's first command.
const createAnchor = "\tc, err := newCreate(ctx, w.Config, in)\n"

var (
	// entityChange is the long-lived change as docs/architecture.md has it made: behind
	// GetVersion, which keeps the old path for a history that went down it before. The timer is
	// not waited for: the entity's loop goes on as before, and only its commands differ.
	entityChange = edit{file: "workflows/proxyvm/entity.go", anchor: entityAnchor, insert: fmt.Sprintf(`	// The upgrade test's change (internal/upgrade): a timer, behind GetVersion.
	if workflow.GetVersion(e.ctx, %q, workflow.DefaultVersion, 1) == 1 {
		workflow.NewTimerWithOptions(e.ctx, time.Millisecond, workflow.TimerOptions{Summary: %q})
	}
`, entityChangeID, entityChangeSummary)}
	// entityChangeUnguarded is the same change without its GetVersion.
	entityChangeUnguarded = edit{file: "workflows/proxyvm/entity.go", anchor: entityAnchor, insert: fmt.Sprintf(`	// The upgrade test's change (internal/upgrade): a timer, without GetVersion.
	workflow.NewTimerWithOptions(e.ctx, time.Millisecond, workflow.TimerOptions{Summary: %q})
`, entityChangeSummary)}
	// createChange is the short change, made as a pinned workflow's change is: with no
	// GetVersion. A create that the release started would fail its next workflow task on this
	// code; it passes only because the create stays on the build it started on.
	createChange = edit{file: "workflows/proxyvm/create.go", anchor: createAnchor, insert: fmt.Sprintf(`	// The upgrade test's change (internal/upgrade): a timer, without GetVersion.
	workflow.NewTimerWithOptions(ctx, time.Millisecond, workflow.TimerOptions{Summary: %q})
`, createChangeSummary)}
)

// edits are the changes of each build.
var edits = map[string][]edit{
	release:               nil,
	next:                  {entityChange, createChange},
	nextWithoutGetVersion: {entityChangeUnguarded, createChange},
}

// repoRoot is the repository's root, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// binDir holds the builds of this test binary's run (TestMain).
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pveflow-upgrade-builds-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "upgrade: the builds' directory:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// builds are the worker binaries built so far, by build name; both tests take the release's.
var builds struct {
	sync.Mutex
	done map[string]*buildResult
}

type buildResult struct {
	once sync.Once
	bin  string
	err  error
}

// binaries builds the worker of each named build, at once, once per test binary, and returns
// their paths by name.
func binaries(t *testing.T, names ...string) map[string]string {
	t.Helper()
	results := make([]*buildResult, len(names))
	builds.Lock()
	if builds.done == nil {
		builds.done = map[string]*buildResult{}
	}
	for i, name := range names {
		if builds.done[name] == nil {
			builds.done[name] = &buildResult{}
		}
		results[i] = builds.done[name]
	}
	builds.Unlock()
	began := time.Now()
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			results[i].once.Do(func() { results[i].bin, results[i].err = buildWorker(name) })
		})
	}
	wg.Wait()
	bins := map[string]string{}
	for i, name := range names {
		require.NoError(t, results[i].err, "build %s of the worker", name)
		bins[name] = results[i].bin
	}
	t.Logf("workers %s built in %s", strings.Join(names, ", "), time.Since(began).Round(100*time.Millisecond))
	return bins
}

// buildWorker builds the worker of build name into binDir: the tree's, with that build's edits
// laid over its files.
func buildWorker(name string) (string, error) {
	dir := filepath.Join(binDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "worker")
	args := []string{"build", "-o", bin}
	if len(edits[name]) > 0 {
		overlay, err := writeOverlay(dir, edits[name])
		if err != nil {
			return "", err
		}
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.Command("go", append(args, "./worker")...)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// writeOverlay writes the edited copies of the files es change into dir, and the overlay file
// that lays them over the tree's, whose path it returns.
func writeOverlay(dir string, es []edit) (string, error) {
	sources := map[string]string{}
	for _, e := range es {
		src, ok := sources[e.file]
		if !ok {
			data, err := os.ReadFile(filepath.Join(repoRoot, e.file))
			if err != nil {
				return "", err
			}
			src = string(data)
		}
		if n := strings.Count(src, e.anchor); n != 1 {
			return "", fmt.Errorf("%s holds the anchor %q %d times, not once: the upgrade test's change must be placed anew (internal/upgrade/builds_test.go)",
				e.file, e.anchor, n)
		}
		sources[e.file] = strings.Replace(src, e.anchor, e.insert+e.anchor, 1)
	}
	replace := map[string]string{}
	for file, src := range sources {
		copyPath := filepath.Join(dir, strings.ReplaceAll(file, "/", "_"))
		if err := os.WriteFile(copyPath, []byte(src), 0o644); err != nil {
			return "", err
		}
		orig, err := filepath.Abs(filepath.Join(repoRoot, file))
		if err != nil {
			return "", err
		}
		replace[orig] = copyPath
	}
	data, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	return overlay, os.WriteFile(overlay, data, 0o644)
}
