// Package chaos holds pveflow's chaos test (docs/reliability.md): the real server (the embedded
// one, then make cluster's two processes on PostgreSQL), simulator and workers, proxies created,
// changed and deleted at random, some from an address pool, and a rollout over some of them,
// while workers are killed, a server process is killed once and Proxmox calls fail; and
// afterwards the invariants that must hold under any interleaving, read from the simulator's
// state, from Temporal and from what the driver asked. It holds the crash-point test too: a
// worker killed after each Proxmox call of a create, a change and a delete, before the call's
// answer reaches it.
package chaos
