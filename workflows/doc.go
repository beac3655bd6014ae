// Package workflows registers every workflow of pveflow on a worker (Workflows.Register), under
// the type names recorded in histories, with its versioning behavior (deployment.go). The
// workflows themselves are in its subpackages: core, the engine and names they share; proxyvm,
// the Proxy entity and its operations; admission, addresspool and callshares, the entities that
// hand out clone slots, addresses and call shares; reads, the read workflows; fleet, Rollout,
// CollectGarbage and the Observer.
package workflows
