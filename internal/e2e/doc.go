// Package e2e runs pveflow end to end on a real Temporal server (the dev server as a child
// process, internal/testserver): the workflows, the activities and the Proxmox simulator,
// through the real HTTP client where it matters. It also records the workflow histories that
// package workflows replays (`make histories`).
package e2e
