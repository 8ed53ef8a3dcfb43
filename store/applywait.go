package store

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Apply is the first half of a durable Commit: it writes the batch to the
// WAL and the memtable and makes it visible to every later read, but does
// not wait for the WAL fsync. The caller must call SyncWait before it
// acknowledges anything the batch holds, and before Close; an applied batch
// whose SyncWait fails may still be visible (as with Commit) but nothing
// that depends on it may be acknowledged.
//
// Apply lets a writer that must order its read-modify-write cycles (hold a
// lock from the reads to the writes) release its lock before the fsync:
// the next cycle reads the applied batch, and since the WAL is synced in
// order, a later batch is never durable before an earlier one. The
// batches applied while an fsync runs share the next one (group commit).
// Errors are as for Commit; Apply never panics.
func (b *Batch) Apply() (err error) {
	if b.db.space.failed.Load() {
		return fmt.Errorf("store: commit: %w (%w)", ErrFull, ErrFailed)
	}
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(*pebbleFatal)
			if !ok {
				f = &pebbleFatal{msg: fmt.Sprint(p)}
			}
			err = b.db.commitFailure(nil, f)
		}
	}()
	b.pacer.committed(time.Now())
	if err := b.db.pdb.ApplyNoSyncWait(b.b, pebble.Sync); err != nil {
		return b.db.commitFailure(err, nil)
	}
	b.applied = true
	return nil
}

// SyncWait waits for the WAL fsync that makes an applied batch durable
// (see Apply) and returns its error. It returns nil at once for a batch
// that was not applied (nothing to wait for).
func (b *Batch) SyncWait() (err error) {
	if !b.applied {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(*pebbleFatal)
			if !ok {
				f = &pebbleFatal{msg: fmt.Sprint(p)}
			}
			err = b.db.commitFailure(nil, f)
		}
	}()
	b.applied = false
	if err := b.b.SyncWait(); err != nil {
		return b.db.commitFailure(err, nil)
	}
	return nil
}
