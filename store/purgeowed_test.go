package store

import (
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
