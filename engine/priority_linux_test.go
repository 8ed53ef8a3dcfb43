package engine

import (
	"runtime"
	"syscall"
	"testing"
)

// threadNice is the nice value of the calling goroutine's thread (the
// kernel's getpriority answers 20 − nice).
func threadNice() int {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	if err != nil {
		return -100
	}
	return 20 - p
}

// TestLowPriorityStaysOnItsThread: a goroutine that calls LowPriority runs
// at backgroundNice, and its thread ends with it, so goroutines started
// afterwards never run at the lowered priority.
func TestLowPriorityStaysOnItsThread(t *testing.T) {
	base := make(chan int)
	go func() { runtime.LockOSThread(); base <- threadNice() }()
	normal := <-base
	for range 20 {
		got := make(chan int)
		go func() { LowPriority(); got <- threadNice() }()
		if n := <-got; n != backgroundNice {
			t.Fatalf("background thread nice %d, want %d", n, backgroundNice)
		}
	}
	for range 50 {
		got := make(chan int)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			got <- threadNice()
		}()
		if n := <-got; n != normal {
			t.Fatalf("a later goroutine ran at nice %d, want %d: a lowered thread went back to the pool", n, normal)
		}
	}
}
