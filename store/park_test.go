package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/google/go-cmp/cmp"
)

// parkedAnswerWait bounds how long a call waiting on a parked commit may
// take to answer.
const parkedAnswerWait = 10 * time.Second

// TestParkedCommitAnswers: a commit that rotates the memtable (a batch too
// large for it) and cannot make the new write-ahead log parks inside
// Pebble holding the commit pipeline's lock (park.go). Its caller, which
// holds a lock of its own (a campaign's budget lock, with Commit or with
// CommitOrdered), answers ErrFull instead of waiting for good, and so
// releases that lock: the call waiting on the same lock answers too, as do
// a commit and a checkpoint that were already waiting inside Pebble's
// commit pipeline. None is acknowledged. (Each of them waited until the
// process ended, the HTTP requests behind them unanswered.)
func TestParkedCommitAnswers(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			rotating := make(chan struct{})
			var once sync.Once
			db, faults := faultyWithKey(t, func(op errorfs.Op) error {
				if (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite) && strings.HasSuffix(op.Path, ".log") {
					once.Do(func() { close(rotating) })
					// Let the calls started at rotating reach Pebble's
					// commit pipeline before the commit parks.
					time.Sleep(100 * time.Millisecond)
					return fmt.Errorf("%s: %w", op.Path, syscall.ENOSPC)
				}
				return nil
			})
			faults.On()
			got := parkedCallers(t, db, ordered, rotating)
			want := map[string]string{"lock holder": "ErrFull", "lock waiter": "ErrFull", "pipeline commit": "ErrFull", "pipeline checkpoint": "ErrFull"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("answers of the calls behind a parked commit (-want +got):\n%s", diff)
			}
			if v, err := db.Get([]byte("k")); err != nil || string(v) != "1" {
				t.Errorf("k after the parked commit: %q %v, want the value committed before", v, err)
			}
		})
	}
}

// parkedCallers runs, on db, a commit of a batch too large for the
// memtable under a lock (CommitOrdered releasing it, when ordered), a
// commit waiting for that lock, and, once the large commit makes its new
// log (rotating is closed), a commit and a checkpoint without the lock.
// It returns what each answered (answerOf), "hangs" for those that did not
// within parkedAnswerWait.
func parkedCallers(t *testing.T, db *DB, ordered bool, rotating <-chan struct{}) map[string]string {
	t.Helper()
	type answer struct {
		who string
		err error
	}
	answers := make(chan answer, 4)
	var mu sync.Mutex
	commit := func(who string, key []byte, size int, locked bool) {
		b := db.NewBatch()
		defer b.Close()
		b.Set(key, make([]byte, size))
		var err error
		switch {
		case locked && ordered:
			err = b.CommitOrdered(mu.Unlock)
		case locked:
			err = b.Commit()
			mu.Unlock()
		default:
			err = b.Commit()
		}
		answers <- answer{who, err}
	}
	mu.Lock()
	go commit("lock holder", []byte("large"), memTableSize/2+1, true)
	<-rotating
	go func() {
		mu.Lock()
		commit("lock waiter", []byte("waiter"), 10, true)
	}()
	go commit("pipeline commit", []byte("other"), 10, false)
	go func() { answers <- answer{"pipeline checkpoint", db.Checkpoint("cp")} }()
	got := map[string]string{"lock holder": "hangs", "lock waiter": "hangs", "pipeline commit": "hangs", "pipeline checkpoint": "hangs"}
	deadline := time.After(parkedAnswerWait)
	for range got {
		select {
		case a := <-answers:
			got[a.who] = answerOf(a.err)
		case <-deadline:
			return got
		}
	}
	return got
}

// answerOf names the answer err is: "acknowledged" (nil), "ErrFull",
// "ErrFailed" (not for want of space) or its text.
func answerOf(err error) string {
	switch {
	case err == nil:
		return "acknowledged"
	case errors.Is(err, ErrFull):
		return "ErrFull"
	case errors.Is(err, ErrFailed):
		return "ErrFailed"
	}
	return err.Error()
}
