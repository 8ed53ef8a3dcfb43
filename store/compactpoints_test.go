package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
)

// TestCompactPointsRewritesOnlyTheTablesOfItsKeys deletes two keys at the
// two ends of a table spread over many sstables: CompactPoints removes
// their values from every file while rewriting a fraction of the table,
// where a compaction of the span between them rewrites all of it.
func TestCompactPointsRewritesOnlyTheTablesOfItsKeys(t *testing.T) {
	db, fs := openMem(t)
	const n, size = 24000, 1024 // 24 MiB of incompressible values
	rng := rand.New(rand.NewPCG(1, 2))
	ev := func(i int) []byte { return key("acme", tableEvent, fmt.Sprintf("ev-%06d", i)) }
	gone := map[int]string{10: "Gone-first-Q7", n - 10: "Gone-last-Q7"}
	b := db.NewBatch()
	for i := range n {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		copy(v, gone[i])
		b.Set(ev(i), v)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	lo, hi := tableSpan("acme", tableEvent)
	if err := db.Compact(t.Context(), lo, hi); err != nil { // the table in its bottom level
		t.Fatal(err)
	}
	b = db.NewBatch()
	var keys [][]byte
	for i := range gone {
		b.Delete(ev(i))
		keys = append(keys, ev(i))
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	before := db.Metrics().CompactedBytes
	if err := db.CompactPoints(t.Context(), keys); err != nil {
		t.Fatal(err)
	}
	if w := db.Metrics().CompactedBytes - before; w > n*size/4 {
		t.Errorf("CompactPoints of 2 keys wrote %d bytes of tables, want at most a quarter of the table's %d", w, n*size)
	}
	if held := filesHolding(t, db, fs, "db", "Gone-"); len(held) > 0 {
		t.Errorf("sstables still hold the deleted values: %v", held)
	}
	var left int
	if err := db.Scan(lo, hi, func(k, v []byte) error { left++; return nil }); err != nil {
		t.Fatal(err)
	}
	if left != n-len(gone) {
		t.Errorf("%d keys left, want %d", left, n-len(gone))
	}
}

// liveTables lists the file names of db's live sstables, every level.
func liveTables(t *testing.T, db *DB) []string {
	t.Helper()
	levels, err := db.pdb.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, level := range levels {
		for _, info := range level {
			out = append(out, fmt.Sprintf("%s.sst", info.BackingSSTNum))
		}
	}
	return out
}

// filesHolding lists the live sstables of db (in dir of fs) whose bytes
// contain s; the obsolete ones Pebble has yet to remove are not read.
func filesHolding(t *testing.T, db *DB, fs vfs.FS, dir, s string) []string {
	t.Helper()
	var out []string
	for _, name := range liveTables(t, db) {
		f, err := fs.Open(fs.PathJoin(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // compacted away since the listing: its bytes are gone
		}
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, err = buf.ReadFrom(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(buf.Bytes(), []byte(s)) {
			out = append(out, name)
		}
	}
	return out
}

func TestPointSpans(t *testing.T) {
	k := func(s string) []byte { return []byte(s) }
	tests := []struct {
		name   string
		keys   []string
		tables [][2]string
		want   [][2]string
	}{
		{"no table holds them", []string{"c", "a"}, nil, [][2]string{{"a", "a"}, {"c", "c"}}},
		{"tables holding none are left", []string{"m"}, [][2]string{{"a", "f"}, {"n", "z"}}, [][2]string{{"m", "m"}}},
		{"each key's tables, at every level", []string{"b", "x"}, [][2]string{{"a", "c"}, {"a", "k"}, {"d", "w"}, {"w", "z"}},
			[][2]string{{"a", "k"}, {"w", "z"}}},
		{"overlapping tables merge", []string{"b", "h"}, [][2]string{{"a", "e"}, {"d", "j"}}, [][2]string{{"a", "j"}}},
		{"a key on a table's bound", []string{"e"}, [][2]string{{"a", "e"}, {"e", "g"}}, [][2]string{{"a", "g"}}},
	}
	for _, tt := range tests {
		var keys [][]byte
		for _, s := range tt.keys {
			keys = append(keys, k(s))
		}
		var tables []keySpan
		for _, r := range tt.tables {
			tables = append(tables, keySpan{k(r[0]), k(r[1])})
		}
		var got [][2]string
		for _, s := range pointSpans(keys, tables) {
			got = append(got, [2]string{string(s.lo), string(s.hi)})
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: pointSpans (-want +got):\n%s", tt.name, diff)
		}
	}
}
