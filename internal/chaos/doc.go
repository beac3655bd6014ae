// Package chaos holds pveflow's chaos test (docs/reliability.md): the real server, simulator
// and workers, proxies created and deleted at random while workers are killed, the server is
// killed once and Proxmox calls fail, and afterwards the invariants that must hold under any
// interleaving, read from the simulator's state and from Temporal.
package chaos
