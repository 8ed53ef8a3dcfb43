package store

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestCommitPacer(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		gap   time.Duration // between commits
		n     int
		after time.Duration // from the last commit to the question
		want  time.Duration
	}{
		{"one commit", 0, 1, 0, 0},
		{"busy: 4,000 commits/s", 250 * time.Microsecond, 200, 100 * time.Microsecond, pacerSyncDelay},
		{"2,000 commits/s: one fsync each is cheaper than a hold", 500 * time.Microsecond, 200, 100 * time.Microsecond, 0},
		{"busy then idle", 250 * time.Microsecond, 200, 5 * time.Millisecond, 0},
		{"slow writer: 100 commits/s", 10 * time.Millisecond, 200, time.Microsecond, 0},
		{"lone writer in a loop: 600/s", 1700 * time.Microsecond, 200, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p commitPacer
			at := t0
			for i := 0; i < tc.n; i++ {
				at = at.Add(tc.gap)
				p.committed(at)
			}
			if got := p.intervalAt(at.Add(tc.after)); got != tc.want {
				t.Errorf("interval = %v, want %v", got, tc.want)
			}
		})
	}
	var none *commitPacer
	none.committed(t0) // a batch without a pacer commits as before
}

// TestCommitPacerOnDisk: a store on the real file system (how serve opens
// it, fs nil) spaces its fsyncs; one in memory has none to space. (The
// owner-only wrapper once hid vfs.Default from the check, and no store
// ever paced.)
func TestCommitPacerOnDisk(t *testing.T) {
	disk, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	mem, err := Open("db", vfs.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if !disk.paced || mem.paced {
		t.Errorf("paced: on disk %v, in memory %v; want true, false", disk.paced, mem.paced)
	}
}

// TestCommitOrdered: writers that count under one lock and commit with
// CommitOrdered store their counts in the lock's order (the last stored
// value is the last count, on disk with real syncs and concurrent
// writers), and the lock is released exactly once whether the commit
// succeeds or fails.
func TestCommitOrdered(t *testing.T) {
	db, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := []byte("counter")
	var mu sync.Mutex
	n := 0
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				mu.Lock()
				n++
				b := db.NewBatch()
				b.Set(key, []byte(strconv.Itoa(n)))
				errs <- b.CommitOrdered(mu.Unlock)
				b.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if v, err := db.Get(key); err != nil || string(v) != strconv.Itoa(writers*each) {
		t.Errorf("stored counter %q (%v), want %d", v, err, writers*each)
	}

	unlocks := 0
	db.space.failed.Store(true) // every commit now fails at once
	mu.Lock()
	b := db.NewBatch()
	b.Set(key, []byte("lost"))
	if err := b.CommitOrdered(func() { unlocks++; mu.Unlock() }); !errors.Is(err, ErrFailed) {
		t.Errorf("commit on a failed store: %v, want ErrFailed", err)
	}
	b.Close()
	if unlocks != 1 || !mu.TryLock() {
		t.Errorf("after a failed CommitOrdered: %d unlocks, want 1 and the lock free", unlocks)
	}
}
