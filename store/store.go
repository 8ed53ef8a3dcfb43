package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
)

// Sentinel errors.
var (
	ErrNotFound = errors.New("store: not found")
	ErrExists   = errors.New("store: already exists")
)

// DB is the coupond store. It is safe for concurrent use.
//
// Tenant and credential records are few and read on every request, so DB
// keeps them cached in memory; every write to them goes through DB, which
// commits with Sync and then updates the cache.
type DB struct {
	pdb *pebble.DB
	// pebbleErrs logs the errors Pebble reports in the background (SetLog).
	pebbleErrs *pebbleErrors
	fs         vfs.FS // with dir: where PurgeManifest looks for MANIFEST files
	dir        string
	// walPurging counts running PurgeWAL calls; walFS reads it.
	walPurging *atomic.Int32
	pacer      *commitPacer
	paced      bool // the pacer spaces the WAL fsyncs (on-disk stores)

	mu      sync.RWMutex
	tenants map[string]*Tenant
	creds   map[string]*Credential
	touched map[string]bool // credentials whose LastUsed is not stored yet
	// unreadable describes the tenant and credential records Open could
	// not decode (see loadCaches); fixed after Open.
	unreadable []string
	// foundLog is the damaged-log note this Open kept (logcheck.go).
	foundLog *LogDamage
	// lock is the directory lock taken before the log check and held
	// until Close (Pebble's Close leaves a lock passed to Open held).
	lock *pebble.Lock

	space *space // free space and the reserve (space.go), shared with quietLogger
	// snaps are the Pebble snapshots open now (AwaitSnapshots).
	snaps openSnapshots
	// lastMetrics is Metrics' last reading, its answer once a Pebble
	// goroutine is parked (park.go).
	lastMetrics atomic.Pointer[Metrics]
	stalls      *writeStalls // Pebble's write stalls (Metrics)
	// flushMu serialises the store's forced flushes and their pacing
	// (flushpace.go).
	flushMu sync.Mutex
	// tenantDelMu serialises the steps of tenant deletions
	// (tenantdel.go), which hold mu only to update the caches, never
	// through a scan or a synced commit: every request reads the caches.
	tenantDelMu sync.Mutex
	// tenantDelHook, when set (tests), is called by each step of a
	// tenant deletion just before its synced commit (after its scan),
	// with tenantDelMu held and mu not, and the state the step writes
	// ("" for the sweep).
	tenantDelHook func(tenant, state string)
	// secretsMu serialises RotateSecrets with the readers of keys.json
	// that must see the file and the store's fingerprint agree (HoldSecrets).
	secretsMu sync.RWMutex
	// rotateHook, when set (tests), is called by RotateSecrets before each
	// of its steps (rotateStep); an error is the step's failure.
	rotateHook func(step string) error
	// erased are the tenants whose records a deletion step erased
	// (sealTenant): a batch that sets a key in one's key space is refused.
	erased erasedTenants
}

// memTableSize is the store's memtable size (Open explains it).
const memTableSize = 64 << 20

// Open opens (creating if needed) the store in dir. fs nil means the real
// filesystem, with every file and directory the store creates owner-only
// (0600 / 0700); tests and the lab pass NewMemFS().
func Open(dir string, fs vfs.FS) (*DB, error) {
	onDisk := fs == nil || fs == vfs.Default // before the wrapping below hides vfs.Default
	if fs == nil {
		fs = ownerOnlyFS{vfs.Default}
	}
	purging, opened := new(atomic.Int32), new(atomic.Bool)
	errs := &pebbleErrors{log: zerolog.Nop()}
	sp := newSpace(dir)
	stalls := new(writeStalls)
	logger := quietLogger{errs: errs, space: sp, stalls: stalls}
	fs = walFS{FS: fs, purging: purging, dir: dir, opened: opened, log: logger}
	pacer := new(commitPacer)
	opts := storeOptions(fs, logger, pacer, onDisk)
	// The log is checked under the directory lock, so that no other
	// process writes it meanwhile.
	lock, damage, err := lockAndCheckLog(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	opts.Lock = lock
	if err := refuseNewerFormat(dir, opts); err != nil {
		lock.Close()
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	pdb, err := openPebble(sp, dir, opts)
	if err != nil && !sp.isParked() { // a parked Open keeps the lock: its Pebble lives on
		lock.Close()
	}
	if pebble.IsCorruptionError(err) {
		if logs := damagedLogs(fs, dir); len(logs) > 0 {
			err = fmt.Errorf("%w; damaged: %s", err, strings.Join(logs, ", "))
		}
		return nil, fmt.Errorf("store: open %s: a file of the store is damaged (%w); restore the latest backup (coupond admin restore)", dir, err)
	}
	var says *WriteError // names the store and the operation already
	if errors.As(err, &says) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	opened.Store(true)
	db := &DB{pdb: pdb, pebbleErrs: errs, fs: fs, dir: dir, walPurging: purging, pacer: pacer, paced: onDisk, tenants: map[string]*Tenant{}, creds: map[string]*Credential{},
		space: sp, lock: lock, stalls: stalls}
	if err := db.settleFormat(); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	if err := db.loadCaches(); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	db.keepFound(damage)
	return db, nil
}

// storeOptions are the store's Pebble options over fs, with logger's log
// and events, and pacer's group commit on a store on disk (onDisk).
func storeOptions(fs vfs.FS, logger quietLogger, pacer *commitPacer, onDisk bool) *pebble.Options {
	// A block cache large enough for the working set of features and recent
	// events (the default 8 MB made every point read decompress blocks), and
	// bloom filters so that event_id existence checks, mostly misses, skip
	// sstables without reading them. 192 MB rather than 256: with the Go
	// heap's 192 MiB soft limit and two 64 MB memtables, a 1,000,000-customer
	// batch job (whose scan fills the cache) peaked at 469-543 MiB RSS with
	// 256 MB and 472 MiB with 192 (limit 512); 160 MB cost decision p99 at
	// 100,000 customers.
	//
	// MemTableSize 64 MB: a 32 MB memtable made the in-process decision
	// faster (38-52 µs against 57: fewer cache misses per skiplist insert),
	// but over HTTP at 2,000 decisions/s it doubled the flushes, and a
	// flush's writes stall the WAL fdatasync of the decisions behind it
	// (paired runs: p99 20-29 ms against 16 ms).
	//
	// MaxManifestFileSize 1 makes Pebble start new MANIFESTs as often as its
	// rotation rule allows; PurgeManifest (called by deletion) forces the
	// rest, because the manifest records sstable boundary keys that can name
	// a deleted customer.
	opts := &pebble.Options{FS: fs, Logger: logger, CacheSize: 192 << 20, MemTableSize: memTableSize, MaxManifestFileSize: 1,
		EventListener: logger.listener()}
	// No read-triggered compactions: an iterator that sampled reads takes
	// Pebble's mutex as it closes, and a goroutine parked on a full disk
	// (park.go) may hold that mutex: reads must go on meanwhile.
	opts.Experimental.ReadSamplingMultiplier = -1
	if onDisk {
		opts.WALMinSyncInterval = pacer.interval // group commit (groupcommit.go); in-memory stores have no fsync to share
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].FilterType = pebble.TableFilter
	}
	opts.EnsureDefaults()
	return opts
}

// openPebble is pebble.Open under recovering, which returns the store's
// stopped error (stoppedErr) as soon as one of Pebble's goroutines parks
// (park.go) instead of waiting for it: Open replays the write-ahead logs
// and flushes what they held, and a flush that cannot write its table or
// its MANIFEST edit (no space or no inode left, or the reserve turned off)
// parks, while Open waited for it forever: serve hung at its start, deaf
// to SIGTERM. The Open left waiting holds the directory's lock until the
// process ends.
func openPebble(sp *space, dir string, opts *pebble.Options) (*pebble.DB, error) {
	type result struct {
		db  *pebble.DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = recovering(sp, func() (err error) { r.db, err = pebble.Open(dir, opts); return err })
		done <- r
	}()
	select {
	case r := <-done:
		return r.db, r.err
	case <-sp.parked:
		select {
		case r := <-done: // opened as the park came: Open's own answer
			return r.db, r.err
		default:
			return nil, sp.stoppedErr("open")
		}
	}
}

// keepFound commits the note of the damaged log found at open (nil: none)
// and removes its pending file. Not kept (a full disk, say), the note is
// still logged by serve, and the pending file keeps it for the next open.
func (db *DB) keepFound(damage *LogDamage) {
	if damage == nil {
		return
	}
	damage.Kept = db.keepLogDamage(damage) == nil
	if damage.Kept {
		_ = db.fs.Remove(db.fs.PathJoin(db.dir, pendingLogNote))
	}
	db.foundLog = damage
}

// lockAndCheckLog creates dir if needed, takes its lock and checks the
// newest write-ahead log (findLogDamage).
func lockAndCheckLog(fs vfs.FS, dir string) (*pebble.Lock, *LogDamage, error) {
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	lock, err := pebble.LockDirectory(dir, fs)
	if err != nil {
		return nil, nil, err
	}
	return lock, findLogDamage(fs, dir, time.Now()), nil
}

// Close flushes and closes the store. It first waits, up to
// closeSnapshotWait, for the snapshots still open to be closed (a reader
// ending its walk, such as an export whose connection was closed): Pebble
// reports one still open at its Close as leaked, and its reads after that
// panic. Once one of Pebble's goroutines is parked (park.go) it closes
// nothing and returns ErrFailed at once: Pebble's Close would wait for that
// goroutine forever. The process must then end
// (or restart itself in place) without it; every acknowledged write is on
// disk already.
func (db *DB) Close() error {
	if db.space.isParked() {
		return db.space.stoppedErr("close")
	}
	db.AwaitSnapshots(context.Background(), closeSnapshotWait)
	err := db.pdb.Close()
	if db.lock != nil {
		err = errors.Join(err, db.lock.Close())
	}
	return err
}

// NewMemFS returns an empty in-memory file system for Open: the lab's
// simulated stores and tests.
func NewMemFS() vfs.FS { return vfs.NewMem() }

// Flush writes the memtable out to an sstable. After a failed commit, or
// when the write-ahead log cannot be written (walWritable), it answers
// ErrFailed (with ErrFull when the disk is full).
func (db *DB) Flush() error {
	if err := db.walWritable("flush"); err != nil {
		return err
	}
	return db.flushMemtable(context.Background())
}

// flushMemtable is Pebble's Flush, paced so as to stall no commit
// (flushpace.go), which returns ErrFailed (see stoppedErr) instead of
// waiting forever when the flush's goroutine parks (park.go), and ctx's
// error, flushing nothing, when ctx ends during the pacing.
func (db *DB) flushMemtable(ctx context.Context) error {
	err := db.unlessParked("flush", func() error { return db.pacedFlush(ctx) })
	if err != nil {
		return fmt.Errorf("store: flush: %w", err)
	}
	return nil
}

// Get returns a copy of the value at key, or ErrNotFound.
func (db *DB) Get(key []byte) ([]byte, error) { return get(db.pdb, key) }

// Get is DB.Get over the snapshot.
func (s *Snapshot) Get(key []byte) ([]byte, error) {
	if s.s == nil {
		return s.db.Get(key)
	}
	return get(s.s, key)
}

// Reader is what a consistent read needs, met by the DB (the live store)
// and by a Snapshot (the store as of one moment).
type Reader interface {
	Get(key []byte) ([]byte, error)
	GetMany(keys [][]byte, fn func(i int, value []byte) error) error
	Scan(lower, upper []byte, fn func(key, value []byte) error) error
}

func get(r pebble.Reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get: %w", namingDamage(err))
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, nil
}

// GetJSON decodes the JSON value at key into v, or returns ErrNotFound.
func (db *DB) GetJSON(key []byte, v any) error {
	b, err := db.Get(key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("store: decode %q: %w", key[:min(len(key), 16)], err)
	}
	return nil
}

// LoadJSON returns the JSON value at key decoded into a new T, or nil and
// no error when key is absent (GetJSON's error for anything else, a damaged
// value included).
func LoadJSON[T any](db *DB, key []byte) (*T, error) {
	v := new(T)
	if err := db.GetJSON(key, v); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	return v, nil
}

// Has reports whether key exists.
func (db *DB) Has(key []byte) (bool, error) {
	_, closer, err := db.pdb.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: get: %w", namingDamage(err))
	}
	closer.Close()
	return true, nil
}

// Scan calls fn for every key in [lower, upper) in order. key and value are
// only valid during the call. fn returning ErrStop ends the scan early
// without error.
func (db *DB) Scan(lower, upper []byte, fn func(key, value []byte) error) error {
	return scan(db.pdb, lower, upper, fn)
}

// ErrStop ends a Scan early.
var ErrStop = errors.New("store: stop scan")

// ScanJSON decodes every value in [lower, upper) as JSON into a T, in key
// order; the slice is empty, not nil, when the span is. A value that does
// not decode ends the scan with its error.
func ScanJSON[T any](db *DB, lower, upper []byte) ([]T, error) {
	out := []T{}
	err := db.Scan(lower, upper, func(k, v []byte) error {
		var x T
		if err := json.Unmarshal(v, &x); err != nil {
			return fmt.Errorf("store: decode %q: %w", k[:min(len(k), 16)], err)
		}
		out = append(out, x)
		return nil
	})
	return out, err
}

// Count returns how many keys [lower, upper) holds, by a scan of the span.
func (db *DB) Count(lower, upper []byte) (int, error) {
	n := 0
	err := db.Scan(lower, upper, func(_, _ []byte) error { n++; return nil })
	return n, err
}

// Empty reports whether [lower, upper) holds no key; it reads at most one.
func (db *DB) Empty(lower, upper []byte) (bool, error) {
	empty := true
	err := db.Scan(lower, upper, func(_, _ []byte) error {
		empty = false
		return ErrStop
	})
	return empty, err
}

// CountEveryTenant sums Count over span(tenant) for every tenant: one
// bounded scan per tenant.
func (db *DB) CountEveryTenant(span func(tenant string) (lower, upper []byte)) (int, error) {
	total := 0
	for _, t := range db.Tenants() {
		n, err := db.Count(span(t.ID))
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

type iterable interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

func scan(r iterable, lower, upper []byte, fn func(key, value []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("store: iter: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("store: value: %w", namingDamage(err))
		}
		if err := fn(it.Key(), v); err != nil {
			it.Close()
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	return namingDamage(it.Close())
}

// Batch is a set of writes committed atomically.
type Batch struct {
	b     *pebble.Batch
	db    *DB
	pacer *commitPacer
	// abandoned: a commit of b answered while b stayed inside Pebble
	// (space.inPebble), which may still read it: Close leaves it alone.
	abandoned bool
	// applyErr is apply's answer, read once applying's channel is closed.
	applyErr error
	// tenants are the tenants in whose key space the batch sets a key
	// (noteTenant), checked against db.erased at the commit; one fits in
	// tenant1 without an allocation.
	tenants []string
	tenant1 [1]string
}

// NewBatch starts a write batch. Reads of it are not supported; read from DB.
func (db *DB) NewBatch() *Batch {
	b := &Batch{b: db.pdb.NewBatch(), db: db, pacer: db.pacer}
	b.tenants = b.tenant1[:0]
	return b
}

// Set writes key = value.
func (b *Batch) Set(key, value []byte) {
	b.noteTenant(key)
	_ = b.b.Set(key, value, nil)
}

// SetJSON writes key = JSON(v).
func (b *Batch) SetJSON(key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode: %w", err)
	}
	b.Set(key, data)
	return nil
}

// Delete removes key.
func (b *Batch) Delete(key []byte) { _ = b.b.Delete(key, nil) }

// DeleteRange removes every key in [lower, upper).
func (b *Batch) DeleteRange(lower, upper []byte) { _ = b.b.DeleteRange(lower, upper, nil) }

// Len reports the number of bytes in the batch representation.
func (b *Batch) Len() int { return b.b.Len() }

// Empty reports whether the batch holds no writes.
func (b *Batch) Empty() bool { return b.b.Empty() }

// Commit applies the batch durably: it returns only after the WAL is synced,
// so anything acknowledged after Commit survives a crash. A file system
// out of space gives an error wrapping ErrFull; a failure Pebble cannot
// recover from in process (see space.go) one wrapping ErrFailed, after
// which every Commit fails at once with ErrFailed. Commit never panics,
// and never waits for a Pebble goroutine parked for good (park.go): it
// answers ErrFailed (with ErrFull when the disk's lack of space caused
// it) as soon as one parks, its own commit or one ahead of it in Pebble's
// commit pipeline included (space.inPebble). Like any failed commit, the
// error does not tell that nothing was written: the batch may be in the
// log, found again at the restart.
func (b *Batch) Commit() error { return b.commit(nil) }

// CommitOrdered is Commit for writers that must reach the store in the
// order of a lock they hold: it applies the batch (it is then ordered
// after every batch applied before it, and visible), calls unlock, and
// only then waits for the WAL sync, so writers serialised by the lock
// still share syncs instead of each holding it through its own. It
// returns, like Commit, only once the batch is durable or has failed, and
// answers ErrFailed as Commit does once a Pebble goroutine parks. unlock
// is called exactly once, also when CommitOrdered fails or panics: a
// writer behind the lock then finds writes stopped, so none is applied out
// of the lock's order.
func (b *Batch) CommitOrdered(unlock func()) error {
	unlocked := false
	release := func() {
		if !unlocked {
			unlocked = true
			unlock()
		}
	}
	defer release()
	return b.commit(release)
}

// commit applies the batch (apply) on a goroutine of its own (applying),
// which it stops waiting for once a Pebble goroutine parks
// (space.parkedBefore), calls applied (nil: nothing) once the batch is
// applied, and then waits for the WAL sync on the caller's goroutine:
// Pebble's log writer syncs every record queued before it closes a log, or
// fails them, so no park keeps that wait from ending. Only the hand-off of
// the apply is paid for the park's sake: 2-5 µs and three allocations (the
// channel, the goroutine's call, the Batch) a commit on an in-memory store
// (BenchmarkCommit), against 11-15 µs for the commit; nothing measurable
// beside a decision (BenchmarkDecide, BenchmarkDecisionRequest) or a disk's
// sync.
//
// A batch that sets a key in the key space of a tenant whose records a
// deletion erased is refused, applying nothing (ErrTenantErased): its
// writer took the tenant before the deletion's mark hid it, and the
// erasure and the sweep do not see a write applied after them.
func (b *Batch) commit(applied func()) error {
	sp := b.db.space
	if sp.failed.Load() {
		return sp.stoppedErr("commit")
	}
	held, err := b.db.erased.admit(b.tenants)
	if err != nil {
		return err
	}
	b.pacer.committed(time.Now())
	parked := sp.parkedBefore(b.applying())
	if held {
		b.db.erased.mu.RUnlock()
	}
	if parked {
		b.abandoned = true
		return sp.stoppedErr("commit")
	}
	if err := b.applyErr; err != nil {
		return err
	}
	if applied != nil {
		applied()
	}
	if err := b.b.SyncWait(); err != nil {
		// Fatal, as Pebble's own Apply makes it (Fatalf): the log writer
		// keeps the error, so no later commit could be durable, yet each
		// would still be applied and visible.
		return sp.commitFailure(nil, &pebbleFatal{msg: err.Error(), args: []any{err}})
	}
	return nil
}

// applying runs apply under recovering on a goroutine of its own, as
// space.inPebble does, and returns a channel closed once its answer is in
// b.applyErr (fewer allocations than inPebble's closures).
func (b *Batch) applying() <-chan struct{} {
	done := make(chan struct{})
	go b.applyTo(done)
	return done
}

// applyTo sets b.applyErr to apply's answer, under recovering, and closes
// done.
func (b *Batch) applyTo(done chan<- struct{}) {
	b.applyErr = recovering(b.db.space, b.apply)
	close(done)
}

// apply is Pebble's half of a commit: the batch written to the WAL (not
// yet synced) and applied to the memtable, rotating both when it is full.
func (b *Batch) apply() error {
	if err := b.db.pdb.ApplyNoSyncWait(b.b, pebble.Sync); err != nil {
		return b.db.space.commitFailure(err, nil)
	}
	return nil
}

// Close releases the batch; call it after Commit or to abandon the batch.
// A batch a commit left inside Pebble (parked) is left to the garbage
// collector instead: Pebble may still read it.
func (b *Batch) Close() {
	if b.abandoned {
		return
	}
	_ = b.b.Close()
}

// Snapshot is a consistent read-only view of the store.
type Snapshot struct {
	s  *pebble.Snapshot // nil: a view of the live store (parked)
	db *DB
	// closed is closed by Close (AwaitSnapshots); nil without s.
	closed chan struct{}
	once   sync.Once
}

// NewSnapshot takes a consistent read view; Close it when done. Once one
// of Pebble's goroutines is parked (park.go), which may hold the mutex a
// Pebble snapshot takes, it reads the live store instead: writes are
// stopped then, so that view stands still as well.
//
// While it is open, Pebble keeps every value it sees in the store's files,
// through flushes and compactions, deleted or overwritten since or not: an
// erasure that needs the bytes gone waits for it (AwaitSnapshots).
func (db *DB) NewSnapshot() *Snapshot {
	if db.space.isParked() {
		return &Snapshot{db: db}
	}
	s := &Snapshot{s: db.pdb.NewSnapshot(), db: db, closed: make(chan struct{})}
	db.snaps.add(s.closed)
	return s
}

// Scan is DB.Scan over the snapshot.
func (s *Snapshot) Scan(lower, upper []byte, fn func(key, value []byte) error) error {
	if s.s == nil {
		return s.db.Scan(lower, upper, fn)
	}
	return scan(s.s, lower, upper, fn)
}

// Close releases the snapshot; once a Pebble goroutine is parked it leaves
// it to the process's end (Pebble's Close of it takes the mutex), though
// AwaitSnapshots no longer waits for it. A second Close does nothing.
func (s *Snapshot) Close() error {
	if s.s == nil {
		return nil
	}
	var err error
	s.once.Do(func() {
		if !s.db.space.isParked() {
			err = s.s.Close()
		}
		s.db.snaps.remove(s.closed)
		close(s.closed)
	})
	return err
}

// closeSnapshotWait is how long Close waits for the snapshots still open
// to close (a reader ending its walk) before it closes the store anyway.
const closeSnapshotWait = 5 * time.Second

// AwaitSnapshots waits until every snapshot open at the call is closed,
// and reports whether they all were within wait (none when wait is 0 or
// less: it only looks) and before ctx ended.
// Pebble keeps in the store's files every value an open snapshot sees,
// through flushes and compactions: once they are closed, no snapshot sees
// what was deleted before the call, and a flush and a compaction after it
// rewrite the deleted values out of the files.
func (db *DB) AwaitSnapshots(ctx context.Context, wait time.Duration) bool {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for _, closed := range db.snaps.list() {
		select {
		case <-closed:
			continue
		default:
		}
		select {
		case <-closed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// openSnapshots is the set of open snapshots, by the channel each closes
// when it is closed.
type openSnapshots struct {
	mu   sync.Mutex
	open map[chan struct{}]bool
}

func (o *openSnapshots) add(c chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open == nil {
		o.open = map[chan struct{}]bool{}
	}
	o.open[c] = true
}

func (o *openSnapshots) remove(c chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.open, c)
}

func (o *openSnapshots) list() []<-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]<-chan struct{}, 0, len(o.open))
	for c := range o.open {
		out = append(out, c)
	}
	return out
}

// Compact compacts [lower, upper) so deleted data is physically removed from
// the sstables, not only shadowed by tombstones. It fails as Flush does
// when the write-ahead log cannot be written.
func (db *DB) Compact(ctx context.Context, lower, upper []byte) error {
	return db.CompactSpans(ctx, [][2][]byte{{lower, upper}})
}

// CompactSpans is Compact of each span [lower, upper) in turn, after one
// flush of the memtable for them all: each forced flush rotates the
// write-ahead log with the commit pipeline's lock held, a stall of every
// commit (a tenant's deletion compacted four spans, four flushes, where
// one holds every deletion the spans' compactions drop).
func (db *DB) CompactSpans(ctx context.Context, spans [][2][]byte) error {
	if err := db.walWritable("compact"); err != nil {
		return err
	}
	if err := db.flushMemtable(ctx); err != nil {
		return err
	}
	for _, sp := range spans {
		err := db.unlessParked("compact", func() error { return db.pacedCompact(ctx, sp[0], sp[1]) })
		if err != nil {
			return fmt.Errorf("store: compact: %w", err)
		}
	}
	return nil
}

// Checkpoint writes a consistent copy of the store into dir (which must not
// exist). Every write committed before the call is in it. It syncs the WAL
// as a commit does, and fails as Commit does when that sync fails (ErrFull,
// ErrFailed), without panicking, or when a Pebble goroutine parks before
// it is done (space.inPebble): a backup never waits for a parked commit.
func (db *DB) Checkpoint(dir string) error {
	if err := db.stopped("checkpoint"); err != nil {
		return err
	}
	_, err := db.space.inPebble("checkpoint", func() error {
		if err := db.pdb.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
			return fmt.Errorf("store: checkpoint: %w", err)
		}
		return nil
	})
	return err
}

// stopped returns ErrFailed once a commit failed fatally: Pebble's log
// writer then holds the error, and rotating the log (a flush, a compaction,
// a checkpoint) panics with Pebble's mutex released, a fatal error that
// ends the process whatever recovers.
func (db *DB) stopped(op string) error {
	if db.space.failed.Load() {
		return db.space.stoppedErr(op)
	}
	return nil
}

// walWritable returns stopped's error, or, when the write-ahead log cannot
// be written now (a full disk), Commit's: it commits a synced log-only
// record first. A flush rotates the log, and Pebble closing a log it
// cannot write panics with its mutex released, a fatal error no recover
// stops (the process would die at a deletion pass on a full disk); a
// commit that meets the same failure is recovered (see space.go) and stops
// writes instead.
func (db *DB) walWritable(op string) error {
	if err := db.stopped(op); err != nil {
		return err
	}
	b := db.NewBatch()
	defer b.Close()
	_ = b.b.LogData(nil, nil)
	if err := b.Commit(); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return nil
}

// loadCaches reads every tenant and credential record into memory. A
// record that does not decode is left out and listed by Unreadable, not a
// reason to refuse to open (contract §8): the other tenants are served;
// its tenant (or credential) is unknown, so its requests are refused, until
// the operator restores it from a backup.
func (db *DB) loadCaches() error {
	if err := loadCache(db, tenantRecordsPrefix(), "tenant", db.tenants, func(t *Tenant) string { return t.ID }); err != nil {
		return err
	}
	if err := loadCache(db, credentialRecordsPrefix(), "credential", db.creds, func(c *Credential) string { return c.ClientID }); err != nil {
		return err
	}
	return db.hideDeleting()
}

// loadCache reads every JSON record under the prefix lo into cache, keyed
// by its id. A record that does not decode, or decodes with an empty id,
// is left out and added to db.unreadable as "<what> record <key>: <why>".
// Only a failing scan is an error.
func loadCache[T any](db *DB, lo []byte, what string, cache map[string]*T, id func(*T) string) error {
	return db.Scan(lo, prefixEnd(lo), func(k, v []byte) error {
		r := new(T)
		if err := json.Unmarshal(v, r); err != nil || id(r) == "" {
			db.unreadable = append(db.unreadable, fmt.Sprintf("%s record %q: %v", what, k[len(lo):], orNoID(err)))
			return nil
		}
		cache[id(r)] = r
		return nil
	})
}

// orNoID is err, or the error of a record that decodes without its id.
func orNoID(err error) error {
	if err == nil {
		return errors.New("no id")
	}
	return err
}

// Unreadable lists the tenant and credential records Open could not decode
// and left out (for serve's log and admin check).
func (db *DB) Unreadable() []string { return db.unreadable }

// quietLogger is Pebble's logger: its information is dropped, its errors
// (a background flush or compaction that failed, on a full disk say) go
// to the log SetLog gave, at most one line per pebbleErrorEvery with the
// count of those left out, and its fatal errors fail the store (Fatalf,
// park.go).
type quietLogger struct {
	errs   *pebbleErrors
	space  *space
	stalls *writeStalls // counted by the listener
}

func (quietLogger) Infof(string, ...any) {}
func (q quietLogger) Errorf(format string, args ...any) {
	q.errs.report(time.Now(), fmt.Sprintf(format, args...))
}

// pebbleErrorEvery is the least time between two log lines of Pebble's
// errors: a failing flush is retried in a loop.
const pebbleErrorEvery = 10 * time.Second

// pebbleErrors logs Pebble's errors (quietLogger.Errorf), throttled.
type pebbleErrors struct {
	mu      sync.Mutex
	log     zerolog.Logger
	last    time.Time
	skipped int
}

// SetLog sets where the store logs the errors Pebble reports in the
// background (nothing before it is called).
func (db *DB) SetLog(log zerolog.Logger) {
	db.pebbleErrs.mu.Lock()
	defer db.pebbleErrs.mu.Unlock()
	db.pebbleErrs.log = log
}

// report logs msg unless a line went out less than pebbleErrorEvery ago;
// the next line says how many were left out.
func (p *pebbleErrors) report(now time.Time, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.last.IsZero() && now.Sub(p.last) < pebbleErrorEvery {
		p.skipped++
		return
	}
	p.log.Error().Str("error", msg).Int("omitidos", p.skipped).Msg("store: background error")
	p.last, p.skipped = now, 0
}

var _ io.Closer = (*DB)(nil)
