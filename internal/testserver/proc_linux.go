package testserver

import "syscall"

// childProcAttr has the kernel kill the server when the test binary dies, so that a test
// killed by its timeout leaves no server behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
