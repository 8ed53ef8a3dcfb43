//go:build !race

package server

import "time"

// p99Limit is TestSlowClients' bound on the normal client's p99.
func p99Limit() time.Duration { return 10 * time.Millisecond }
