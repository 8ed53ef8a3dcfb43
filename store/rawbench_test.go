package store

import (
	"context"
	"testing"
	"time"
)

// TestRawSyncWrites: the bench baseline writes its records until the
// context ends and counts them, each writer at least one round: with a
// context that ended before the writers started (a machine so busy that
// the open took the whole deadline, which made this test flaky) it still
// writes one batch from each pool. Fails if a writer can write nothing.
func TestRawSyncWrites(t *testing.T) {
	pools := [][][]RawRecord{
		{{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}},
		{{{Key: []byte("c"), Value: []byte("3")}}},
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	short, cancelShort := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancelShort()
	for name, ctx := range map[string]context.Context{"ended before the start": ended, "100 ms": short} {
		n, took, err := RawSyncWrites(ctx, t.TempDir(), pools)
		if err != nil {
			t.Fatal(err)
		}
		if n < 3 || took <= 0 {
			t.Errorf("%s: RawSyncWrites: %d records in %v, want at least one round of each writer", name, n, took)
		}
	}
}
