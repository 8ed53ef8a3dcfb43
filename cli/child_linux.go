//go:build linux

package cli

import "syscall"

// childAttr makes a bench's child process get SIGTERM when the bench dies
// however it dies (killed, or a closed stdout pipe), so no server is left
// running on a temporary data dir.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} }
