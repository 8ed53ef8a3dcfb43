package engine

import (
	"testing"
	"time"
)

// TestNonceFreeAtBlocks: a microsecond is free when no decision was stored
// at it before the engine drew there, whether the answer comes from the
// 64-microsecond block scan or from the exact one.
func TestNonceFreeAtBlocks(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	base := time.UnixMicro(t0.UnixMicro() / nonceBlockSpan * nonceBlockSpan).UTC() // first µs of a block
	at := func(us int) time.Time { return base.Add(time.Duration(us) * time.Microsecond) }
	store := func(us int) {
		b := db.NewBatch()
		defer b.Close()
		b.Set(decisionKey("acme", newNonce(at(us), [9]byte{1})), []byte("x"))
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name   string
		stored int // a decision stored at this µs before the question (-1: none)
		ask    int
		want   bool
	}{
		{"empty block", -1, 3, true},
		{"forward in the free block", -1, 10, true},
		{"a decision stored behind the engine's back, asked going back", 7, 7, false},
		{"same block, an empty microsecond", -1, 8, true},
		{"next block, empty", -1, nonceBlockSpan + 1, true},
		{"a decision in the next block, asked again", nonceBlockSpan + 1, nonceBlockSpan + 1, true}, // same µs as the last draw: cached
		{"back to a taken microsecond", -1, 7, false},
	}
	for _, s := range steps {
		if s.stored >= 0 {
			store(s.stored)
		}
		got, err := e.nonceFreeAt(ts, at(s.ask))
		if err != nil {
			t.Fatal(err)
		}
		if got != s.want {
			t.Errorf("%s: nonceFreeAt(+%dµs) = %v, want %v", s.name, s.ask, got, s.want)
		}
	}
}
