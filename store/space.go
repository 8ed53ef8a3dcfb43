package store

import (
	"errors"
	"fmt"
	"sync"
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
// panics under Commit: see park.go): Commit recovers that panic, answers
// ErrFull or ErrFailed, and refuses every later write, which would
// otherwise block on Pebble's stuck commit pipeline. A fatal error or a
// flush or compaction short of space in one of Pebble's own goroutines
// parks that goroutine and fails the store the same way (park.go); a
// commit or checkpoint already under way then answers ErrFailed at once
// rather than wait for it (space.inPebble), so no request hangs on it or
// on the locks its caller holds. The failed store cannot be mended in
// process: serve restarts itself in place once space is back when the
// cause was the lack of space (SpaceStatus NoSpace), or once it can open
// files again when it was the lack of file descriptors (NoFiles), and an
// operator must restart it after any other I/O error.
// Nothing is acknowledged that was not synced.

// ErrFull reports that the store's file system is below its reserve of free
// space or ran out of it: a write was refused, nothing was written.
var ErrFull = errors.New("store: storage full")

// ErrFailed reports that an earlier write failed inside Pebble in a way it
// cannot recover from in process: writes are refused until the process
// restarts (serve restarts itself once space is back when the disk was
// full, once it can open files again when it ran out of descriptors; any
// other I/O error needs the operator).
var ErrFailed = errors.New("store: writes stopped after a failed write")

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
	noFiles atomic.Bool // ... for want of file descriptors (EMFILE, ENFILE)
	// resumes: the process restarts itself once space is back (SetResumes).
	resumes atomic.Bool
	// parked is closed, once (parkOnce), when one of Pebble's goroutines is
	// parked for good (park.go): it may hold Pebble's mutex.
	parked   chan struct{}
	parkOnce sync.Once
	// dir is the store's directory, which the errors of writes name.
	dir string
	// cause is what the file system said of the write that failed the
	// store (failureCause), set once with failed.
	cause atomic.Pointer[string]
}

// newSpace is the free-space state of the store in dir.
func newSpace(dir string) *space { return &space{parked: make(chan struct{}), dir: dir} }

// SpaceStatus is what the store knows of its file system's free space.
type SpaceStatus struct {
	Reserve uint64 `json:"reserve_bytes"`
	Avail   uint64 `json:"available_bytes"`
	Total   uint64 `json:"total_bytes"`
	Known   bool   `json:"known"`  // the file system reports its usage
	Low     bool   `json:"low"`    // below the reserve: writes refused
	Failed  bool   `json:"failed"` // a write failed fatally: writes resume at a restart
	// NoSpace tells, when Failed, that the failure was the disk's lack of
	// space; false: another I/O error (EIO, a read-only file system).
	NoSpace bool `json:"no_space,omitempty"`
	// NoFiles tells, when Failed, that the failure was the lack of file
	// descriptors (EMFILE: the process's limit; ENFILE: the system's),
	// which heals as descriptors are closed.
	NoFiles bool `json:"no_files,omitempty"`
	// Resumes tells that the process restarts itself (in place) when
	// Failed and NoSpace once the disk has space again, when Failed and
	// NoFiles once it can open files again (serve; SetResumes).
	Resumes bool `json:"resumes,omitempty"`
}

// RestartNeeded reports whether writes are stopped until an operator
// restarts coupond: the store failed and will not restart itself.
func (s SpaceStatus) RestartNeeded() bool {
	return s.Failed && !((s.NoSpace || s.NoFiles) && s.Resumes)
}

// SetResumes records whether the process restarts itself in place once the
// disk has space again after a write failed for want of it, or once it
// can open files again after a write failed for want of descriptors
// (serve does; false when it found that it cannot). It changes what SpaceStatus, and
// so /readyz and the 503's mensaje, say of a failed store.
func (db *DB) SetResumes(on bool) { db.space.resumes.Store(on) }

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
	s := db.space
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
	s := db.space
	return SpaceStatus{Reserve: s.reserve.Load(), Avail: s.avail.Load(), Total: s.total.Load(), Known: s.known.Load(),
		Low: s.low.Load(), Failed: s.failed.Load(), NoSpace: s.noSpace.Load(), NoFiles: s.noFiles.Load(), Resumes: s.resumes.Load()}
}

func (db *DB) refreshSpace(now time.Time) {
	s := db.space
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

// isNoFiles reports whether v, as isNoSpace's, is the lack of file
// descriptors: the process's (EMFILE) or the system's (ENFILE).
func isNoFiles(v any) bool {
	err, ok := v.(error)
	return ok && (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE))
}

// commitFailure converts what a failed Pebble commit gave (an error, or the
// value of a recovered Fatalf panic) to the error Commit returns: a
// *WriteError for the disk's lack of space or a failure that stops writes.
func (s *space) commitFailure(err error, fatal *pebbleFatal) error {
	if fatal != nil {
		full := s.fail(fatal.args)
		return &WriteError{Op: "commit", Dir: s.dir, full: full, noFiles: s.noFiles.Load(), stopped: true, cause: s.failureText(), err: firstError(fatal.args)}
	}
	if isNoSpace(err) {
		s.low.Store(true) // until the next reading says otherwise
		return &WriteError{Op: "commit", Dir: s.dir, full: true, cause: failureCause(err), err: err}
	}
	return fmt.Errorf("store: commit: %w", err)
}

// fail marks the store failed (writes stop), for want of space when one of
// args (what Pebble's fatal error carried) is ENOSPC or EDQUOT, which it
// reports, and for want of file descriptors when one is EMFILE or ENFILE.
// The first failure's cause is kept (failureText).
func (s *space) fail(args []any) (noSpace bool) {
	noFiles := false
	for _, a := range args {
		noSpace = noSpace || isNoSpace(a)
		noFiles = noFiles || isNoFiles(a)
	}
	if err := firstError(args); err != nil {
		cause := failureCause(err)
		s.cause.CompareAndSwap(nil, &cause)
	}
	if noSpace {
		s.noSpace.Store(true) // before failed: a reader of failed sees why
	} else if noFiles && !s.failed.Load() {
		s.noFiles.Store(true)
	}
	s.failed.Store(true)
	s.low.Store(true)
	return noSpace
}

// failureText is the cause of the failure that stopped writes ("" when
// unknown).
func (s *space) failureText() string {
	if c := s.cause.Load(); c != nil {
		return *c
	}
	return ""
}

// firstError is the first error among args, nil when none is.
func firstError(args []any) error {
	for _, a := range args {
		if err, ok := a.(error); ok {
			return err
		}
	}
	return nil
}

// failureCause is what the file system said of a failed write: the
// errno's text ("no space left on device") when err carries one, else
// err's text. Pebble's errors repeat its name and the file's path, which
// the store's errors name once (WriteError.Dir).
func failureCause(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// stoppedErr is the error of an operation op refused or abandoned on a
// failed store: ErrFailed, with ErrFull when the disk's lack of space
// caused it.
func (s *space) stoppedErr(op string) error {
	return &WriteError{Op: op, Dir: s.dir, full: s.noSpace.Load(), noFiles: s.noFiles.Load(), stopped: true, cause: s.failureText()}
}

// WriteError is the error of a store operation refused or abandoned for
// want of space (errors.Is ErrFull) or because an earlier write failed
// and writes are stopped (errors.Is ErrFailed). Its text says it once:
// what happened, to which store directory, the file system's cause, and
// what the operator does about it. It unwraps to the file system's error
// when it has it (errors.Is syscall.ENOSPC).
type WriteError struct {
	Op  string // "commit", "flush", "checkpoint", ...
	Dir string // the store's directory (<data-dir>/db)
	// full: the disk's lack of space; noFiles: the lack of file
	// descriptors; stopped: writes are stopped until the process restarts.
	full, noFiles, stopped bool
	cause                  string // failureCause of the failed write; "" when unknown
	err                    error
}

func (e *WriteError) Error() string {
	what, todo := "a write failed", "writes are stopped until coupond restarts: look for the disk's errors (dmesg), then restart coupond"
	switch {
	case e.full && e.stopped:
		what, todo = "disk full", "writes are stopped until coupond restarts: free space on that file system (serve restarts itself once there is; run an admin command again then)"
	case e.full:
		what, todo = "disk full", "nothing was written: free space on that file system, then try again"
	case e.noFiles:
		what, todo = "out of file descriptors", "writes are stopped until coupond restarts: raise its limit of open files (LimitNOFILE) or end what holds them (serve restarts itself once it can open files again; run an admin command again then)"
	}
	if e.Op == "open" && e.stopped && (e.full || e.noFiles) {
		// Not a running serve's: the store did not open, and nothing
		// restarts this process but the operator or systemd's unit.
		fix := "free space on that file system"
		if !e.full {
			fix = "raise its limit of open files (LimitNOFILE) or end what holds them"
		}
		todo = "the store did not open: " + fix + ", then start coupond again (systemd's unit starts serve again by itself)"
	}
	msg := fmt.Sprintf("store: %s: %s at %s", e.Op, what, e.Dir)
	if e.cause != "" {
		msg += " (" + e.cause + ")"
	}
	return msg + ": " + todo
}

// Is reports whether target is ErrFull (the disk's lack of space) or
// ErrFailed (writes stopped) and e is one.
func (e *WriteError) Is(target error) bool {
	return (target == ErrFull && e.full) || (target == ErrFailed && e.stopped)
}

func (e *WriteError) Unwrap() error { return e.err }

// pebbleFatal is the panic value of quietLogger.Fatalf.
type pebbleFatal struct {
	msg  string
	args []any
}

func (p *pebbleFatal) String() string { return p.msg }
