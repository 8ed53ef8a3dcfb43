//go:build !linux

package engine

import "runtime"

// LowPriority makes the calling goroutine's OS thread its own; lowering a
// thread's priority is done on Linux only (priority_linux.go).
func LowPriority() { runtime.LockOSThread() }
