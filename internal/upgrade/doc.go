// Package upgrade holds pveflow's upgrade test (issue 35): the worker built twice, as the release
// and as the release with a deliberate change to a long-lived workflow behind
// workflow.GetVersion and to a short one without, run as real processes under Worker Deployment
// versioning against the embedded Temporal server and the Proxmox simulator; a fleet of proxies
// upgraded from the first build to the second while its creates, changes and deletes are in
// flight, and rolled back. A second test builds the long-lived change without its GetVersion and
// shows that the same upgrade then fails an entity's workflow task with a nondeterminism
// error: the check that guards the change is run on every run, not once by hand.
//
// The changed builds are made at test time, with go build -overlay, from copies of workflow files
// the test writes with the change inserted at a named anchor: the repository's workflows/ holds
// no GetVersion of them. docs/deploy.md, *Upgrading the worker*, has an operator's
// commands for the same upgrade and rollback.
package upgrade
