// Package integration runs pveflow against a real Proxmox VE host: the workflows on a Temporal
// dev server that the test starts as a child process (internal/testserver), their activities on
// the real HTTP client, the host named by the PROXMOX_TEST_* variables. Its tests are built only
// with the integration tag and run by `make test-integration-proxmox`, never by `make test` or in
// CI; docs/proxmox.md tells what they need, create and delete.
package integration
