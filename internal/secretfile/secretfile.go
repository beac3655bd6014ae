// Package secretfile holds the rule pveflow applies to the files that hold a secret, the payload
// codec's keys and the Proxmox API token: no one but their owner and their group may read them,
// and no one but their owner write them.
package secretfile

import (
	"fmt"
	"io/fs"
)

// CheckMode refuses mode, the mode of the file at path, when it gives others any access to the
// file or its group write access. The error gives the mode and the chmod that fixes it, naming
// path there; the caller says what the file is.
func CheckMode(path string, mode fs.FileMode) error {
	if perm := mode.Perm(); perm&0o027 != 0 {
		return fmt.Errorf("mode %04o gives others access to it, or its group write access: chmod 600 %s (640 to let its group read it)", perm, path)
	}
	return nil
}
