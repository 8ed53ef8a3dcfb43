package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/google/go-cmp/cmp"
)

// TestPurgeOwedClearsTheMarksItRead: the marks a completado batch writes
// (one per queue entry, or the bare mark of an older version) are cleared
// by PurgeOwed once it has compacted the keys they name and purged; with
// no mark it does nothing.
func TestPurgeOwedClearsTheMarksItRead(t *testing.T) {
	db, _ := openMem(t)
	if err := db.PurgeOwed(t.Context()); err != nil {
		t.Fatalf("with no mark: %v", err)
	}
	entry := key("acme", tableDeletionQueue, "2026-12-05T00:00:00Z/h1")
	b := db.NewBatch()
	b.Set(entry, []byte(`{"cliente_ref":"Zk"}`))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b = db.NewBatch()
	b.Delete(entry)
	b.OwePurge([][]byte{entry})
	b.Set(purgeOwedKey(nil), []byte{1}) // an older version's mark
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	lo, hi := purgeOwedSpan()
	read := func() (marks []string) {
		if err := db.Scan(lo, hi, func(k, _ []byte) error { marks = append(marks, string(k)); return nil }); err != nil {
			t.Fatal(err)
		}
		return marks
	}
	if diff := cmp.Diff([]string{string(purgeOwedKey(nil)), string(purgeOwedKey(entry))}, read()); diff != "" {
		t.Errorf("marks before the purge (-want +got):\n%s", diff)
	}
	if err := db.PurgeOwed(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 0 {
		t.Errorf("marks after the purge: %q, want none", got)
	}
}

// TestPurgeOwedKeepsTheMarksAnOlderReadPins: a snapshot open since before
// a mark's batch (a streamed export, an evaluation) keeps the values the
// batch deleted through the purge's compaction (here a finished job's
// request chunk, in a bottom-level table still spanning its key). The
// purge cleared the marks anyway, and nothing compacted the chunk once the
// snapshot closed; the marks now stay for a purge with no read open.
func TestPurgeOwedKeepsTheMarksAnOlderReadPins(t *testing.T) {
	db, mem := openMem(t)
	chunk := JobChunkKey("acme", "j1", 0)
	b := db.NewBatch()
	b.Set(chunk, []byte(`"Qa7xLm2Pz","Wv4bHn8Ty"`))
	// 1 MiB in the chunk's table: Pebble rewrites on its own (an
	// elision-only compaction) no bottom-level table less than a tenth of
	// which is deleted.
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2048 {
		v := make([]byte, 512)
		for j := range v {
			v[j] = byte(r.Uint32())
		}
		b.Set(key("acme", tableEvent, fmt.Sprintf("e%04d", i)), v)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	snap := db.NewSnapshot()
	b = db.NewBatch()
	b.DeleteRange(JobChunksSpan("acme", "j1"))
	b.OwePurge([][]byte{chunk})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.PurgeOwed(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := tablesHolding(t, db, mem, chunk); len(got) == 0 {
		t.Fatal("no table holds the chunk with the older read open: the test does not exercise the pinning")
	}
	snap.Close()
	if err := db.PurgeOwed(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := tablesHolding(t, db, mem, chunk); len(got) > 0 {
		t.Errorf("tables still holding the finished job's chunk once the older read closed: %v", got)
	}
}

// tablesHolding lists the live sstables that hold a point key k (its
// value or a tombstone), read through Pebble's table reader: a table's
// raw bytes need not show a value it compressed.
func tablesHolding(t *testing.T, db *DB, fs vfs.FS, k []byte) []string {
	t.Helper()
	var out []string
	for _, name := range liveTables(t, db) {
		if tableHolds(t, fs, fs.PathJoin("db", name), k) {
			out = append(out, name)
		}
	}
	return out
}

// tableHolds reports whether the sstable at path holds a point key k.
func tableHolds(t *testing.T, fs vfs.FS, path string, k []byte) bool {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	readable, err := objstorageprovider.NewFileReadable(f, fs, objstorageprovider.NewReadaheadConfig(), path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sstable.NewReader(context.Background(), readable, sstable.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	it, err := r.NewIter(sstable.NoTransforms, k, append(slices.Clone(k), 0), sstable.TableBlobContext{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	return it.First() != nil
}

// TestPurgeOwedForChunksAloneCompactsOnly: marks that name finished jobs'
// request chunks alone owe their compaction; the logs' and MANIFESTs'
// purge, a dozen forced flushes and the compactions they bring, is left
// to the next deletion's (every log older than it goes). A deletion's
// mark, or an older version's bare one, still purges the logs.
func TestPurgeOwedForChunksAloneCompactsOnly(t *testing.T) {
	tests := []struct {
		name       string
		marks      [][]byte
		minFlushes int64
		maxFlushes int64
	}{
		{"two jobs' chunks", [][]byte{JobChunkKey("acme", "j1", 0), JobChunkKey("acme", "j1", 1), JobChunkKey("beta", "j2", 0)}, 1, 2},
		{"a chunk and a deletion's queue entry", [][]byte{JobChunkKey("acme", "j1", 0), DeletionQueueKey("acme", time.Unix(0, 0), "h1")}, walRotations + 1, 1 << 20},
		{"an older version's bare mark", [][]byte{nil}, walRotations + 1, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, _ := openMem(t)
			b := db.NewBatch()
			for _, k := range tt.marks {
				if k != nil {
					b.Set(k, []byte("x"))
				}
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			b = db.NewBatch()
			for _, k := range tt.marks {
				if k != nil {
					b.Delete(k)
				}
				b.OwePurge([][]byte{k})
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			before := db.pdb.Metrics().Flush.Count
			if err := db.PurgeOwed(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n := db.pdb.Metrics().Flush.Count - before; n < tt.minFlushes || n > tt.maxFlushes {
				t.Errorf("the purge flushed %d times, want %d-%d", n, tt.minFlushes, tt.maxFlushes)
			}
			lo, hi := purgeOwedSpan()
			left := 0
			if err := db.Scan(lo, hi, func(_, _ []byte) error { left++; return nil }); err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Errorf("%d marks left, want none", left)
			}
		})
	}
}
