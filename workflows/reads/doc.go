// Package reads holds the read workflows ListProxies and CheckHealth, and what they find that
// the fleet's garbage collection acts on: the cluster's marked VMs (ReadCluster) and the
// leftovers of failed clones and destroys (LeftoverFinder).
package reads

import "github.com/pveflow/pveflow/internal/config"

// Workflows are the workflows of this package, with the configuration they read.
type Workflows struct {
	Config config.Config
}
