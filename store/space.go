package store

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Disk reserve (contract §8). coupond keeps a reserve of free space on the
// file system that holds the store: below it the API refuses writes (503
// almacenamiento_lleno) before Pebble can meet ENOSPC, while reads,
// exports, deletions and admin commands go on using the reserve. The free
// space is read with statfs (vfs.FS.GetDiskUsage) at most every
// spaceRecheck and cached in atomics, so a decision pays two atomic loads.
//
// Should a commit still fail for want of space (the disk filled faster than
// the checks, or the reserve is off), Commit answers ErrFull. Pebble treats
// a failed write-ahead-log write as fatal (its logger's Fatalf, which
// panics here): Commit recovers that panic, answers ErrFull or ErrFailed,
// and refuses every later write, which would otherwise block on Pebble's
// stuck commit pipeline, until the process restarts. Nothing is
// acknowledged that was not synced.

// ErrFull reports that the store's file system is below its reserve of free
// space or ran out of it: a write was refused, nothing was written.
var ErrFull = errors.New("store: storage full")

// ErrFailed reports that an earlier commit failed inside Pebble in a way it
// cannot recover from in process: writes are refused until restart.
var ErrFailed = errors.New("store: writes stopped after a failed commit; restart coupond")

// spaceRecheck is how long a free-space reading is trusted.
const spaceRecheck = 250 * time.Millisecond

// space is the cached free-space state of the store's file system.
type space struct {
	reserve atomic.Uint64 // bytes; 0: no reserve
	checked atomic.Int64  // UnixNano of the last reading; 0: never
	busy    atomic.Bool   // a reading is under way
	low     atomic.Bool
	avail   atomic.Uint64
	total   atomic.Uint64
	known   atomic.Bool // the file system reports its usage
	failed  atomic.Bool // a commit failed fatally (see ErrFailed)
	noSpace atomic.Bool // ... for want of space (else an I/O error)
}

// SpaceStatus is what the store knows of its file system's free space.
type SpaceStatus struct {
	Reserve uint64 `json:"reserve_bytes"`
	Avail   uint64 `json:"available_bytes"`
	Total   uint64 `json:"total_bytes"`
	Known   bool   `json:"known"`  // the file system reports its usage
	Low     bool   `json:"low"`    // below the reserve: writes refused
	Failed  bool   `json:"failed"` // a commit failed fatally: restart needed
	// NoSpace tells, when Failed, that the failure was the disk's lack of
	// space; false: another I/O error (EIO, a read-only file system).
	NoSpace bool `json:"no_space,omitempty"`
}

// DefaultReserve is the contract's default reserve for a file system of
// total bytes: the larger of 1 GiB and 5 % of it.
func DefaultReserve(total uint64) uint64 { return max(1<<30, total/20) }

// DiskUsage reads the usage of the file system holding dir (fs nil: the
// real one).
func DiskUsage(fs vfs.FS, dir string) (vfs.DiskUsage, error) {
	if fs == nil {
		fs = vfs.Default
	}
	return fs.GetDiskUsage(dir)
}

// SetReserve sets the reserve of free space below which WritesRefused
// reports true (0 disables it) and reads the free space now.
func (db *DB) SetReserve(bytes uint64) {
	db.space.reserve.Store(bytes)
	db.refreshSpace(time.Now())
}

// WritesRefused reports whether writes from the API must be refused now:
// the file system is below the reserve, or a commit failed fatally. The
// answer is at most spaceRecheck old; it costs atomic loads except when a
// new reading is due.
func (db *DB) WritesRefused() bool {
	s := &db.space
	if s.failed.Load() {
		return true
	}
	if s.reserve.Load() == 0 {
		return false
	}
	now := time.Now()
	if now.UnixNano()-s.checked.Load() >= int64(spaceRecheck) && s.busy.CompareAndSwap(false, true) {
		db.refreshSpace(now)
		s.busy.Store(false)
	}
	return s.low.Load()
}

// Space returns the free-space state (refreshed when due).
func (db *DB) Space() SpaceStatus {
	db.WritesRefused()
	s := &db.space
	return SpaceStatus{Reserve: s.reserve.Load(), Avail: s.avail.Load(), Total: s.total.Load(), Known: s.known.Load(),
		Low: s.low.Load(), Failed: s.failed.Load(), NoSpace: s.noSpace.Load()}
}

func (db *DB) refreshSpace(now time.Time) {
	s := &db.space
	u, err := db.fs.GetDiskUsage(db.dir)
	s.checked.Store(now.UnixNano())
	if err != nil {
		// A file system that does not report its usage (tests' MemFS)
		// never counts as low: ENOSPC, if it comes, still gives ErrFull.
		s.known.Store(false)
		s.low.Store(false)
		return
	}
	s.known.Store(true)
	s.avail.Store(u.AvailBytes)
	s.total.Store(u.TotalBytes)
	s.low.Store(u.AvailBytes < s.reserve.Load())
}

// isNoSpace reports whether err (or a value Pebble's fatal log carried) is
// a file system's "no space left" or "quota exceeded".
func isNoSpace(v any) bool {
	err, ok := v.(error)
	return ok && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT))
}

// commitFailure converts what a failed Pebble commit gave (an error, or the
// value of a recovered Fatalf panic) to the error Commit returns.
func (db *DB) commitFailure(err error, fatal *pebbleFatal) error {
	if fatal != nil {
		db.space.failed.Store(true)
		db.space.low.Store(true)
		for _, a := range fatal.args {
			if isNoSpace(a) {
				db.space.noSpace.Store(true)
				return fmt.Errorf("store: commit: %w (%w): %s", ErrFull, ErrFailed, fatal.msg)
			}
		}
		return fmt.Errorf("store: commit: %w: %s", ErrFailed, fatal.msg)
	}
	if isNoSpace(err) {
		db.space.low.Store(true) // until the next reading says otherwise
		return fmt.Errorf("store: commit: %w: %w", ErrFull, err)
	}
	return fmt.Errorf("store: commit: %w", err)
}

// pebbleFatal is the panic value of quietLogger.Fatalf.
type pebbleFatal struct {
	msg  string
	args []any
}

func (p *pebbleFatal) String() string { return p.msg }
