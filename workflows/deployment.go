package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// How runs follow worker deployments (see docs/architecture.md, "Changing a workflow").
//
// The short workflows (CreateProxy, DeleteProxy, GetProxy, ListProxies, CheckHealth,
// CollectGarbage) run Pinned: a run stays on the build it started on until it closes, so a new
// build never replays an old run and a change to them needs no version marker. A rollout
// keeps the old build's workers until its pinned runs have drained (minutes, bounded by the
// budgets).
//
// CloneAdmission lives as long as its storage has clones to admit, Proxy as long as its proxy,
// and Rollout as long as its rollout (it may stay paused for days), so they auto-upgrade: they
// move to the deployment's current build at their next workflow task, and any change to their
// commands goes behind a version marker (the SDK's patching API), with a recorded history of
// the old shape kept for replay; internal/upgrade moves a fleet across such a change.
const (
	shortWorkflowBehavior     = workflow.VersioningBehaviorPinned
	longLivedBehavior         = workflow.VersioningBehaviorAutoUpgrade
	defaultVersioningBehavior = workflow.VersioningBehaviorUnspecified
)

// DeploymentOptions are the options of a worker that is build buildID of the worker
// deployment named deployment. Every workflow registers its own versioning behavior (Register),
// so the default is left unspecified: a workflow registered without one fails its tasks rather
// than run under a behavior nobody chose.
func DeploymentOptions(deployment, buildID string) worker.DeploymentOptions {
	return worker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   worker.WorkerDeploymentVersion{DeploymentName: deployment, BuildID: buildID},
		DefaultVersioningBehavior: defaultVersioningBehavior,
	}
}
