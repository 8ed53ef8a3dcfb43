//go:build !linux

package cli

import "syscall"

// childAttr: elsewhere a bench's children are stopped by the bench itself
// only (no parent-death signal).
func childAttr() *syscall.SysProcAttr { return nil }
