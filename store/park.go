package store

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Pebble's fatal errors (contract §8: coupond never panics on a full disk).
//
// Pebble reports what it cannot recover from in process by calling its
// logger's Fatalf, which must not return: a write-ahead-log write that
// failed (in the committing goroutine), and a MANIFEST write that failed
// while a flush or a compaction installs its result (in Pebble's own
// goroutine). quietLogger.Fatalf tells the two apart by the stack:
//
//   - under recovering (Commit, CommitOrdered, Checkpoint, Open) it panics,
//     and recovering turns the panic into ErrFull or ErrFailed;
//   - anywhere else (Pebble's flush, compaction and table-statistics
//     goroutines, or one of ours waiting in Pebble) a panic would end the
//     process, so it fails the store (space.fail: noSpace when the error is
//     ENOSPC or EDQUOT) and parks the goroutine for good. A flush or
//     compaction that fails for want of space parks the same way
//     (quietLogger.listener): Pebble retries a failed flush at once, a spin
//     on a full disk, and writes would stall once the memtables are full.
//
// What a parked goroutine holds (Pebble v2.1.7): a MANIFEST failure parks
// in versionSet.UpdateVersionLocked with DB.mu and the MANIFEST lock held,
// a failed flush in flush1's FlushEnd with DB.mu held and the flush marked
// running, a failed compaction with its inputs marked compacting, a
// rotation of the write-ahead log that fails (a new log that cannot be
// made, walFS.logFailed; the old log that cannot be written, synced or
// closed, or the directory that cannot be synced, walFS.rotationFailed:
// rotateWAL panicked on each, with DB.mu released under a deferred unlock,
// a runtime fatal error no recover stops) in rotateWAL with the commit
// pipeline's lock held and DB.mu released (a commit's apply or a forced
// flush, on a goroutine their caller stops waiting for: see below). Nothing
// else is released: no later flush, compaction or MANIFEST write can run on
// a version state the failure left half-applied, and no file is deleted.
// Reads keep working: Get and iterators pin the current read state under
// its own lock (DB.readState), not DB.mu, and the store turns off
// read-sampled compactions, whose bookkeeping at an iterator's Close takes
// DB.mu. What takes DB.mu blocks, so the store avoids it once a goroutine
// is parked (space.parked): NewSnapshot reads the live store (writes are
// stopped), Snapshot.Close and Close release nothing, Metrics answers its
// last reading, Flush and Compact stop waiting and answer ErrFailed.
// Commits are refused before they reach Pebble (space.failed). The calls
// that reach Pebble's commit pipeline (a commit's apply, a checkpoint) or
// wait for a flush or a compaction (Flush, Compact, Open) run on a
// goroutine of their own, which their caller stops waiting for as soon as a
// goroutine parks (space.inPebble, unlessParked): the parked commit's
// caller, and every commit queued behind it on the pipeline's lock, answers
// ErrFailed (ErrFull for want of space) and so releases the locks it holds
// (a campaign's budget lock, a tenant's held events), and no request
// waiting on those locks hangs. Only the goroutine left in Pebble waits
// until the process ends; what it was committing was not acknowledged. An
// iterator opened before a flush swapped the read state, and closed after
// the park, would still block at its Close (it drops the last reference to
// an old version, under DB.mu). The process's restart (serve's in place
// restart once space, or file descriptors, are back, or the operator's)
// ends all of it: every acknowledged write was synced before it was
// acknowledged.

// recovering runs f, turning a panic out of Pebble on this goroutine
// (quietLogger.Fatalf, or any other) into f's error, as a failed commit:
// ErrFailed, with ErrFull when the disk's lack of space caused it. Fatalf
// panics only under it (onRecoveringStack), so call Pebble through it only
// where unwinding is safe: where Pebble holds no mutex it would unlock in
// a deferred call (a commit's log write and sync, Open).
//
//go:noinline
func recovering(sp *space, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			fatal, ok := p.(*pebbleFatal)
			if !ok {
				fatal = &pebbleFatal{msg: fmt.Sprint(p)}
			}
			err = sp.commitFailure(nil, fatal)
		}
	}()
	return f()
}

// onRecoveringStack reports whether the calling goroutine runs under
// recovering. A cold path: it walks the stack.
func onRecoveringStack() bool {
	return onStack(runtime.FuncForPC(reflect.ValueOf(recovering).Pointer()).Name())
}

// onStack reports whether the function named want (its full name, as
// runtime.Frame.Function gives it) is on the calling goroutine's stack. A
// cold path: it walks the stack.
func onStack(want string) bool {
	pcs := make([]uintptr, 128)
	n := runtime.Callers(2, pcs)
	for n == len(pcs) && len(pcs) < 1<<16 {
		pcs = make([]uintptr, 2*len(pcs))
		n = runtime.Callers(2, pcs)
	}
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == want {
			return true
		}
		if !more {
			return false
		}
	}
}

// Fatalf is Pebble's fatal error: it panics under recovering, and anywhere
// else fails the store and parks the goroutine (see above). It never
// returns.
func (q quietLogger) Fatalf(format string, args ...any) {
	q.stop(&pebbleFatal{msg: fmt.Sprintf("pebble: "+format, args...), args: args})
}

// listener is the store's Pebble event listener: a flush or compaction
// that failed for want of space or of file descriptors stops as a fatal
// error does (Fatalf).
// Damaged bytes in a file (a checksum that fails) are logged, naming the
// file, and the read that found them returns its error: Pebble's default
// there is Fatalf, which parked the reading goroutine forever (a request or
// admin check that never ended) and failed every later write. Pebble fills
// in the rest (its background errors go to Errorf).
func (q quietLogger) listener() *pebble.EventListener {
	return &pebble.EventListener{
		FlushEnd:        func(info pebble.FlushInfo) { q.shortOf("flush", info.Err) },
		CompactionEnd:   func(info pebble.CompactionInfo) { q.shortOf("compaction", info.Err) },
		DataCorruption:  q.damaged,
		WriteStallBegin: q.stalls.begin,
		WriteStallEnd:   q.stalls.end,
	}
}

// damaged logs a file of the store found damaged by its path alone (the
// info's bounds and details quote keys, which name customers), throttled as
// background errors are. It never blocks: Pebble calls it on read paths.
func (q quietLogger) damaged(info pebble.DataCorruptionInfo) {
	q.errs.report(time.Now(), fmt.Sprintf("store file %s is damaged (checksum mismatch): the reads that need it fail; "+
		"stop coupond and restore the latest backup (coupond admin restore)", info.Path))
}

// shortOf stops the background task op, as Fatalf does, when err is the
// disk's lack of space or the lack of file descriptors (EMFILE, ENFILE);
// otherwise it returns. Pebble retries a failed flush or compaction at
// once, in a loop: without descriptors that loop took more than a core
// until they came back (110,000 failed tries in 20 s), the store never
// failed, so serve never restarted in place, and the memtables it could
// not flush would stall writes. Stopped, the store fails with NoFiles, and
// serve restarts once it can open files again.
func (q quietLogger) shortOf(op string, err error) {
	if !isNoSpace(err) && !isNoFiles(err) {
		return
	}
	q.stop(&pebbleFatal{msg: fmt.Sprintf("pebble: %s failed: %v", op, err), args: []any{err}})
}

// stop ends the calling goroutine's task for fatal: a panic under
// recovering, which turns it into the caller's error; anywhere else park.
// It never returns.
func (q quietLogger) stop(fatal *pebbleFatal) {
	if onRecoveringStack() {
		panic(fatal)
	}
	q.park(fatal)
}

// park fails the store, logs why and blocks the calling goroutine forever.
func (q quietLogger) park(fatal *pebbleFatal) {
	noSpace := q.space.fail(fatal.args)
	q.space.parkOnce.Do(func() { close(q.space.parked) })
	q.errs.parked(fatal, noSpace)
	for {
		time.Sleep(time.Hour)
	}
}

// isParked reports whether one of Pebble's goroutines is parked (park).
func (s *space) isParked() bool {
	select {
	case <-s.parked:
		return true
	default:
		return false
	}
}

// unlessParked runs f, a Pebble call that waits for a background task
// (a flush, a compaction), and returns its error, or stoppedErr(op) as
// soon as a Pebble goroutine parks: f then waits until the process ends.
func (db *DB) unlessParked(op string, f func() error) error {
	if db.space.isParked() {
		return db.space.stoppedErr(op)
	}
	_, err := db.space.untilParked(op, f)
	return err
}

// inPebble runs f, a call that reaches Pebble's commit pipeline (a
// checkpoint's log sync; a commit's apply, Batch.applying), under
// recovering on a goroutine of its own, and returns f's error; or, once a
// Pebble goroutine parks first (parkedBefore), stoppedErr(op) with
// abandoned true. An abandoned f stays where it waits (parked itself,
// rotating the log, or queued behind the parked commit on the pipeline's
// lock) until the process ends, and keeps what it was given (the batch)
// till then.
func (s *space) inPebble(op string, f func() error) (abandoned bool, err error) {
	return s.untilParked(op, func() error { return recovering(s, f) })
}

// untilParked runs f on a goroutine of its own and returns its error, or
// stoppedErr(op) and abandoned true once a Pebble goroutine parks first.
func (s *space) untilParked(op string, f func() error) (abandoned bool, err error) {
	var ferr error
	done := make(chan struct{})
	go func() {
		ferr = f()
		close(done)
	}()
	if s.parkedBefore(done) {
		return true, s.stoppedErr(op)
	}
	return false, ferr
}

// parkedBefore waits until done is closed and reports false, or reports
// true as soon as a Pebble goroutine parks (space.parked) first. A done
// closed with the park is preferred to it: a call that returned nil was
// synced, and is acknowledged.
func (s *space) parkedBefore(done <-chan struct{}) bool {
	select {
	case <-done:
		return false
	case <-s.parked:
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
}

// parked logs, unthrottled, that a Pebble goroutine parked. Only a failure
// for want of space logs Pebble's message, which then names files alone;
// another one (an invariant broken) can quote keys, which name customers,
// so it logs the message's errno only.
func (p *pebbleErrors) parked(fatal *pebbleFatal, noSpace bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ev := p.log.Error().Bool("sin_espacio", noSpace)
	if noSpace {
		ev = ev.Str("error", fatal.msg)
	} else {
		ev = ev.Str("errno", errnoOf(fatal.args))
	}
	ev.Msg("store: a write inside the store failed and its task is stopped; writes are refused until coupond restarts " +
		"(serve restarts itself once the disk has space again if it was full, or once it can open files again if it ran out of descriptors; otherwise restart it)")
}

// errnoOf is the text of the first system error one of args carries, or "".
func errnoOf(args []any) string {
	for _, a := range args {
		var errno syscall.Errno
		if err, ok := a.(error); ok && errors.As(err, &errno) {
			return errno.Error()
		}
	}
	return ""
}
