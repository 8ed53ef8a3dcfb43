package store

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestScanManyMatchesScans checks ScanMany against one Scan per span over
// spans in random order that overlap, repeat, nest and hold nothing, on
// keys both in the memtable and in sstables.
func TestScanManyMatchesScans(t *testing.T) {
	db, _ := openMem(t)
	rng := rand.New(rand.NewPCG(7, 8))
	k := func(i int) []byte { return []byte(fmt.Sprintf("k%04d", i)) }
	put := func(from, to int) {
		b := db.NewBatch()
		for i := from; i < to; i += 1 + rng.IntN(3) {
			b.Set(k(i), []byte(fmt.Sprint(i)))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	put(0, 500)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	put(250, 1000) // memtable over the sstable
	var spans []Span
	for range 200 {
		lo := rng.IntN(1100)
		spans = append(spans, Span{Lower: k(lo), Upper: k(lo + rng.IntN(12))})
	}
	spans = append(spans, spans[3], Span{Lower: k(10), Upper: k(5)}) // repeated; empty
	type hit struct {
		Span     int
		Key, Val string
	}
	var want []hit
	for i, s := range spans {
		if err := db.Scan(s.Lower, s.Upper, func(key, v []byte) error {
			want = append(want, hit{i, string(key), string(v)})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	got := make([][]hit, len(spans))
	if err := db.ScanMany(spans, func(i int, key, v []byte) error {
		got[i] = append(got[i], hit{i, string(key), string(v)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var flat []hit
	for _, g := range got {
		flat = append(flat, g...)
	}
	if diff := cmp.Diff(want, flat); diff != "" {
		t.Errorf("ScanMany against Scans (-want +got):\n%s", diff)
	}
	if len(want) < 500 {
		t.Errorf("only %d hits: the spans do not exercise the scan", len(want))
	}
}
