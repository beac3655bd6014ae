// Package proxyvm holds Proxy, the long-lived entity of one egress-proxy VM on Proxmox VE, and the
// operations it runs as its children, CreateProxy, ChangeProxy and DeleteProxy, with GetProxy,
// the read its checks run.
package proxyvm

import "github.com/pveflow/pveflow/internal/config"

// Workflows are the workflows of this package, with the configuration they read.
type Workflows struct {
	Config config.Config
}
