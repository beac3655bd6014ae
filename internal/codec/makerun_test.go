package codec

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/docsection"
)

// The errors send a user to MakeRunKeyFile, and the README's CLI block, run against make run's
// stack, gets past its worker's refusal of plain input only by exporting that file first.
func TestMakeRunKeyFile_isRunShsAndTheREADMEsCLIBlockExportsIt(t *testing.T) {
	runSh, err := os.ReadFile("../demo/run.sh")
	require.NoError(t, err)
	dir := regexp.MustCompile(`(?m)^run=(\S+)$`).FindSubmatch(runSh)
	require.NotNil(t, dir, "run.sh sets run=<its directory>")
	exported := regexp.MustCompile(`(?m)^export PVEFLOW_CODEC_KEY_FILE=\$PWD/(\S+)$`).FindSubmatch(runSh)
	require.NotNil(t, exported, "run.sh exports PVEFLOW_CODEC_KEY_FILE for its worker")
	assert.Equal(t, MakeRunKeyFile, strings.ReplaceAll(string(exported[1]), "$run", string(dir[1])))

	block := docsection.Block(t, "../../README.md", "sh", "bin/pveflow create ")
	first, _, _ := strings.Cut(block, "\n")
	assert.True(t, strings.HasPrefix(first, "export PVEFLOW_CODEC_KEY_FILE=$PWD/"+MakeRunKeyFile+" "), first)
}
