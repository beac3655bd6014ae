// Package fleet holds the workflows that act on a fleet of proxies through their entities:
// Rollout, CollectGarbage and the Observer.
package fleet

import "github.com/pveflow/pveflow/internal/config"

// Workflows are the workflows of this package, with the configuration they read.
type Workflows struct {
	Config config.Config
}
