//go:build race

package server

import "time"

// Under the race detector everything runs several times slower; the
// latency bound of TestSlowClients widens so that only a real stall fails.
func p99Limit() time.Duration { return 50 * time.Millisecond }
