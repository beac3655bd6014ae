// Package e2e runs pveflow end to end on a real, in-process Temporal server (temporaltest): the
// workflows, the activities and the Proxmox simulator, through the real HTTP client where it
// matters. It also records the workflow histories that package workflows replays
// (`make histories`).
//
// Its tests build the whole Temporal server, so `make test` runs them without the race
// detector; every package they exercise has race-checked tests of its own.
package e2e
