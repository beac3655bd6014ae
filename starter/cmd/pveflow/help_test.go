package main

import (
	"bytes"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/docsection"
)

var update = flag.Bool("update", false, "write the README's command reference instead of checking it")

// rootCommand is pveflow's command tree, as run builds it with an empty environment.
func rootCommand() *cobra.Command {
	return (&cli{getenv: func(string) string { return "" }}).command()
}

// commandReference is the README's reference of pveflow's commands, global flags and exit codes,
// made from the commands' own help.
func commandReference(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("| command | what it does | flags |\n| --- | --- | --- |\n")
	for _, cmd := range root.Commands() {
		if !cmd.IsAvailableCommand() {
			continue
		}
		var flags []string
		cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			flags = append(flags, "`"+flagSynopsis(f)+"`")
		})
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", cell(cmd.UseLine()), cell(cmd.Short), strings.Join(flags, " "))
	}
	b.WriteString("\nGlobal flags, before or after the command:\n\n")
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		_, usage := pflag.UnquoteUsage(f)
		fmt.Fprintf(&b, "- `%s`: %s\n", flagSynopsis(f), usage)
	})
	b.WriteString("\n| exit code | meaning |\n| --- | --- |\n")
	for _, e := range exitCodes {
		fmt.Fprintf(&b, "| %d | %s |\n", e.code, cell(e.meaning))
	}
	return b.String()
}

// flagSynopsis is a flag as its help names it: "--uid UID", "--wait".
func flagSynopsis(f *pflag.Flag) string {
	if name, _ := pflag.UnquoteUsage(f); name != "" {
		return "--" + f.Name + " " + name
	}
	return "--" + f.Name
}

// cell escapes the pipes of s for a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func TestREADME_commandReferenceIsTheCommandsHelp(t *testing.T) {
	docsection.Check(t, filepath.Join("..", "..", "..", "README.md"), "pveflow commands",
		"go test ./starter/cmd/pveflow -run TestREADME -update", commandReference(rootCommand()), *update)
}

func TestRun_completion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			code, stdout, stderr := runCLI(nil, "completion", shell)

			require.Equal(t, exitOK, code, stderr)
			assert.Contains(t, stdout, "__complete", "the script asks pveflow for its completions")
			assert.Contains(t, stdout, map[string]string{"bash": "complete -o default -F __start_pveflow pveflow", "zsh": "#compdef pveflow"}[shell])
		})
	}
}

func TestRun_completionOfferesEveryCommandAndTheFlagsOfOne(t *testing.T) {
	root := rootCommand()

	code, stdout, stderr := runCLI(nil, cobra.ShellCompNoDescRequestCmd, "")
	require.Equal(t, exitOK, code, stderr)
	for _, cmd := range root.Commands() {
		if cmd.IsAvailableCommand() {
			assert.Contains(t, stdout, cmd.Name()+"\n")
		}
	}

	code, stdout, stderr = runCLI(nil, cobra.ShellCompNoDescRequestCmd, "list", "--phase", "")
	require.Equal(t, exitOK, code, stderr)
	for _, phase := range phases {
		assert.Contains(t, stdout, phase+"\n")
	}

	code, stdout, stderr = runCLI(nil, cobra.ShellCompNoDescRequestCmd, "create", "--")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "--user-data-file\n")
	assert.Contains(t, stdout, "--task-queue\n")
}

func TestRun_bashCompletionScriptLoads(t *testing.T) {
	_, script, _ := runCLI(nil, "completion", "bash")
	cmd := exec.Command("bash", "--norc", "--noprofile", "-c", `source /dev/stdin && declare -F __start_pveflow && complete -p pveflow`)
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out

	require.NoError(t, cmd.Run(), out.String())
	assert.Equal(t, "__start_pveflow\ncomplete -o default -F __start_pveflow pveflow\n", out.String())
}

// The bash script calls bash-completion's helper, which a shell without that package lacks:
// the help says to install it.
func TestRun_completionHelpNamesThePackageTheBashScriptNeeds(t *testing.T) {
	_, script, _ := runCLI(nil, "completion", "bash")
	_, help, _ := runCLI(nil, "help", "completion")

	assert.Contains(t, script, "_get_comp_words_by_ref")
	assert.Contains(t, help, "bash-completion package (apt-get install bash-completion)")
}
