package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walFS is the store's filesystem. Pebble recycles obsolete write-ahead
// logs: ReuseForWrite renames an old log and overwrites it, and an
// fdatasync that does not grow the file needs no filesystem metadata
// commit. Over HTTP at 2,000 decisions/s, each of which syncs the log, that
// took the median decision from 2.2 to 1.3–1.5 ms and the share answered
// under 1 ms server-side from 31 to 55–66 % (60 s runs). But a recycled log
// keeps the bytes of its old records past the end of what is written into
// it, so while PurgeWAL runs (purging > 0) ReuseForWrite removes the old
// log and creates the new one empty instead: every log holding bytes
// written before a deletion's purge is removed by it, and logs recycled
// afterwards only hold bytes written after it.
type walFS struct {
	vfs.FS
	purging *atomic.Int32 // PurgeWAL calls running
	// dir is the store's directory, opened set once Pebble's Open has
	// returned and log the store's logger: see logFailed.
	dir    string
	opened *atomic.Bool
	log    quietLogger
}

// ReuseForWrite recycles oldname as newname, or, during a purge, removes
// it and creates newname empty. Either way the log is handed out as a
// logFile. A failure parks the caller (logFailed).
func (fs walFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.purging.Load() == 0 {
		f, err := fs.FS.ReuseForWrite(oldname, newname, category)
		fs.logFailed(newname, err)
		return fs.logFile(newname, f, err)
	}
	if err := fs.FS.Remove(oldname); err != nil {
		fs.logFailed(newname, err)
		return nil, err
	}
	return fs.Create(newname, category)
}

// Create creates name; a write-ahead log is handed out as a logFile, and
// one that cannot be created parks the caller (logFailed).
func (fs walFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	fs.logFailed(name, err)
	return fs.logFile(name, f, err)
}

// OpenDir opens the directory name; the store's directory is handed out
// as a logDir.
func (fs walFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil || name != fs.dir {
		return f, err
	}
	return logDir{File: f, fs: fs}, nil
}

// logFailed fails the store and parks the calling goroutine for good
// (quietLogger.park) when err is the failure to make name, a write-ahead
// log of the open store; the caller of the commit or flush that rotated
// the log stops waiting for it then (space.inPebble, unlessParked).
// Pebble makes a new log when it rotates the memtable (one full, in a
// commit; a flush, the deletion's included) and panics on that error with
// its mutex released, under a deferred unlock: a runtime fatal error that
// no recover stops, so the process ended. Such errors come with no bytes
// to write: no descriptor left (EMFILE), no inode left (ENOSPC, EDQUOT),
// the directory's permissions or a file system remounted read-only
// (EACCES, EPERM, EROFS). Errors at Open (not yet opened: Open returns
// them) and of the logs a checkpoint copies into a backup (not in dir) are
// returned as they are.
func (fs walFS) logFailed(name string, err error) {
	if err == nil || !fs.opened.Load() || !strings.HasSuffix(name, ".log") || fs.PathDir(name) != fs.dir {
		return
	}
	fs.log.park(&pebbleFatal{msg: fmt.Sprintf("pebble: make write-ahead log %s: %v", name, err), args: []any{err}})
}

// rotateWAL is the function of Pebble that closes the write-ahead log in
// use and makes the next one (Pebble v2.1.7's DB.rotateWAL).
const rotateWAL = "github.com/cockroachdb/pebble/v2.(*DB).rotateWAL"

// rotationFailed parks the calling goroutine for good, failing the store
// (quietLogger.park), when it is rotating the write-ahead log (rotateWAL
// is on its stack) and what failed there, err, would make Pebble panic:
// the old log that cannot be closed (its last records or its sync failed,
// here or in the log's flush goroutine before), or the directory that
// cannot be synced after the new log was made. rotateWAL panics on those
// errors with DB.mu released, under a deferred unlock: a runtime fatal
// error ("sync: unlock of unlocked mutex") that no recover stops (so it
// does on a recycled log's Stat, which a disk's I/O error alone fails). The
// goroutine parks as logFailed's does, with the commit pipeline's lock
// held, and the commit's caller stops waiting (space.inPebble). Anywhere
// else (Pebble's Close of the store) it returns, and err is Pebble's.
func (fs walFS) rotationFailed(what string, err error) {
	if err == nil || !onStack(rotateWAL) {
		return
	}
	fs.log.park(&pebbleFatal{msg: fmt.Sprintf("pebble: rotate write-ahead log: %s: %v", what, err), args: []any{err}})
}

// logFile hands out the write-ahead log name of the store (*.log) as a
// logFile; other files as they are.
func (fs walFS) logFile(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &logFile{File: f, name: name, fs: fs}, nil
}

// logFile is a write-ahead log of the store. Its Preallocate does
// nothing: Pebble preallocates every log 1.1 times MemTableSize (about
// 70 MB) ahead of its writes, and after an open it fills memtables that
// start at 256 KB and double, each with its own log, until 32 MB wait to
// be flushed: a burst of writes after a start left seven logs holding
// about 490 MB of the disk for 22 MB of records. That alone took a 600 MB
// data disk below a 200 MiB reserve, and with the store failed by a full
// disk the free space stayed below the reserve once everything else was
// freed: serve neither restarted in place nor, restarted, opened the
// store. The records of a log are synced as they are written whether or
// not its blocks were reserved first, so nothing acknowledged depends on
// preallocation.
//
// It keeps the first error of its writes and syncs: Pebble's log writer
// keeps it too, and fails the log's Close with it, which rotateWAL would
// turn into a panic; Close parks instead (walFS.rotationFailed).
type logFile struct {
	vfs.File
	name   string
	fs     walFS
	failed atomic.Pointer[error] // the first write or sync that failed
}

// Preallocate reserves nothing.
func (*logFile) Preallocate(offset, length int64) error { return nil }

func (f *logFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.keep(err)
}

func (f *logFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.keep(err)
}

func (f *logFile) Sync() error     { return f.keep(f.File.Sync()) }
func (f *logFile) SyncData() error { return f.keep(f.File.SyncData()) }

func (f *logFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.keep(err)
}

// Stat is the log's; when it fails while the log rotates (Pebble reads
// the size of a recycled log so), it parks (walFS.rotationFailed).
func (f *logFile) Stat() (vfs.FileInfo, error) {
	info, err := f.File.Stat()
	f.fs.rotationFailed("stat "+f.name, err)
	return info, err
}

// keep records err when it is the log's first failure, and returns it.
func (f *logFile) keep(err error) error {
	if err != nil {
		first := err // only a failure escapes to the heap
		f.failed.CompareAndSwap(nil, &first)
	}
	return err
}

// Close closes the log; when it, or a write or sync of the log before it,
// failed during a rotation, it parks (walFS.rotationFailed).
func (f *logFile) Close() error {
	err := f.File.Close()
	if first := f.failed.Load(); first != nil {
		f.fs.rotationFailed("close "+f.name, *first)
	}
	f.fs.rotationFailed("close "+f.name, err)
	return err
}

// logDir is the store's directory, opened: a Sync that fails while the
// write-ahead log rotates parks (walFS.rotationFailed).
type logDir struct {
	vfs.File
	fs walFS
}

func (d logDir) Sync() error {
	err := d.File.Sync()
	d.fs.rotationFailed("sync "+d.fs.dir, err)
	return err
}

// purgeOwedKey is a mark that a batch deleted records naming customers
// (a deletion completed, a batch job's request dropped) and the purge it
// owes (PurgeOwed) has not finished since: the global mark followed by one
// key to compact first (a completed deletion's queue entry, a request
// chunk: keys that hold no customer data, whose values, deleted with the
// mark's batch, named customers). A mark of an older version has no key.
func purgeOwedKey(compact []byte) []byte {
	return append([]byte{spaceGlobal, globalPurgeOwed}, compact...)
}

// purgeOwedSpan bounds the purge marks.
func purgeOwedSpan() (lower, upper []byte) {
	return []byte{spaceGlobal, globalPurgeOwed}, []byte{spaceGlobal, globalPurgeOwed + 1}
}

// OwePurge marks, in a batch that deletes records naming customers (the
// batch that marks deletions completado and deletes their queue entries;
// the one that drops a finished batch job's request chunks), that those
// records (compact, their keys) must be compacted out of the sstables and
// the logs and MANIFESTs still holding their bytes purged. Written with
// the deletion, the marks outlive a crash or a failed purge between the
// two, when nothing else would ask for them again.
func (b *Batch) OwePurge(compact [][]byte) {
	if len(compact) == 0 {
		b.Set(purgeOwedKey(nil), []byte{1})
	}
	for _, k := range compact {
		b.Set(purgeOwedKey(k), []byte{1})
	}
}

// PurgeOwed, if a batch marked a purge owed (OwePurge), compacts the keys
// the marks name (CompactPoints), purges the write-ahead logs (PurgeWAL)
// and MANIFESTs (PurgeManifest), then clears the marks it read; it does
// nothing when none is set. Marks that name a finished job's request
// chunks alone owe the compaction alone (owedMarks). The marks stay if a
// step fails, so a later call redoes it. While a snapshot is open (one
// older than a mark's batch, a streamed export or an evaluation, keeps
// the values the batch deleted through a compaction) it compacts nothing
// and the marks stay, for a call with none open. Callers serialise their
// calls.
func (db *DB) PurgeOwed(ctx context.Context) error {
	marks, compact, purgeLogs, err := db.owedMarks()
	if err != nil || len(marks) == 0 {
		return err
	}
	// Looked at after the scan: a snapshot opened later is newer than
	// every mark read. One open would keep the deleted values through the
	// compaction, in a bottom-level table with their tombstones, which no
	// later compaction of the keys rewrites (Pebble's Compact stops above
	// the bottom level): the compaction waits for a call with none open.
	pinned := len(compact) > 0 && !db.AwaitSnapshots(ctx, 0)
	if len(compact) > 0 && !pinned {
		if err := db.CompactPoints(ctx, compact); err != nil {
			return err
		}
	}
	if purgeLogs {
		if err := db.PurgeWAL(ctx); err != nil {
			return err
		}
		if err := db.PurgeManifest(ctx); err != nil {
			return err
		}
	}
	if pinned {
		return nil
	}
	b := db.NewBatch()
	defer b.Close()
	for _, k := range marks {
		b.Delete(k)
	}
	return b.Commit()
}

// owedMarks reads the purge marks (OwePurge): their keys, the keys they
// name to compact, and whether one owes the purge of the logs and
// MANIFESTs, every mark but a finished job's request chunk's. A chunk's
// key names no customer, and the bytes of its values in the logs go with
// the purge of the next deletion to complete (PurgeWAL leaves no log
// written before it), a deletion of one of the job's customers included:
// the purge of its logs after every finished job cost a dozen forced
// flushes and the compactions they bring, a pass in two while jobs finish.
func (db *DB) owedMarks() (marks, compact [][]byte, purgeLogs bool, err error) {
	lo, hi := purgeOwedSpan()
	err = db.Scan(lo, hi, func(k, _ []byte) error {
		marks = append(marks, slices.Clone(k))
		named := k[len(lo):]
		if len(named) > 0 {
			compact = append(compact, slices.Clone(named))
		}
		purgeLogs = purgeLogs || !isJobChunkKey(named)
		return nil
	})
	return marks, compact, purgeLogs, err
}

// walRotations is how many WAL rotations PurgeWAL makes: more than the
// logs Pebble keeps for recycling (MemTableStopWritesThreshold + 1, with
// the default threshold 2), so every log written before the call has been
// reused (and so removed by walFS) or deleted.
const walRotations = 5

// PurgeWAL makes sure no write-ahead log written before the call stays on
// disk: it flushes the memtable (so the data lives only in sstables) and
// rotates the WAL past every recyclable log. Deletion calls it after
// compacting what it removed, so tombstones and old records that name a
// deleted customer leave no bytes behind in logs either. Once ctx ends it
// stops, with ctx's error, at its next paced flush (flushpace.go).
func (db *DB) PurgeWAL(ctx context.Context) error {
	db.walPurging.Add(1)
	defer db.walPurging.Add(-1)
	for i := 0; i < walRotations; i++ {
		if err := db.writeAndFlush(ctx, byte(i)); err != nil {
			return err
		}
	}
	return nil
}

// purgeRoundKey is the key writeAndFlush writes: 0x01 'W' → a byte.
func purgeRoundKey() []byte { return []byte{spaceGlobal, globalPurgeRound} }

// writeAndFlush commits one small global key (purgeRoundKey, value v) and
// flushes the memtable: one round of PurgeWAL and PurgeManifest.
func (db *DB) writeAndFlush(ctx context.Context, v byte) error {
	b := db.NewBatch()
	b.Set(purgeRoundKey(), []byte{v})
	err := b.Commit()
	b.Close()
	if err != nil {
		return err
	}
	return db.flushMemtable(ctx)
}

// PurgeManifest makes sure no MANIFEST written before the call stays on
// disk. A MANIFEST records the first and last key of every sstable, and
// keys can name a customer; Pebble keeps the current MANIFEST and one
// previous one, and (with MaxManifestFileSize tiny) starts a new one when
// the edits since the last one touch more files than the store holds. Each
// round writes one key and flushes (one edit, one file); it stops when every
// MANIFEST of before the call is gone, or, with ctx's error, once ctx ends.
func (db *DB) PurgeManifest(ctx context.Context) error {
	old := map[string]bool{}
	ents, err := db.fs.List(db.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e, "MANIFEST-") {
			old[e] = true
		}
	}
	for i := 0; i < 100000; i++ {
		if err := db.writeAndFlush(ctx, byte(i)); err != nil {
			return err
		}
		ents, err := db.fs.List(db.dir)
		if err != nil {
			return err
		}
		left := false
		for _, e := range ents {
			left = left || old[e]
		}
		if !left {
			return nil
		}
	}
	return fmt.Errorf("store: old MANIFEST still there")
}
