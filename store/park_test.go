package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/google/go-cmp/cmp"
)

// parkedAnswerWait bounds how long a call waiting on a parked commit may
// take to answer. The tests wait for the answer itself and go on as soon as
// it comes; the bound only ends a wait that would last for ever. It is
// generous: the commit of memTableSize/2+1 bytes that rotates the log takes
// 2 to 7 s under the race detector on a loaded 2-core machine (its copies
// of 32 MiB), and at 10 s a caller that would have answered was reported
// as hanging.
const parkedAnswerWait = time.Minute

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

// TestRotationFailureParks: a rotation of the write-ahead log (a commit
// too large for the memtable, a forced flush) whose old log cannot be
// closed (its last records, its sync or its close fail for want of space)
// or whose directory cannot be synced once the new log is made fails the
// store for want of space and parks, and the caller answers ErrFull;
// reads go on. Pebble panicked on those errors with its mutex released
// under a deferred unlock, a runtime fatal error ("sync: unlock of
// unlocked mutex") that ended the process.
func TestRotationFailureParks(t *testing.T) {
	isLog := func(op errorfs.Op) bool { return strings.HasSuffix(op.Path, ".log") }
	logSync := func(op errorfs.Op) bool {
		return (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) && isLog(op)
	}
	dirSync := func(op errorfs.Op) bool { return op.Kind == errorfs.OpFileSync && op.Path == "db" }
	for _, tc := range []struct {
		name       string
		fails      func(op errorfs.Op) bool // nil: none
		closeFails bool                     // a log's Close fails (logFaultFS)
		flush      bool                     // rotated by a forced flush, else by a commit
		recycled   bool                     // the new log is a recycled one, whose Stat fails (logFaultFS)
	}{
		{"old log's write", func(op errorfs.Op) bool { return op.Kind == errorfs.OpFileWrite && isLog(op) }, false, false, false},
		{"old log's sync", logSync, false, false, false},
		{"old log's close", nil, true, false, false},
		{"old log's close in a flush", nil, true, true, false},
		{"directory's sync", dirSync, false, false, false},
		{"directory's sync in a flush", dirSync, false, true, false},
		{"recycled log's stat", nil, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faults := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
				if tc.fails != nil && tc.fails(op) {
					return fmt.Errorf("%s: %w", op.Path, syscall.ENOSPC)
				}
				return nil
			})}
			logFaults := logFaultFS{FS: vfs.NewMem(), closing: new(atomic.Bool), stat: new(atomic.Bool)}
			db := openWithKey(t, errorfs.Wrap(logFaults, faults))
			for i := 0; tc.recycled && i < 3; i++ { // a log is recyclable once its flush is cleaned up, shortly after
				if err := db.Flush(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			faults.On()
			logFaults.closing.Store(tc.closeFails)
			logFaults.stat.Store(tc.recycled)
			answered := make(chan error, 1)
			go func() {
				if tc.flush {
					answered <- db.Flush()
					return
				}
				b := db.NewBatch()
				defer b.Close()
				b.Set([]byte("large"), make([]byte, memTableSize/2+1))
				answered <- b.Commit()
			}()
			select {
			case err := <-answered:
				if answerOf(err) != "ErrFull" || !db.space.isParked() {
					t.Fatalf("rotation that failed answered %v, parked %v; want ErrFull, parked", err, db.space.isParked())
				}
			case <-time.After(parkedAnswerWait):
				t.Fatalf("the rotation's caller still waits after %v: %+v", parkedAnswerWait, db.Space())
			}
			got := parkedView(t, db)
			want := parkedObservation{Failed: true, NoSpace: true, Value: "1", Scanned: 1, SnapScanned: 1, Commit: true, Flush: true, Close: true}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("store whose log rotation failed (-want +got):\n%s", diff)
			}
		})
	}
}

// logFaultFS is a file system whose write-ahead logs' Close, or Stat,
// fails with ENOSPC (after closing them) while closing, or stat, is set.
// errorfs injects no error there (nor into a recycled file).
type logFaultFS struct {
	vfs.FS
	closing, stat *atomic.Bool
}

func (fs logFaultFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.log(name)(fs.FS.Create(name, category))
}

func (fs logFaultFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.log(newname)(fs.FS.ReuseForWrite(oldname, newname, category))
}

// log hands out name, when it is a write-ahead log, as a logFaultFile.
func (fs logFaultFS) log(name string) func(vfs.File, error) (vfs.File, error) {
	return func(f vfs.File, err error) (vfs.File, error) {
		if err != nil || !strings.HasSuffix(name, ".log") {
			return f, err
		}
		return logFaultFile{File: f, fs: fs}, nil
	}
}

// logFaultFile is a logFaultFS's write-ahead log.
type logFaultFile struct {
	vfs.File
	fs logFaultFS
}

func (f logFaultFile) Close() error {
	err := f.File.Close()
	if err == nil && f.fs.closing.Load() {
		err = fmt.Errorf("close: %w", syscall.ENOSPC)
	}
	return err
}

func (f logFaultFile) Stat() (vfs.FileInfo, error) {
	if f.fs.stat.Load() {
		return nil, fmt.Errorf("stat: %w", syscall.ENOSPC)
	}
	return f.File.Stat()
}
