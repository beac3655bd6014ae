package docsection

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's layout table is written by hand; this keeps it from missing a package.
func TestREADME_layoutNamesEveryInternalPackage(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	layout := regexp.MustCompile("(?s)\n## Layout\n(.*?)\n## ").FindSubmatch(readme)
	require.NotNil(t, layout, "README.md has a Layout section")
	dirs, err := os.ReadDir("..")
	require.NoError(t, err)
	for _, d := range dirs {
		if d.IsDir() {
			assert.Contains(t, string(layout[1]), "`internal/"+d.Name()+"`", "the layout table names internal/%s", d.Name())
		}
	}
}
