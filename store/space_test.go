package store

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestCommitAfterWALFailure: a write-ahead-log write that fails (ENOSPC)
// fails the commit with ErrFull and stops writes, with Commit and with
// CommitOrdered alike: Pebble's log writer keeps the error, so a later
// commit could never be durable, and it must be refused before Pebble
// applies it (and so makes it visible) rather than answered with an error
// after.
func TestCommitAfterWALFailure(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
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
			defer db.Close()
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
