//go:build !linux

package cli

import "time"

// preciseSleep sleeps for d (time.Sleep where no high-resolution sleep is
// available).
func preciseSleep(d time.Duration) { time.Sleep(d) }
