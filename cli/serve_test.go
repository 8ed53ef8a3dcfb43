package cli

import "testing"

// TestConnsWithinFileLimit: --max-conns leaves 256 files of the open-file
// limit to the store, and keeps at least 16 connections.
func TestConnsWithinFileLimit(t *testing.T) {
	for _, tc := range []struct {
		maxConns int
		limit    uint64
		known    bool
		want     int
	}{
		{2048, 1 << 20, true, 2048},
		{2048, 2304, true, 2048},
		{2048, 1024, true, 768},
		{2048, 200, true, 16},
		{8, 200, true, 8},
		{2048, 0, false, 2048},
	} {
		if got := connsWithin(tc.maxConns, tc.limit, tc.known); got != tc.want {
			t.Errorf("connsWithin(%d, %d, %v) = %d, want %d", tc.maxConns, tc.limit, tc.known, got, tc.want)
		}
	}
}
