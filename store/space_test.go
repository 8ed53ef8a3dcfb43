package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/google/go-cmp/cmp"
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

// faultyWithKey returns a store on an in-memory file system whose
// operations fail as inject says while the returned switch is on, holding
// k = "1", committed before.
func faultyWithKey(t *testing.T, inject func(op errorfs.Op) error) (*DB, *errorfs.Toggle) {
	t.Helper()
	faults := &errorfs.Toggle{Injector: errorfs.InjectorFunc(inject)}
	return openWithKey(t, errorfs.Wrap(vfs.NewMem(), faults)), faults
}

// openWithKey opens a store on fs and commits one key, "k" = "1".
func openWithKey(t *testing.T, fs vfs.FS) *DB {
	t.Helper()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Set([]byte("k"), []byte("1"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	return db
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
		{"purge wal", func(db *DB) error { return db.PurgeWAL(context.Background()) }},
		{"purge manifest", func(db *DB) error { return db.PurgeManifest(context.Background()) }},
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

// flushFiles are the files a flush writes, by kind: its sstable and its
// MANIFEST edit.
var flushFiles = []struct {
	name  string
	match func(path string) bool
}{
	{"sstable", func(p string) bool { return strings.HasSuffix(p, ".sst") }},
	{"manifest", func(p string) bool { return strings.Contains(p, "MANIFEST-") }},
}

// TestBackgroundFailureParks: a flush whose sstable, or whose MANIFEST
// edit, cannot be written for want of space (in Pebble's own goroutine,
// where a panic would end the process) fails the store with NoSpace and
// parks that goroutine; reads, snapshots and metrics go on, writes, Flush
// and Close answer ErrFailed at once instead of waiting for it. (A
// MANIFEST failure used to panic there, killing the test binary; a failed
// sstable was retried in a loop, and writes went on until they stalled.)
func TestBackgroundFailureParks(t *testing.T) {
	for _, tc := range flushFiles {
		t.Run(tc.name, func(t *testing.T) {
			db, faults := faultyWithKey(t, func(op errorfs.Op) error {
				if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && tc.match(op.Path) {
					return fmt.Errorf("%s: %w", op.Path, syscall.ENOSPC)
				}
				return nil
			})
			db.Metrics()
			faults.On()
			if _, err := db.pdb.AsyncFlush(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-db.space.parked:
			case <-time.After(10 * time.Second):
				t.Fatalf("no goroutine parked 10 s after the failed flush: %+v", db.Space())
			}
			got := parkedView(t, db)
			want := parkedObservation{Failed: true, NoSpace: true, Value: "1", Scanned: 1, SnapScanned: 1, Commit: true, Flush: true, Close: true}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("store with a parked %s (-want +got):\n%s", tc.name, diff)
			}
		})
	}
}

// TestBackgroundFailureWithoutDescriptorsParks: a flush or a compaction
// whose sstable cannot be created for want of file descriptors (EMFILE, the
// process's; ENFILE, the system's) fails the store with NoFiles and parks,
// as for want of space (TestBackgroundFailureParks), so that serve restarts
// in place once it can open files again. Pebble retried it in a loop
// instead: on the real binary under ulimit -n 200, 110,000 tries in 20 s,
// more than a core, the store never failed and /readyz said "listo".
func TestBackgroundFailureWithoutDescriptorsParks(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		for _, task := range []string{"flush", "compaction"} {
			t.Run(errno.Error()+"/"+task, func(t *testing.T) {
				db, faults := faultyWithKey(t, func(op errorfs.Op) error {
					if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") {
						return fmt.Errorf("open %s: %w", op.Path, errno)
					}
					return nil
				})
				db.Metrics()
				if task == "compaction" {
					twoTables(t, db)
				}
				faults.On()
				if task == "flush" {
					if _, err := db.pdb.AsyncFlush(); err != nil {
						t.Fatal(err)
					}
				} else {
					go db.pdb.Compact(t.Context(), []byte("a"), []byte("z"), false) // waits on the parked compaction for good
				}
				select {
				case <-db.space.parked:
				case <-time.After(10 * time.Second):
					t.Fatalf("no goroutine parked 10 s after the failed %s: %+v", task, db.Space())
				}
				got := parkedView(t, db)
				want := parkedObservation{Failed: true, NoFiles: true, Value: "1", Scanned: 1, SnapScanned: 1, Commit: true, Flush: true, Close: true}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("store with a parked %s (-want +got):\n%s", task, diff)
				}
			})
		}
	}
}

// twoTables flushes db's key "k" to a table, and a key beside it to another,
// for a compaction to merge.
func twoTables(t *testing.T, db *DB) {
	t.Helper()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	defer b.Close()
	b.Set([]byte("l"), []byte("2"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestLogCreationFailureParks: a flush (a deletion's, or a full memtable
// in a commit) whose new write-ahead log cannot be made, for want of an
// inode or a descriptor or for the directory's permissions, fails the
// store and parks (with NoSpace for the lack of space alone, NoFiles for
// that of descriptors, which serve's restart in place waits out) instead of
// ending the process: Pebble panicked on that error with its mutex
// released under a deferred unlock, a runtime fatal error ("sync: unlock
// of unlocked mutex") that no recover stops. Reads go on.
func TestLogCreationFailureParks(t *testing.T) {
	for _, tc := range []struct {
		errno            syscall.Errno
		noSpace, noFiles bool
	}{
		{syscall.ENOSPC, true, false},
		{syscall.EMFILE, false, true},
		{syscall.ENFILE, false, true},
		{syscall.EACCES, false, false},
		{syscall.EROFS, false, false},
	} {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			db, faults := faultyWithKey(t, func(op errorfs.Op) error {
				if (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite) && strings.HasSuffix(op.Path, ".log") {
					return fmt.Errorf("%s: %w", op.Path, tc.errno)
				}
				return nil
			})
			faults.On()
			if err := db.Flush(); !errors.Is(err, ErrFailed) {
				t.Errorf("flush that cannot make its new log: %v, want ErrFailed", err)
			}
			got := parkedView(t, db)
			want := parkedObservation{Failed: true, NoSpace: tc.noSpace, NoFiles: tc.noFiles, Value: "1", Scanned: 1, SnapScanned: 1, Commit: true, Flush: true, Close: true}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("store whose new log could not be made (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCommitLogCreationFailureParks: a commit that rotates the memtable
// (here a batch too large for it) and cannot make the new write-ahead log
// parks inside Pebble and fails the store, as a flush does
// (TestLogCreationFailureParks), instead of ending the process; the commit
// answers ErrFull, unacknowledged (TestParkedCommitAnswers), and reads go
// on.
func TestCommitLogCreationFailureParks(t *testing.T) {
	db, faults := faultyWithKey(t, func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".log") {
			return fmt.Errorf("%s: %w", op.Path, syscall.ENOSPC)
		}
		return nil
	})
	faults.On()
	committed := make(chan error, 1)
	go func() {
		b := db.NewBatch()
		defer b.Close()
		b.Set([]byte("large"), make([]byte, memTableSize/2+1))
		committed <- b.Commit()
	}()
	select {
	case err := <-committed:
		if !errors.Is(err, ErrFull) || !db.space.isParked() {
			t.Fatalf("commit that cannot make its new log answered %v, parked %v; want ErrFull, parked", err, db.space.isParked())
		}
	case <-time.After(parkedAnswerWait):
		t.Fatalf("the commit that cannot make its new log still waits after %v: %+v", parkedAnswerWait, db.Space())
	}
	got := parkedView(t, db)
	want := parkedObservation{Failed: true, NoSpace: true, Value: "1", Scanned: 1, SnapScanned: 1, Commit: true, Flush: true, Close: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("store whose new log could not be made in a commit (-want +got):\n%s", diff)
	}
}

// TestOpenDoesNotWaitForAParkedFlush: an Open that replays writes from
// the log and cannot flush them (no space, or no inode, for the table or
// the MANIFEST edit) answers ErrFull at once instead of waiting for the
// parked flush: serve hung at its start, deaf to SIGTERM, on a disk out of
// inodes.
func TestOpenDoesNotWaitForAParkedFlush(t *testing.T) {
	for _, tc := range flushFiles {
		t.Run(tc.name, func(t *testing.T) {
			faults := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
				if (op.Kind == errorfs.OpCreate || op.Kind.ReadOrWrite() == errorfs.OpIsWrite) && tc.match(op.Path) {
					return fmt.Errorf("%s: %w", op.Path, syscall.ENOSPC)
				}
				return nil
			})}
			fs := errorfs.Wrap(vfs.NewMem(), faults)
			db := openWithKey(t, fs)
			if err := db.Close(); err != nil { // the write stays in the log, for the next Open to flush
				t.Fatal(err)
			}
			faults.On()
			opened := make(chan error, 1)
			go func() {
				db, err := Open("db", fs)
				if err == nil {
					db.Close()
				}
				opened <- err
			}()
			select {
			case err := <-opened:
				if !errors.Is(err, ErrFull) {
					t.Errorf("Open that cannot flush the log it replayed: %v, want ErrFull", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Open that cannot flush the log it replayed still waits after 10 s")
			}
		})
	}
}

// parkedObservation is what parkedView saw of a store with a parked
// Pebble goroutine.
type parkedObservation struct {
	Failed, NoSpace      bool
	NoFiles              bool
	Value                string // Get("k")
	Scanned, SnapScanned int    // keys a Scan and a Snapshot's Scan saw
	Commit, Flush, Close bool   // each answered ErrFailed
}

// parkedView reads, writes, flushes and closes db, failing the test if
// any of them takes more than 5 s (it waits on the parked goroutine).
func parkedView(t *testing.T, db *DB) parkedObservation {
	t.Helper()
	done := make(chan parkedObservation, 1)
	go func() {
		var o parkedObservation
		sp := db.Space()
		o.Failed, o.NoSpace, o.NoFiles = sp.Failed, sp.NoSpace, sp.NoFiles
		v, _ := db.Get([]byte("k"))
		o.Value = string(v)
		count := func(n *int) func(k, v []byte) error { return func(k, v []byte) error { *n++; return nil } }
		_ = db.Scan([]byte("k"), []byte("l"), count(&o.Scanned))
		snap := db.NewSnapshot()
		_ = snap.Scan([]byte("k"), []byte("l"), count(&o.SnapScanned))
		snap.Close()
		db.Metrics()
		b := db.NewBatch()
		b.Set([]byte("k"), []byte("2"))
		o.Commit = errors.Is(b.Commit(), ErrFailed)
		b.Close()
		o.Flush = errors.Is(db.Flush(), ErrFailed)
		o.Close = errors.Is(db.Close(), ErrFailed)
		done <- o
	}()
	select {
	case o := <-done:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("a read, write, flush or close of the store hangs on the parked goroutine")
		return parkedObservation{}
	}
}

// TestFullDiskErrorSaysItOnce: the error of a write refused for want of
// space says once what happened, to which store and what to do, and is
// still ErrFull and ErrFailed. It read "store: commit: store: storage full
// (store: writes stopped …): pebble: pebble: fatal commit error:
// db/000002.log: no space left on device", which an admin command printed
// as it was.
func TestFullDiskErrorSaysItOnce(t *testing.T) {
	db, faults := walFaults(t)
	commit := func(v string) error {
		b := db.NewBatch()
		defer b.Close()
		b.Set([]byte("k"), []byte(v))
		return b.Commit()
	}
	if err := commit("1"); err != nil {
		t.Fatal(err)
	}
	faults.On()
	type seen struct {
		Full, Failed, ENOSPC bool
		Text                 string
	}
	const stopped = "disk full at db (no space left on device): writes are stopped until coupond restarts: free space on that file system (serve restarts itself once there is; run an admin command again then)"
	want := []seen{
		{true, true, true, "store: commit: " + stopped},
		{true, true, false, "store: commit: " + stopped},
		{true, true, false, "store: flush: " + stopped},
	}
	var got []seen
	for _, err := range []error{commit("2"), commit("3"), db.Flush()} {
		got = append(got, seen{errors.Is(err, ErrFull), errors.Is(err, ErrFailed), errors.Is(err, syscall.ENOSPC), err.Error()})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors of a full disk (-want +got):\n%s", diff)
	}
}

// TestOpenFailureSaysStart: a store that could not open for want of space
// or descriptors says to start coupond again, not that serve restarts
// itself (which only a running serve does).
func TestOpenFailureSaysStart(t *testing.T) {
	for _, tc := range []struct {
		err  WriteError
		want string
	}{
		{WriteError{Op: "open", Dir: "db", full: true, stopped: true},
			"store: open: disk full at db: the store did not open: free space on that file system, then start coupond again (systemd's unit starts serve again by itself)"},
		{WriteError{Op: "open", Dir: "db", noFiles: true, stopped: true},
			"store: open: out of file descriptors at db: the store did not open: raise its limit of open files (LimitNOFILE) or end what holds them, then start coupond again (systemd's unit starts serve again by itself)"},
		{WriteError{Op: "commit", Dir: "db", full: true, stopped: true},
			"store: commit: disk full at db: writes are stopped until coupond restarts: free space on that file system (serve restarts itself once there is; run an admin command again then)"},
	} {
		if diff := cmp.Diff(tc.want, tc.err.Error()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.err.Op, diff)
		}
	}
}
