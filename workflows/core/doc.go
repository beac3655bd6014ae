// Package core is what every workflow package of pveflow shares and none owns: the settings a
// run records, the call engine (Call, Poll, Execute), failure types, the status tracker and its
// phases, and the names (workflow types, IDs, Updates, queries, signals, search attributes) that
// cross packages. It imports no other workflow package.
//
// Workflow code here is deterministic: no I/O, no wall-clock time, no randomness outside the
// workflow APIs.
package core
