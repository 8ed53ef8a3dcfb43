package store

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// walFaults returns a store on an in-memory file system whose writes all
// fail with ENOSPC while the returned switch is on.
func walFaults(t *testing.T) (*DB, *errorfs.Toggle) {
	t.Helper()
	faults := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return fmt.Errorf("%s: %w", op.Path, syscall.ENOSPC)
		}
		return nil
	})}
	db, err := Open("db", errorfs.Wrap(vfs.NewMem(), faults))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, faults
}

// TestCommitAfterWALFailure: a write-ahead-log write that fails (ENOSPC)
// fails the commit with ErrFull and stops writes, with Commit and with
// CommitOrdered alike: Pebble's log writer keeps the error, so a later
// commit could never be durable, and it must be refused before Pebble
// applies it (and so makes it visible) rather than answered with an error
// after.
func TestCommitAfterWALFailure(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			db, faults := walFaults(t)
			commit := func(v string) error {
				b := db.NewBatch()
				defer b.Close()
				b.Set([]byte("k"), []byte(v))
				if ordered {
					return b.CommitOrdered(func() {})
				}
				return b.Commit()
			}
			if err := commit("1"); err != nil {
				t.Fatal(err)
			}
			faults.On()
			if err := commit("2"); !errors.Is(err, ErrFull) {
				t.Errorf("commit with the log full: %v, want ErrFull", err)
			}
			faults.Off()
			if !db.WritesRefused() || !db.Space().Failed {
				t.Errorf("after a failed log write: WritesRefused %v, %+v; want refused and failed", db.WritesRefused(), db.Space())
			}
			if err := commit("3"); !errors.Is(err, ErrFailed) {
				t.Errorf("commit after a failed log write: %v, want ErrFailed", err)
			}
			if v, err := db.Get([]byte("k")); err != nil || string(v) == "3" {
				t.Errorf("value after a refused commit: %q (%v), want it not applied", v, err)
			}
		})
	}
}

// TestMaintenanceAfterWALFailure: once a write-ahead-log write has failed,
// Flush, Compact, Checkpoint (a backup) and the deletion's purges answer
// ErrFailed instead of crashing the process (Pebble panics closing the
// failed log, with its mutex released, a runtime fatal error no recover
// stops), and a Checkpoint whose own log sync fails answers ErrFull.
func TestMaintenanceAfterWALFailure(t *testing.T) {
	ops := []struct {
		name string
		run  func(db *DB) error
	}{
		{"flush", func(db *DB) error { return db.Flush() }},
		{"compact", func(db *DB) error { return db.Compact(t.Context(), []byte{0}, []byte{0xff}) }},
		{"checkpoint", func(db *DB) error { return db.Checkpoint("cp") }},
		{"purge wal", func(db *DB) error { return db.PurgeWAL() }},
		{"purge manifest", func(db *DB) error { return db.PurgeManifest() }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			db, faults := walFaults(t)
			b := db.NewBatch()
			b.Set([]byte("k"), []byte("1"))
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			faults.On()
			b = db.NewBatch()
			b.Set([]byte("k"), []byte("2"))
			if err := b.Commit(); !errors.Is(err, ErrFull) {
				t.Fatalf("commit with the log full: %v, want ErrFull", err)
			}
			b.Close()
			faults.Off()
			if err := op.run(db); !errors.Is(err, ErrFailed) {
				t.Errorf("%s after a failed log write: %v, want ErrFailed", op.name, err)
			}
		})
	}
	t.Run("checkpoint meets the full log", func(t *testing.T) {
		db, faults := walFaults(t)
		b := db.NewBatch()
		b.Set([]byte("k"), []byte("1"))
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
		faults.On()
		if err := db.Checkpoint("cp"); !errors.Is(err, ErrFull) {
			t.Errorf("checkpoint with the log full: %v, want ErrFull", err)
		}
		if !db.Space().Failed {
			t.Errorf("after the checkpoint's failed log sync: %+v, want failed", db.Space())
		}
	})
}

// TestMaintenanceOnFullLog: Flush and Compact (a deletion pass, at start
// too) on a store whose write-ahead log can no longer be written, with no
// commit failed before, answer ErrFull and stop writes. They used to
// rotate the log at once, and Pebble closing a log it cannot write panics
// with its mutex released: a fatal error that ended the process.
func TestMaintenanceOnFullLog(t *testing.T) {
	for _, op := range []struct {
		name string
		run  func(db *DB) error
	}{
		{"flush", func(db *DB) error { return db.Flush() }},
		{"compact", func(db *DB) error { return db.Compact(t.Context(), []byte{0}, []byte{0xff}) }},
	} {
		t.Run(op.name, func(t *testing.T) {
			db, faults := walFaults(t)
			b := db.NewBatch()
			b.Set([]byte("k"), []byte("1"))
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			faults.On()
			if err := op.run(db); !errors.Is(err, ErrFull) {
				t.Errorf("%s with the log full: %v, want ErrFull", op.name, err)
			}
			if sp := db.Space(); !sp.Failed {
				t.Errorf("%s with the log full: %+v, want writes stopped", op.name, sp)
			}
			faults.Off()
			if v, err := db.Get([]byte("k")); err != nil || string(v) != "1" {
				t.Errorf("value after the failed %s: %q %v", op.name, v, err)
			}
		})
	}
}
