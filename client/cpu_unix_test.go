//go:build unix

package client_test

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time (user and system) the test process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op: CPU time per operation, the stub server's
// included, which waiting for a busy machine does not inflate as it does
// wall time.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}
