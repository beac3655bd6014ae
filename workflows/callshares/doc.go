// Package callshares holds CallShares, the workflow that divides a task queue's Proxmox call
// cap among its workers.
package callshares

import "github.com/pveflow/pveflow/internal/config"

// Workflows are the workflows of this package, with the configuration they read.
type Workflows struct {
	Config config.Config
}
