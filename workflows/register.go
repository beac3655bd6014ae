package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/workflows/addresspool"
	"github.com/pveflow/pveflow/workflows/admission"
	"github.com/pveflow/pveflow/workflows/callshares"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

// Workflows are the proxy workflows of one worker, with the configuration they read.
type Workflows struct {
	Config config.Config
}

// Register registers every workflow under its recorded name, with its versioning behavior
// (deployment.go): the short workflows Pinned, the long-lived ones (CloneAdmission, Proxy,
// Rollout, AddressPool, Observer, CallShares) AutoUpgrade. It is the one place that knows every
// workflow package.
func (w *Workflows) Register(r worker.WorkflowRegistry) {
	short := func(name string) workflow.RegisterOptions {
		return workflow.RegisterOptions{Name: name, VersioningBehavior: shortWorkflowBehavior}
	}
	longLived := func(name string) workflow.RegisterOptions {
		return workflow.RegisterOptions{Name: name, VersioningBehavior: longLivedBehavior}
	}
	p := &proxyvm.Workflows{Config: w.Config}
	rd := &reads.Workflows{Config: w.Config}
	f := &fleet.Workflows{Config: w.Config}
	r.RegisterWorkflowWithOptions(p.CreateProxy, short(core.CreateProxyName))
	r.RegisterWorkflowWithOptions(p.DeleteProxy, short(core.DeleteProxyName))
	r.RegisterWorkflowWithOptions(p.ChangeProxy, short(core.ChangeProxyName))
	r.RegisterWorkflowWithOptions(p.GetProxy, short(core.GetProxyName))
	r.RegisterWorkflowWithOptions(rd.ListProxies, short(core.ListProxiesName))
	r.RegisterWorkflowWithOptions(rd.CheckHealth, short(core.CheckHealthName))
	r.RegisterWorkflowWithOptions(f.CollectGarbage, short(core.CollectGarbageName))
	r.RegisterWorkflowWithOptions((&admission.Workflows{Config: w.Config}).CloneAdmission, longLived(core.CloneAdmissionName))
	r.RegisterWorkflowWithOptions(p.Proxy, longLived(core.ProxyName))
	r.RegisterWorkflowWithOptions(f.Rollout, longLived(core.RolloutName))
	r.RegisterWorkflowWithOptions((&addresspool.Workflows{Config: w.Config}).AddressPool, longLived(addresspool.AddressPoolName))
	r.RegisterWorkflowWithOptions(f.Observer, longLived(core.ObserverName))
	r.RegisterWorkflowWithOptions((&callshares.Workflows{Config: w.Config}).CallShares, longLived(callshares.CallSharesName))
}
