//go:build race

package server

import "time"

// Under the race detector everything runs several times slower (a p99 of
// 38 ms was seen on a loaded 2-core machine); the latency bound of
// TestSlowClients widens so that only a real stall fails.
func p99Limit() time.Duration { return 100 * time.Millisecond }
