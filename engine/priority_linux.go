package engine

import (
	"runtime"
	"syscall"
)

// LowPriority makes the calling goroutine's OS thread its own and lowers
// that thread's scheduling priority to backgroundNice (10), so that the kernel runs
// online decisions' threads first whenever both want a core. Call it first
// thing in a goroutine that does background work (batch jobs, learner
// passes) and never unlock the thread: when the goroutine ends, Go ends
// the thread with it, so the low priority never leaks to other goroutines.
// It needs GOMAXPROCS above the cores (serve sets it), else a descheduled
// background thread would hold one of the few Go processors.
func LowPriority() {
	runtime.LockOSThread()
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), backgroundNice)
}

// backgroundNice is the background threads' nice value: low enough that
// the kernel prefers decisions' threads (weight 110 against 1024), not so
// low that a background thread holding a lock a decision needs (a batch
// chunk holds its campaigns' budget gate until its commit) waits long for
// a core on a busy machine.
const backgroundNice = 10
