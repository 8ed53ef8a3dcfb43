//go:build linux

package cli

import (
	"syscall"
	"time"
)

// preciseSleep sleeps for d with the kernel's high-resolution timer. Go's
// time.Sleep wakes through the runtime's poller, which rounds short sleeps
// up to about a millisecond on Linux: an open-loop generator that sent late
// by that much would charge its own lateness to the server. The caller
// locks its goroutine to its thread (runtime.LockOSThread), so the blocking
// call stalls nothing else.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
