package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// VersioningBehavior is how a run of pveflow's workflows follows worker deployments: it moves
// to the deployment's current build at its next workflow task (auto-upgrade), rather than
// staying on the build it started on (pinned).
//
// Pinned would keep every run on its build until it closes. A create can wait out a stalled
// clone for its whole budget, a delete can wait behind a create, and a CloneAdmission run
// lives as long as its storage has clones to admit, so a rollout would have to keep old workers
// running for as long as the longest of those, and a fix for a stuck wait would not reach the
// run that is stuck. Auto-upgrade lets old workers drain in minutes. What it asks in return
// is what pveflow does anyway: every change to workflow code goes behind workflow.GetVersion,
// and the replay of every recorded history (workflows/replay_test.go) gates each release.
const VersioningBehavior = workflow.VersioningBehaviorAutoUpgrade

// DeploymentOptions are the options of a worker that is build buildID of the worker
// deployment named deployment, running the workflows with VersioningBehavior.
func DeploymentOptions(deployment, buildID string) worker.DeploymentOptions {
	return worker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   worker.WorkerDeploymentVersion{DeploymentName: deployment, BuildID: buildID},
		DefaultVersioningBehavior: VersioningBehavior,
	}
}
