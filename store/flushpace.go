package store

import (
	"context"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// The store's own forced flushes (Flush, Compact, CompactPoints, and the
// rounds of PurgeWAL and PurgeManifest a deletion ends with) are paced so
// that none of them makes Pebble stop every commit. Pebble stops commits (a
// write stall, with the flush's caller holding the commit pipeline's lock)
// before rotating a memtable when L0 holds L0StopWritesThreshold (12)
// sublevels, and when the memtables queued (the mutable one included)
// reach MemTableStopWritesThreshold (2) memtables' capacity, that is when
// a full memtable is still being flushed. Each forced flush under load
// writes an L0 table spanning the key space, a sublevel of its own: a
// deletion's flushes, one after the other, stacked sublevels faster than
// the L0 compaction (one compaction at a time, rewriting the base level)
// merged them, and every write route stopped until it did (in serve under
// a load of events, 1.3-1.9 s at the deletion's end; 4-13 s reported).
//
// So a forced flush first waits, holding no lock commits need, until the
// memtables queued hold at most one memtable's capacity (no flush pending)
// and L0 has fewer than flushPaceL0 sublevels; forced flushes are
// serialised (DB.flushMu) so that two of them never pass the same check.
// The wait ends after flushPaceMax at the latest: the flush then goes
// ahead and Pebble stalls as it would have. A flush or compaction whose
// ctx ends during the wait (the deletion worker's, at serve's shutdown)
// does nothing and returns ctx's error.

// flushPaceL0 is the number of L0 sublevels at which a forced flush waits
// for an L0 compaction: half Pebble's stop threshold, so that the flush's
// own sublevel and the load's flushes meanwhile still leave room.
const flushPaceL0 = 6

// flushPacePoll is how often a waiting forced flush reads Pebble's metrics;
// flushPaceMax is the longest it waits.
const (
	flushPacePoll = 10 * time.Millisecond
	flushPaceMax  = time.Minute
)

// flushCalm reports whether a forced flush now would stall no commit: the
// memtables queued hold at most one memtable's capacity (the mutable one,
// or, after the store opened, the small ones Pebble grows memtables by and
// flushes together) and L0 has room.
func flushCalm(m *pebble.Metrics) bool {
	return m.MemTable.Size <= memTableSize && m.Levels[0].Sublevels < flushPaceL0
}

// awaitFlushCalm waits until flushCalm, flushPaceMax at the longest, or
// until a Pebble goroutine parks (park.go). It returns ctx's error, at
// once, when ctx ends first. The caller holds flushMu.
func (db *DB) awaitFlushCalm(ctx context.Context) error {
	deadline := time.Now().Add(flushPaceMax)
	for !db.space.isParked() && !flushCalm(db.pdb.Metrics()) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(flushPacePoll):
		}
	}
	return ctx.Err()
}

// pacedFlush is Pebble's Flush once awaitFlushCalm returns, serialised
// with the store's other forced flushes. When ctx ends first it flushes
// nothing and returns ctx's error: serve's shutdown (which waits for the
// deletion worker) does not wait for a purge's flushes, up to
// flushPaceMax each.
func (db *DB) pacedFlush(ctx context.Context) error {
	db.flushMu.Lock()
	defer db.flushMu.Unlock()
	if err := db.awaitFlushCalm(ctx); err != nil {
		return err
	}
	return db.pdb.Flush()
}

// pacedCompact is Pebble's Compact of [lower, upper) once awaitFlushCalm
// returns: Pebble's Compact first forces a flush of the memtables holding
// keys of the span, under load most often the mutable one. Once ctx ends it
// waits no more and returns ctx's error.
func (db *DB) pacedCompact(ctx context.Context, lower, upper []byte) error {
	db.flushMu.Lock()
	err := db.awaitFlushCalm(ctx)
	db.flushMu.Unlock()
	if err != nil {
		return err
	}
	return db.pdb.Compact(ctx, lower, upper, false)
}
