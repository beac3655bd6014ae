package codec

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)```sh\n([^`]*?bin/pveflow create [^`]*?)```").FindSubmatch(readme)
	require.NotNil(t, block, "README.md has a sh block with bin/pveflow create")
	first, _, _ := strings.Cut(string(block[1]), "\n")
	assert.True(t, strings.HasPrefix(first, "export PVEFLOW_CODEC_KEY_FILE=$PWD/"+MakeRunKeyFile+" "), first)
}
