package main

import (
	"fmt"
	"strings"
)

// helpRequest is -h or --help given to a command, or `pveflow help [command]`: run prints the
// help of command, or all of helpText when command is empty or unknown.
type helpRequest struct{ command string }

func (h helpRequest) Error() string { return "help requested" }

// details is what the help of a command says besides its entry in helpText.
var details = map[string]string{"get": getDetails, "ls": lsDetails, "check": checkDetails}

// commandHelp is the help of one command: its entry in helpText's Commands section, which is
// where a new command documents itself, its details if it has any, and the global flags.
func commandHelp(name string) (string, bool) {
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
				return usageOf(entry, details[name]), true
			}
		case entry != nil:
			entry = append(entry, line)
		}
	}
	return usageOf(entry, details[name]), entry != nil
}

func usageOf(entry []string, details string) string {
	if details != "" {
		details = "\n" + details
	}
	return fmt.Sprintf("Usage:\n%s\n%s\nGlobal flags, before or after the command:\n"+
		"  --json          print results as JSON on stdout\n"+
		"  --task-queue Q  the workers' task queue (default $PVEFLOW_TASK_QUEUE, else \"pveflow\")\n\n"+
		"Run 'pveflow help' for every command, the environment and the exit codes.\n",
		strings.Join(entry, "\n"), details)
}
