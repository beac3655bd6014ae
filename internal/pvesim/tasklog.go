package pvesim

import (
	"context"
	"strings"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// TaskLog reads a task's log on the node that runs it: the lines its worker logged, and, once
// it stopped, the last line its exit status gives. A task whose log is empty has the one line
// PVE answers for an empty log.
func (c *Cluster) TaskLog(ctx context.Context, node string, upid pve.UPID) ([]pve.TaskLogLine, error) {
	return call(c, ctx, Call{Method: "TaskLog", Node: node}, func(now time.Time) ([]pve.TaskLogLine, error) {
		t, err := c.taskOn(node, upid)
		if err != nil {
			return nil, err
		}
		texts := t.log
		if t.done(now) {
			if last := lastLogLine(t.exit); last != "" {
				texts = append(texts[:len(texts):len(texts)], last)
			}
		}
		if len(texts) == 0 {
			// pve-common src/PVE/Tools.pm dump_logfile_by_filehandle: "HACK: ExtJS
			// store.guaranteeRange() does not like empty array".
			texts = []string{"no content"}
		}
		lines := make([]pve.TaskLogLine, len(texts))
		for i, text := range texts {
			lines[i] = pve.TaskLogLine{N: i + 1, T: text}
		}
		return lines, nil
	})
}

// lastLogLine is the line a worker that stopped with exit writes last (pve-common
// src/PVE/RESTEnvironment.pm fork_worker: "TASK OK", "TASK WARNINGS: $warnings", "TASK ERROR:
// $err"), and none for a worker that died without one ("unexpected status").
func lastLogLine(exit string) string {
	switch {
	case exit == "OK", strings.HasPrefix(exit, "WARNINGS: "):
		return "TASK " + exit
	case exit == crashedExit:
		return ""
	}
	return "TASK ERROR: " + exit
}

// crashedExit is the exit status of a task whose log has no last line: its process is gone
// (pve-common src/PVE/UPID.pm read_status).
const crashedExit = "unexpected status"
