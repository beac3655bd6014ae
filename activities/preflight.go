package activities

import (
	"context"
	"fmt"

	"github.com/pveflow/pveflow/internal/pve"
)

// taskWarnings reads the warnings of a task that ended with exit "WARNINGS: N" from its log,
// each naming the task: the exit status counts them, only the log says what they are. A log
// without a warning line (one rotated away) gives the exit status itself.
func (a *Activities) taskWarnings(ctx context.Context, node string, upid pve.UPID, what, exit string) ([]string, error) {
	log, err := a.API.TaskLog(ctx, node, upid)
	if err != nil {
		return nil, failure(fmt.Sprintf("read log of %s task %s on node %s", what, upid, node), err)
	}
	texts := pve.TaskWarnings(log)
	if len(texts) == 0 {
		texts = []string{exit}
	}
	out := make([]string, len(texts))
	for i, w := range texts {
		out[i] = fmt.Sprintf("%s task %s on node %s: %s", what, upid, node, w)
	}
	return out, nil
}

// PermissionsRequest is the input of Permissions: the ACL paths to read.
type PermissionsRequest struct {
	Paths []string `json:"paths"`
}

// Permissions reads the token's effective privileges on each path, one call per path.
func (a *Activities) Permissions(ctx context.Context, req PermissionsRequest) (map[string]pve.Privileges, error) {
	out := make(map[string]pve.Privileges, len(req.Paths))
	for _, path := range req.Paths {
		privs, err := a.API.Permissions(ctx, path)
		if err != nil {
			return nil, failure("read the API token's permissions on "+path, err)
		}
		out[path] = privs
	}
	return out, nil
}
