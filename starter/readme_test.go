package starter_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/docsection"
)

// snippetFrame holds a Go block of the documentation as a function body, as a reader's program
// would: the packages the blocks use, and, as the function's parameters, what the blocks take
// the reader's program to have, such as the README's proxies, which the block of
// docs/operations.md goes on with. A block that uses anything else fails to type-check, and
// names it: add it here, with the type the block means. The block is a scope of its own, where
// it may declare a parameter's name again, as the README's declares proxies.
const snippetFrame = `package snippet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

func _(
	ctx context.Context,
	uid, cloudInit, requestID string,
	controllerUIDs starter.KeepSource,
	proxies *starter.Client,
	controller interface{ ProxyUIDs(context.Context) ([]string, error) },
) {
	{
%s
	}
}
`

// TestREADME_goBlocksCompile type-checks every ```go block of README.md and docs/*.md against
// the starter and the workflows as they are, so that a method, field or constant they show that
// was renamed or removed fails here rather than in a reader's program. A block is a fragment,
// not a program: its variables need not be used, nor its imports; go/types calls those errors
// soft, and they are ignored. The packages are imported from the export data `go list -export`
// gives, which the build cache holds from building this test.
func TestREADME_goBlocksCompile(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	docs = append([]string{filepath.Join("..", "README.md")}, docs...)
	fset := token.NewFileSet()
	var files []*ast.File
	var names []string // the blocks', as doc:line, the doc's path from the top of the tree
	for _, doc := range docs {
		name, err := filepath.Rel("..", doc)
		require.NoError(t, err)
		for _, b := range docsection.Blocks(t, doc, "go") {
			// The line directive makes every position the block's own in the Markdown file; it
			// is read against the directory of the file parsed, which has none.
			src := fmt.Sprintf("//line %s:%d\n%s", filepath.ToSlash(name), b.Line, b.Body)
			if !strings.HasPrefix(b.Body, "package ") { // a whole file stands as it is
				src = fmt.Sprintf(snippetFrame, src)
			}
			f, err := parser.ParseFile(fset, "snippet.go", src, parser.SkipObjectResolution)
			require.NoError(t, err, "the ```go block at %s:%d", name, b.Line)
			files = append(files, f)
			names = append(names, fmt.Sprintf("%s:%d", name, b.Line))
		}
	}
	require.NotEmpty(t, files, "README.md has no ```go block")

	exports := exportData(t, files)
	for i, f := range files {
		var hard []string
		conf := types.Config{
			Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
				if file, ok := exports[path]; ok {
					return os.Open(file)
				}
				return nil, fmt.Errorf("no export data for %s: import it in snippetFrame", path)
			}),
			Error: func(err error) {
				if e, ok := err.(types.Error); !ok || !e.Soft {
					hard = append(hard, err.Error())
				}
			},
		}
		_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
		assert.Empty(t, hard, "the ```go block at %s does not compile", names[i])
	}
}

// exportData maps the import path of every package files import, and theirs, to its export
// data, as `go list -export` builds it, with the race detector as this test was built: a
// build without it would compile the whole graph again rather than find it in the build cache.
func exportData(t *testing.T, files []*ast.File) map[string]string {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	imports := map[string]bool{}
	for _, f := range files {
		for _, spec := range f.Imports {
			imports[strings.Trim(spec.Path.Value, `"`)] = true
		}
	}
	for path := range imports {
		args = append(args, path)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list -export:\n%s", stderr.String())
	exports := map[string]string{}
	lines := bufio.NewScanner(bytes.NewReader(out))
	for lines.Scan() {
		if path, file, ok := strings.Cut(lines.Text(), "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	return exports
}
