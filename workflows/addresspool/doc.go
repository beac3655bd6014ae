// Package addresspool holds AddressPool, the workflow that keeps the allocations of one
// configured address pool.
package addresspool

import "github.com/pveflow/pveflow/internal/config"

// Workflows are the workflows of this package, with the configuration they read.
type Workflows struct {
	Config config.Config
}
