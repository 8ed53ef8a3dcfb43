package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// slowCompactions is an in-memory file system whose compactions write
// their tables at bytesPerSec once slow is set: a disk (or a 2-core
// machine) busy with a write load, on which an L0 compaction lasts longer
// than the flushes that feed L0. Flushes and logs are written at memory
// speed.
type slowCompactions struct {
	vfs.FS
	slow        atomic.Bool
	bytesPerSec int
}

// openSlowCompactions opens a store on an in-memory slowCompactions of
// bytesPerSec, fills it with mib MiB compacted below L0 at memory speed,
// and then slows its compactions.
func openSlowCompactions(t *testing.T, bytesPerSec, mib int) *DB {
	t.Helper()
	fs := &slowCompactions{FS: vfs.NewMem(), bytesPerSec: bytesPerSec}
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.slow.Store(false); db.Close() })
	fillStore(t, db, mib)
	if err := db.Compact(context.Background(), []byte{0}, []byte{0xff}); err != nil {
		t.Fatal(err)
	}
	fs.slow.Store(true)
	return db
}

func (fs *slowCompactions) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || category != "pebble-compaction" {
		return f, err
	}
	return &slowFile{File: f, fs: fs}, nil
}

// slowFile sleeps, once slow is set, for the time its writes take at
// bytesPerSec (in steps of a millisecond at least).
type slowFile struct {
	vfs.File
	fs   *slowCompactions
	owed time.Duration
}

func (f *slowFile) Write(p []byte) (int, error) {
	if f.fs.slow.Load() {
		f.owed += time.Duration(len(p)) * time.Second / time.Duration(f.fs.bytesPerSec)
		if f.owed >= time.Millisecond {
			time.Sleep(f.owed)
			f.owed = 0
		}
	}
	return f.File.Write(p)
}

// eventKeyAt is an event key of acme at a random place in the events table.
func eventKeyAt(r *rand.Rand) []byte {
	return key("acme", tableEvent, fmt.Sprintf("e%016x", r.Uint64()))
}

// fillStore commits mib MiB of incompressible values at random keys.
func fillStore(t *testing.T, db *DB, mib int) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 1024)
	for i := 0; i < mib; i++ {
		b := db.NewBatch()
		for range 1024 {
			for j := range val {
				val[j] = byte(r.Uint32())
			}
			b.Set(eventKeyAt(r), val)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
}

// steadyLoad commits a small synced batch at a random key every period
// from each of writers goroutines until stop is called, and keeps the
// longest commit's latency.
type steadyLoad struct {
	quit    chan struct{}
	wg      sync.WaitGroup
	longest atomic.Int64
	err     atomic.Pointer[error]
}

func startLoad(db *DB, writers int, period time.Duration) *steadyLoad {
	l := &steadyLoad{quit: make(chan struct{})}
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 3))
			val := make([]byte, 300)
			tick := time.NewTicker(period)
			defer tick.Stop()
			for {
				select {
				case <-l.quit:
					return
				case <-tick.C:
				}
				if err := l.commit(db, r, val); err != nil {
					l.err.Store(&err)
					return
				}
			}
		}()
	}
	return l
}

func (l *steadyLoad) commit(db *DB, r *rand.Rand, val []byte) error {
	b := db.NewBatch()
	defer b.Close()
	for range 4 {
		b.Set(eventKeyAt(r), val)
	}
	t0 := time.Now()
	if err := b.Commit(); err != nil {
		return err
	}
	d := int64(time.Since(t0))
	for cur := l.longest.Load(); d > cur && !l.longest.CompareAndSwap(cur, d); cur = l.longest.Load() {
	}
	return nil
}

func (l *steadyLoad) stop() error {
	close(l.quit)
	l.wg.Wait()
	if p := l.err.Load(); p != nil {
		return *p
	}
	return nil
}

// TestDeletionEndUnderLoadStallsNoCommit runs what a deletion's end calls
// on the store (the compaction of the erased keys, CompactPoints, then the
// purge of the logs and MANIFESTs, PurgeWAL and PurgeManifest: a dozen
// forced flushes) while writers commit all the time, with compactions
// slower than flushes, as on a busy machine. Each forced flush under load
// writes an L0 table across the key space: unpaced, they stacked L0
// sublevels up to Pebble's stop threshold while the L0 compaction ran, and
// Pebble stopped every commit until it ended (here 1-2 stalls, 2.5-4.8 s
// in all; in serve under a load of events, 1.3-1.9 s at the deletion's
// end). Paced (flushpace.go), no commit is stopped.
func TestDeletionEndUnderLoadStallsNoCommit(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("10 s of load, and the race detector's slower pace changes the store's shape")
	}
	setup := time.Now()
	db := openSlowCompactions(t, 16<<20, 24) // tables below L0, which an L0 compaction rewrites
	t.Logf("setup %v", time.Since(setup))
	load := startLoad(db, 4, time.Millisecond)
	time.Sleep(time.Second)
	before := db.Metrics()
	load.longest.Store(0)
	r := rand.New(rand.NewPCG(5, 5))
	start := time.Now()
	err := db.CompactPoints(context.Background(), [][]byte{eventKeyAt(r), eventKeyAt(r), eventKeyAt(r)})
	if err == nil {
		err = db.PurgeWAL(context.Background())
	}
	if err == nil {
		err = db.PurgeManifest(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	after := db.Metrics()
	if err := load.stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("deletion's end %v; longest commit under load %v", took.Round(time.Millisecond),
		time.Duration(load.longest.Load()).Round(time.Millisecond))
	if n := after.WriteStalls - before.WriteStalls; n != 0 {
		t.Errorf("the deletion's end stopped every commit %d times for %v in all (since open: %d for L0, %d for memtables), want none",
			n, after.WriteStallTime-before.WriteStallTime, db.stalls.reasons[stallL0].Load(), db.stalls.reasons[stallMemtables].Load())
	}
}

// TestFlushAfterOpenWaitsForNoFlush: after the store opens, Pebble grows
// its memtables from 256 KB and keeps the small ones it rotated queued,
// unflushed, until they hold half a memtable. A pacing that waited for
// the queue to hold the mutable memtable alone waited its whole minute
// there (60 s for this flush); the queue's bytes are what Pebble stalls
// on, and they are below a memtable's capacity.
func TestFlushAfterOpenWaitsForNoFlush(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 24 MiB")
	}
	db, _ := openMem(t)
	fillStore(t, db, 24)
	if n := db.pdb.Metrics().MemTable.Count; n < 2 {
		t.Fatalf("%d memtables queued after the load, want the small ones of the ramp", n)
	}
	start := time.Now()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Flush took %v with no flush under way, want at most 10s", took)
	}
}

// TestPurgeOwedStopsPacingOnceCtxEnds: serve's shutdown cancels the
// deletion worker and waits for it (serveStopBound, systemd's
// TimeoutStopSec). A purge's paced flushes waited for a calm store under
// context.Background, up to flushPaceMax each, with L0 still full once
// the load had stopped, whatever the pass's ctx said.
func TestPurgeOwedStopsPacingOnceCtxEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 8 MiB and holds L0 full behind a slow compaction")
	}
	db := openSlowCompactions(t, 256<<10, 8)
	lo, hi := key("acme", tableEvent, "a"), key("acme", tableEvent, "z")
	for i := 0; db.pdb.Metrics().Levels[0].Sublevels < flushPaceL0; i++ {
		if i == 4*flushPaceL0 {
			t.Fatalf("L0 has %d sublevels after %d flushes, want %d", db.pdb.Metrics().Levels[0].Sublevels, i, flushPaceL0)
		}
		b := db.NewBatch()
		b.Set(lo, []byte{byte(i)})
		b.Set(hi, []byte{byte(i)})
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
		if err := db.pdb.Flush(); err != nil { // unpaced: a sublevel each
			t.Fatal(err)
		}
	}
	b := db.NewBatch()
	b.OwePurge(nil)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the shutdown
	start := time.Now()
	err := db.PurgeOwed(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) || took > 2*time.Second {
		t.Errorf("PurgeOwed with its ctx ended, L0 full: %v after %v; want context.Canceled within 2s", err, took.Round(time.Millisecond))
	}
	marks := 0
	mlo, mhi := purgeOwedSpan()
	if err := db.Scan(mlo, mhi, func(_, _ []byte) error { marks++; return nil }); err != nil {
		t.Fatal(err)
	}
	if marks != 1 {
		t.Errorf("%d purge marks left, want the one the stopped purge owes", marks)
	}
}
