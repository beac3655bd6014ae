package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pveflow/pveflow/internal/cliflag"
	"github.com/pveflow/pveflow/workflows/core"
)

const rootLong = `pveflow creates, changes and deletes egress-proxy VMs on Proxmox VE through Temporal
workflows. Each proxy is a workflow of its own, proxy/<UID>, to which create, update and delete
send requests; it runs one operation at a time, each a workflow of its own.

A UID is 1 to 128 ASCII letters, digits, '-', '_' and '.', starting with a letter or digit:
Kubernetes UIDs, ULIDs, UUIDs and object names up to 128 characters fit. Any other --uid is a
usage error.

While it waits, pveflow shows the operation's phase, step, elapsed time and the attempt of the
current wait on stderr, and says so within about two seconds when no live worker polls the task
queue: one that Temporal still lists but that took no due task of the workflow waited for (the
proxy's, its operation's or the read's) is none. The user-data file is sent to the workflow and
never printed.`

// environmentHelp is the environment pveflow reads, at the end of `pveflow help`.
const environmentHelp = `Environment, as for the temporal CLI:
  TEMPORAL_ADDRESS    Temporal frontend host:port (default 127.0.0.1:7233)
  TEMPORAL_NAMESPACE  namespace (default "default")
  TEMPORAL_API_KEY    API key (turns TLS on)
  TEMPORAL_TLS        true or false: TLS on or off
  TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH
                      client certificate and key files for mTLS
  TEMPORAL_TLS_SERVER_CA_CERT_PATH
                      CA file that verifies the server
  TEMPORAL_TLS_SERVER_NAME
                      server name the certificate must have, if not the address's
  TEMPORAL_CONFIG_FILE
                      TOML file of profiles (default the temporal CLI's)
  TEMPORAL_PROFILE    its profile to use (default "default"); the variables above
                      win over the profile's settings
and pveflow's own:
  PVEFLOW_TASK_QUEUE  the default of --task-queue
  PVEFLOW_CODEC_KEY_FILE
                      key file of the payload codec (make one with codec-keygen):
                      when set, workflow inputs (user-data among them) and results
                      are encrypted in Temporal's history; failure messages stay
                      plain. The worker needs the same file
and OpenTelemetry's:
  OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
  OTEL_SERVICE_NAME (default pveflow-cli)
                      export the spans of the calls to Temporal (StartWorkflow, ...),
                      whose children the workflow's spans are: otlp, console (on
                      stderr) or none; unset, otlp once an endpoint is set, and
                      nothing otherwise`

// helpTemplate is cobra's, with the environment and the exit codes after the root's usage.
var helpTemplate = `{{with (or .Long .Short)}}{{. | trimTrailingWhitespaces}}

{{end}}{{if or .Runnable .HasSubCommands}}{{.UsageString}}{{end}}{{if not .HasParent}}
` + environmentHelp + `

` + exitCodesHelp() + `{{end}}`

// exitCodesHelp is the list of exit codes in `pveflow help`.
func exitCodesHelp() string {
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, e := range exitCodes {
		fmt.Fprintf(&b, "  %d  %s\n", e.code, e.meaning)
	}
	return b.String()
}

// command is the pveflow command, with every subcommand, writing to c's stdout and stderr.
func (c *cli) command() *cobra.Command {
	root := &cobra.Command{
		Use:   "pveflow",
		Short: "Create, change and delete egress-proxy VMs on Proxmox VE through Temporal workflows",
		Long:  rootLong,
		// The root runs only when no command is given: a usage error, as an unknown command is.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return unknownCommand(cmd, args[0])
		},
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("no command given")}
		},
		SuggestionsMinimumDistance: 2,
		SilenceErrors:              true, // run reports the error, and its exit code
		SilenceUsage:               true, // a mistake gets one line, not a page of usage
		CompletionOptions:          cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetHelpTemplate(helpTemplate)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if cmd.HasParent() {
			return usageError{fmt.Errorf("%s: %w", cmd.Name(), cliflag.Explain(cmd.Flags(), err))}
		}
		// cobra hands the root a command line whose first word is no command, and the root
		// knows none of that command's flags: the word is the mistake, not the flag
		// (`pveflow craete --uid x`). Without such a word the flag is one pveflow lacks, and
		// the root's name would only repeat run's "pveflow: ".
		if words := cmd.Flags().Args(); len(words) > 0 {
			return unknownCommand(cmd, words[0])
		}
		return usageError{cliflag.Explain(cmd.Flags(), err)}
	})
	root.PersistentFlags().BoolVar(&c.json, "json", false, "print results as JSON on stdout")
	root.PersistentFlags().StringVar(&c.taskQueue, "task-queue", cmp.Or(c.getenv("PVEFLOW_TASK_QUEUE"), core.DefaultTaskQueue),
		"the workers' task queue `Q`; $PVEFLOW_TASK_QUEUE sets the default")
	root.AddCommand(
		c.createCommand(), c.updateCommand(), c.deleteCommand(), c.statusCommand(), c.waitCommand(), c.resultCommand(),
		c.listCommand(), c.getCommand(), c.lsCommand(), c.checkCommand(), c.gcCommand(), c.rolloutCommand(), c.demoCommand(),
		c.codecServerCommand(), c.codecKeygenCommand(), c.versionCommand(), completionCommand(root),
	)
	root.SetHelpCommand(helpCommand(root))
	return root
}

// unknownCommand is the usage error of a first word that is no command of root, with the
// command it is closest to.
func unknownCommand(root *cobra.Command, word string) error {
	if s := root.SuggestionsFor(word); len(s) > 0 {
		return usageError{fmt.Errorf("unknown command %q; did you mean %s?", word, s[0])}
	}
	return usageError{fmt.Errorf("unknown command %q", word)}
}

// noArgs is the Args of a command that takes flags only.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s: unexpected arguments %q", cmd.Name(), args)}
	}
	return nil
}

// helpCommand is `pveflow help [COMMAND]`: cobra's, except that an unknown command is a usage
// error rather than a page of usage.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "Help about any command: its flags, and for pveflow itself the environment and the exit codes",
		Args:  cobra.ArbitraryArgs,
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, cmd := range root.Commands() {
				if cmd.IsAvailableCommand() {
					names = append(names, cobra.CompletionWithDesc(cmd.Name(), cmd.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageError{fmt.Errorf("help: %w", unknownCommand(root, strings.Join(args, " ")))}
			}
			cmd.InitDefaultHelpFlag() // as `COMMAND --help` shows it
			return cmd.Help()
		},
	}
}

// completionCommand writes the shell completion script of root.
func completionCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh",
		Short: "Write the shell completion script for bash or zsh",
		Long: `Writes the completion script of bash or zsh on stdout. Load it in the current shell with

  source <(pveflow completion bash)
  source <(pveflow completion zsh)

or write it where the shell looks for completions, such as
/etc/bash_completion.d/pveflow or a directory of $fpath as _pveflow. The bash script needs the
bash-completion package (apt-get install bash-completion) loaded in the shell: without it each
Tab says "_get_comp_words_by_ref: command not found".`,
		ValidArgs: []cobra.Completion{"bash", "zsh"},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
				return usageError{fmt.Errorf("completion: want bash or zsh, not %q", strings.Join(args, " "))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "zsh" {
				return root.GenZshCompletion(cmd.OutOrStdout())
			}
			return root.GenBashCompletionV2(cmd.OutOrStdout(), true)
		},
	}
}
