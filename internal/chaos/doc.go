// Package chaos holds pveflow's chaos test (docs/reliability.md): the real server (the embedded
// one, then make cluster's two processes on PostgreSQL), simulator and workers, proxies created
// and deleted at random while workers are killed, a server process is killed once and Proxmox
// calls fail, and afterwards the invariants that must hold under any interleaving, read from
// the simulator's state and from Temporal.
package chaos
