package main

import (
	"fmt"
	"strings"
)

// helpRequest is -h or --help given to a command, or `pveflow help [command]`: run prints the
// help of command, or all of helpText when command is empty or unknown.
type helpRequest struct{ command string }

func (h helpRequest) Error() string { return "help requested" }

// detailedHelp is the help of the commands with more to say than their entry in helpText.
var detailedHelp = map[string]string{"get": getHelp, "ls": lsHelp, "check": checkHelp}

// commandHelp is the help of one command: its detailed help, or else its entry in helpText's
// Commands section, which is where a new command documents itself, and the global flags.
func commandHelp(name string) (string, bool) {
	if help, ok := detailedHelp[name]; ok {
		return help, true
	}
	_, section, _ := strings.Cut(helpText, "\nCommands:\n")
	section, _, _ = strings.Cut(section, "\n\n")
	var entry []string
	for _, line := range strings.Split(section, "\n") {
		rest, isCommand := strings.CutPrefix(line, "  ")
		isCommand = isCommand && rest != "" && rest[0] != ' '
		switch {
		case isCommand && (rest == name || strings.HasPrefix(rest, name+" ")):
			entry = append(entry, line)
		case isCommand:
			if entry != nil {
				return usageOf(entry), true
			}
		case entry != nil:
			entry = append(entry, line)
		}
	}
	return usageOf(entry), entry != nil
}

func usageOf(entry []string) string {
	return fmt.Sprintf("Usage:\n%s\n\nGlobal flags, before or after the command:\n"+
		"  --json          print results as JSON on stdout\n"+
		"  --task-queue Q  the workers' task queue (default $PVEFLOW_TASK_QUEUE, else \"pveflow\")\n\n"+
		"Run 'pveflow help' for every command, the environment and the exit codes.\n",
		strings.Join(entry, "\n"))
}
