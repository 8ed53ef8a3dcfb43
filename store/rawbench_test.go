package store

import (
	"context"
	"testing"
	"time"
)

// TestRawSyncWrites: the bench baseline writes its records until the
// context ends and counts them.
func TestRawSyncWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	pools := [][][]RawRecord{
		{{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}},
		{{{Key: []byte("c"), Value: []byte("3")}}},
	}
	n, took, err := RawSyncWrites(ctx, t.TempDir(), pools)
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 || took <= 0 {
		t.Errorf("RawSyncWrites: %d records in %v, want at least one round of each writer", n, took)
	}
}
