package store

import (
	"bytes"
	"context"
	"fmt"
	"slices"
)

// CompactPoints compacts the sstables that hold one of keys, so that the
// values deleted or overwritten at those keys are physically removed, as
// Compact does for a span. Its cost is bounded by the tables that hold the
// keys (and the base level the memtable's flush goes through), not by the
// key range between them: a customer's events, whose caller-chosen
// event_ids are spread over the whole events table, rewrite a few tables
// rather than every file of the table at every level (a soak store of
// 228 MiB: 60-72 MiB written per deleted customer of a few events, against
// 152-242 MiB as spans from the smallest to the largest key per table).
//
// Every key lies inside one of the spans compacted: each is the union of
// the key itself and the bounds of the tables below L0 that held it once
// the memtable was flushed (L0's tables are left out of the bounds: a
// flush's can span the whole key space, and Pebble's compaction of a span
// takes every table overlapping it at each level anyway, the L0 ones and
// those a concurrent compaction writes meanwhile included). It fails as
// Compact does.
func (db *DB) CompactPoints(ctx context.Context, keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	if err := db.walWritable("compact"); err != nil {
		return err
	}
	if err := db.flushMemtable(ctx); err != nil {
		return err
	}
	levels, err := db.pdb.SSTables()
	if err != nil {
		return fmt.Errorf("store: compact: %w", err)
	}
	var tables []keySpan
	for _, level := range levels[min(1, len(levels)):] {
		for _, t := range level {
			tables = append(tables, keySpan{t.Smallest.UserKey, t.Largest.UserKey})
		}
	}
	for _, s := range pointSpans(keys, tables) {
		upper := append(slices.Clone(s.hi), 0) // s.hi inclusive
		err := db.unlessParked("compact", func() error { return db.pacedCompact(ctx, s.lo, upper) })
		if err != nil {
			return fmt.Errorf("store: compact: %w", err)
		}
	}
	return nil
}

// keySpan is the inclusive range [lo, hi] of keys.
type keySpan struct{ lo, hi []byte }

// pointSpans returns the disjoint spans, in key order, that cover every
// key of keys and every table of tables holding one of them (a key within
// its bounds): the union of those ranges, overlapping ones merged.
func pointSpans(keys [][]byte, tables []keySpan) []keySpan {
	sorted := slices.SortedFunc(slices.Values(keys), bytes.Compare)
	spans := make([]keySpan, 0, len(sorted))
	for _, k := range sorted {
		spans = append(spans, keySpan{k, k})
	}
	for _, t := range tables {
		i, _ := slices.BinarySearchFunc(sorted, t.lo, bytes.Compare) // first key >= t.lo
		if i < len(sorted) && bytes.Compare(sorted[i], t.hi) <= 0 {
			spans = append(spans, t)
		}
	}
	slices.SortFunc(spans, func(a, b keySpan) int { return bytes.Compare(a.lo, b.lo) })
	out := spans[:0:0]
	for _, s := range spans {
		if n := len(out); n > 0 && bytes.Compare(s.lo, out[n-1].hi) <= 0 {
			if bytes.Compare(s.hi, out[n-1].hi) > 0 {
				out[n-1].hi = s.hi
			}
			continue
		}
		out = append(out, s)
	}
	return out
}
