//go:build !linux

package testserver

import "syscall"

// childProcAttr is nil where the kernel cannot tie the server's life to the test binary's.
func childProcAttr() *syscall.SysProcAttr { return nil }
