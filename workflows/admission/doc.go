// Package admission holds CloneAdmission, the workflow that grants the clone leases of one
// storage, and the create's side of its protocol (Admit, Lease).
package admission

import "github.com/pveflow/pveflow/internal/config"

// Workflows are the workflows of this package, with the configuration they read.
type Workflows struct {
	Config config.Config
}
