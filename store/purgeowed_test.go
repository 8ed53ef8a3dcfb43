package store

import (
	"bytes"
	"testing"

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
	db, _ := openMem(t)
	chunk := JobChunkKey("acme", "j1", 0)
	b := db.NewBatch()
	b.Set(chunk, []byte(`"Qa7xLm2Pz","Wv4bHn8Ty"`))
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
	if got := tablesSpanning(t, db, chunk); len(got) == 0 {
		t.Fatal("no table spans the chunk with the older read open: the test does not exercise the pinning")
	}
	snap.Close()
	if err := db.PurgeOwed(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := tablesSpanning(t, db, chunk); len(got) > 0 {
		t.Errorf("tables still spanning the finished job's chunk once the older read closed: %v", got)
	}
}

// tablesSpanning lists the live sstables whose bounds hold k: a table
// rewritten with k's value (compressed, its bytes need not show) or a
// range deletion over it.
func tablesSpanning(t *testing.T, db *DB, k []byte) []string {
	t.Helper()
	levels, err := db.pdb.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, level := range levels {
		for _, info := range level {
			if bytes.Compare(info.Smallest.UserKey, k) <= 0 && bytes.Compare(k, info.Largest.UserKey) <= 0 {
				out = append(out, info.BackingSSTNum.String())
			}
		}
	}
	return out
}
