package privacy

// Customer data rights: deletion (right to be forgotten), export (right of
// access) and the access log of exports.
//
// Deletion is a durable job. DELETE /v1/clientes/{ref} writes, in one synced
// batch, the deletion record (TableDeletion, key = keyed hash of
// cliente_ref: the proof that stays) and a queue entry (TableDeletionQueue,
// key = request time, hash; value holds the raw cliente_ref until the job is
// done). The worker (RunDeletions, or ProcessDeletions in tests and in
// "admin restore") then, per job:
//
//  1. records the deletion in the ledger of every backup (DeletionHooks.Ledger),
//     once, before any data is touched (RequestDeletion already tried, with
//     Config.Ledger; this is the retry that holds the data back until a
//     ledger has it);
//  2. removes, under the tenant's learner, ingestion and customer locks,
//     her plain events first in chunks, each a synced batch of its own
//     (erasechunk.go: a long history), then, in one synced batch,
//     everything else in the store that names the customer:
//     events (found through the customer event index) and the index, the
//     features, the decision records (found through the customer decision
//     index, confirmations included) and their index and reward-queue
//     entries, the customer state, the idempotency records that answered for
//     the customer, the attribution links of their coupons, per-customer
//     daily counters and quarantined events; access-log entries that name
//     the customer are rewritten to the keyed hash;
//  3. removes the customer from data outside these tables (DeletionHooks.External:
//     retained batch result files and stored batch requests), which may ask
//     to retry later (a batch job of the tenant is queued or running);
//  4. flushes the memtable and compacts every key range the pass touched
//     (once per pass, however many customers it deleted), so the bytes are
//     rewritten out of the sstables, not only shadowed by tombstones; first
//     it waits, a bounded time, for the snapshots open at the erasures'
//     commit to close (a streamed export holds one, and Pebble keeps what a
//     snapshot sees), else it leaves the jobs to the next pass;
//  5. marks the records completado and removes the queue entries, and
//     compacts the queue range too;
//  6. purges the write-ahead logs and MANIFESTs written before, which may
//     still hold the erased bytes; step 5's batch marks the purge owed and
//     the purge clears the mark, so every pass first finishes a purge a
//     crash or an error cut short.
//
// A job interrupted anywhere is redone from the start on the next pass: every
// step is idempotent. A deletion left programado with no queue entry (its
// entry or record damaged and moved to quarantine by "admin check
// --repair") is queued again by keyed hash at the worker's next pass after
// that repair (SweepStranded; serve's first pass after an offline one), else
// within deletionSweep (requeueStranded). Decisions already folded into the
// model stay folded in (the model holds per-action sums, not people; they
// cannot be re-derived to the customer).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// Deletion states (estado of the deletion record).
const (
	DeletionScheduled = "programado"
	DeletionCompleted = "completado"
)

// DeletionRecord is the durable proof of a customer deletion (TableDeletion,
// key = keyed hash of cliente_ref). It never holds the raw cliente_ref.
// Times are the tenant clock, UTC.
type DeletionRecord struct {
	Hash         string     `json:"cliente_hash"`
	Estado       string     `json:"estado"`
	SolicitadoEn time.Time  `json:"solicitado_en"`
	ClientID     string     `json:"client_id"`
	CompletadoEn *time.Time `json:"completado_en,omitempty"`
	// Worker bookkeeping, shown by "admin deletions" and the console.
	// UltimoError is a stable note saying which step failed, never the
	// error's own text (paths, storage messages): that goes to serve's log,
	// in the line whose error_id is UltimoErrorID.
	Intentos      int    `json:"intentos,omitempty"`
	UltimoError   string `json:"ultimo_error,omitempty"`
	UltimoErrorID string `json:"ultimo_error_id,omitempty"`
	// Repeticiones counts the requests received while the deletion was
	// programado: a job completes only if none came after it read the
	// record (markCompleted), since data may have arrived in between.
	Repeticiones int `json:"repeticiones,omitempty"`
	// Espera says why a scheduled deletion waits (a batch job in progress).
	Espera string `json:"espera,omitempty"`
}

// deletionJob is a queue entry (TableDeletionQueue, key = request time,
// hash).
type deletionJob struct {
	// ClienteRef is empty for deletions re-applied from a backup's ledger:
	// the customer is then found by hash, and kept here once found.
	ClienteRef string    `json:"cliente_ref,omitempty"`
	Hash       string    `json:"hash"`
	Ledgered   bool      `json:"ledgered,omitempty"`
	RetryAt    time.Time `json:"retry_at,omitempty"` // real time
	// Chunked holds the bounds, per table, of the keys the erasure's
	// chunks deleted (erasechunk.go): a pass resumed after a crash still
	// compacts them.
	Chunked [][]byte `json:"chunked,omitempty"`
	// Erased holds the keys the erasure's batch deleted or overwrote,
	// written in that batch (eraseCustomer): a pass resumed after a crash
	// between the erasure and its compaction finds nothing left to erase,
	// and still compacts them. Past maxJobPoints keys they are kept as
	// their bounds per table, in Chunked, instead. A pass that compacted
	// both with no read open empties them for a deletion it leaves
	// waiting for a batch job (forgetCompacted).
	Erased [][]byte `json:"erased,omitempty"`
}

// LedgerEntry is one line of a backup's deletion ledger: keyed hashes only.
// A tenant's deletion (Kind LedgerTenant) has no Hash and names the
// deleted tenant's creation time: a restored tenant created then or
// before is the deleted one (tenantdel.go).
type LedgerEntry struct {
	Tenant          string     `json:"tenant"`
	Hash            string     `json:"cliente_hash"`
	RequestedAt     time.Time  `json:"requested_at"`
	ClientID        string     `json:"client_id,omitempty"`
	Kind            string     `json:"kind,omitempty"`
	TenantCreatedAt *time.Time `json:"tenant_created_at,omitempty"`
}

// DeletionHooks reach what lives outside the engine's tables. Both are
// optional.
type DeletionHooks struct {
	// Ledger records a deletion in every backup that may still hold the
	// customer. It is called once per job, before any data is removed; an
	// error leaves the job queued.
	Ledger func(LedgerEntry) error
	// External removes the customer from data the engine does not own
	// (batch result files, stored batch requests). It rewrites its files
	// itself and adds its store changes to b, without committing it; it
	// returns the store keys it changed (to be compacted) and pending true
	// when part of the data cannot be touched now (a batch job is queued
	// or running): the job is then retried later, from the start. The
	// deletion commits b (synced) with the changed keys in its queue entry
	// (deletionJob.Erased), so a pass resumed after a crash before the
	// compaction still compacts them.
	External func(tenant, clienteRef string, b *store.Batch) (changed [][]byte, pending bool, err error)
	// Tenant reaches what a tenant's deletion removes beyond the store
	// and the engine (tenantdel.go).
	Tenant TenantHooks
}

// DeletionStats counts what one worker pass did.
type DeletionStats struct {
	Completed int
	Pending   int
	Failed    int
}

// deletionRetry is how long a job that waits for a batch job sleeps,
// unless the batch job ends first (RetryWaiting).
const deletionRetry = 15 * time.Second

// RetryWaiting makes the worker pass at once and run the deletions of
// tenant that wait for a batch job, whatever their retry time: the batch
// runner calls it when a job of tenant has ended, so that they complete
// within seconds of it, not up to deletionRetry later. One still finding a
// job of the tenant queued or running waits again.
func (s *Service) RetryWaiting(tenant string) {
	s.retryMu.Lock()
	s.retryNow[tenant] = true
	s.retryMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// takeRetry reports, once, whether RetryWaiting was called for tenant
// since the last takeRetry.
func (s *Service) takeRetry(tenant string) bool {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	ok := s.retryNow[tenant]
	delete(s.retryNow, tenant)
	return ok
}

// deletionBatch bounds the jobs of one tenant in one pass (they share one
// compaction); the next pass takes the rest.
const deletionBatch = 1000

func deletionKey(tenant, hash string) []byte { return store.DeletionKey(tenant, hash) }

func deletionQueueKey(tenant string, at time.Time, hash string) []byte {
	return store.DeletionQueueKey(tenant, at, hash)
}

// RequestDeletion schedules the deletion of a customer: the deletion record
// and the queue entry are durable when it returns. A deletion already
// scheduled is returned as it is; after a completed one a new one is
// scheduled (data may have arrived since). A new one is also written to the
// backups' ledgers (Config.Ledger) at once, best effort: an acknowledged
// deletion must reach a backup restored before the worker ran it, and the
// worker writes the entry again (a repeated entry is harmless) before it
// removes anything.
func (s *Service) RequestDeletion(tenant, clienteRef, clientID string) (*DeletionRecord, error) {
	now, err := s.rec.TenantNow(tenant)
	if err != nil {
		return nil, err
	}
	hash := s.CustomerHash(tenant, clienteRef)
	rec, created, err := s.scheduleDeletion(tenant, hash, clienteRef, clientID, now, false)
	if err == nil && created && s.ledger != nil {
		if lerr := s.ledger(LedgerEntry{Tenant: tenant, Hash: hash, RequestedAt: rec.SolicitadoEn, ClientID: clientID}); lerr != nil {
			s.log.Warn().Err(lerr).Str("tenant", tenant).Str("cliente_hash", hash).
				Msg("backup ledger not written at request; the deletion worker retries it before removing anything")
		}
	}
	return rec, err
}

// ScheduleDeletionByHash schedules the deletion of the customer whose keyed
// hash is hash (a deletion from a backup's ledger, re-applied by "admin
// restore"). requestedAt and clientID are the original request's; the job
// finds the customer by hash.
func (s *Service) ScheduleDeletionByHash(tenant, hash string, requestedAt time.Time, clientID string) (*DeletionRecord, error) {
	if _, ok := s.db.Tenant(tenant); !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrNoTenant, tenant)
	}
	rec, _, err := s.scheduleDeletion(tenant, hash, "", clientID, requestedAt, true)
	return rec, err
}

// scheduleDeletion writes the deletion record and the queue entry, unless
// (always false) the customer's deletion is already scheduled; created
// says whether it wrote them. A new request's SolicitadoEn is after the
// completed deletion it follows, by a nanosecond when at is not.
func (s *Service) scheduleDeletion(tenant, hash, clienteRef, clientID string, at time.Time, always bool) (rec *DeletionRecord, created bool, err error) {
	s.requestMu.Lock()
	defer s.requestMu.Unlock()
	v, err := s.db.Get(deletionKey(tenant, hash))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, false, err
	default:
		// A record that does not decode is written anew (contract §8): the
		// request schedules the deletion rather than failing on it.
		var old DeletionRecord
		decoded := json.Unmarshal(v, &old) == nil
		if decoded && old.Estado == DeletionScheduled && !always {
			// Scheduled, maybe already erased by a pass that has not
			// marked it completado yet: that pass must not (see
			// markCompleted), what arrived since must go too.
			old.Repeticiones++
			b := s.db.NewBatch()
			defer b.Close()
			if err := b.SetJSON(deletionKey(tenant, hash), &old); err != nil {
				return nil, false, err
			}
			return &old, false, b.Commit()
		}
		if decoded && !always && !old.SolicitadoEn.Before(at) {
			// A request after a completed deletion is a later one even
			// when the tenant's clock says otherwise (a sandbox clock
			// standing still, a clock set back): restore tells which
			// deletions its store holds done by their request times
			// (toReapply), and took this one for that one.
			at = old.SolicitadoEn.Add(time.Nanosecond)
		}
	}
	rec = &DeletionRecord{Hash: hash, Estado: DeletionScheduled, SolicitadoEn: at.UTC(), ClientID: clientID}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(deletionKey(tenant, hash), rec); err != nil {
		return nil, false, err
	}
	if err := b.SetJSON(deletionQueueKey(tenant, s.now(), hash), &deletionJob{ClienteRef: clienteRef, Hash: hash}); err != nil {
		return nil, false, err
	}
	if err := b.Commit(); err != nil {
		return nil, false, err
	}
	return rec, true, nil
}

// Deletion returns the deletion record of a customer, or nil.
func (s *Service) Deletion(tenant, clienteRef string) (*DeletionRecord, error) {
	return s.deletionByHash(tenant, s.CustomerHash(tenant, clienteRef))
}

func (s *Service) deletionByHash(tenant, hash string) (*DeletionRecord, error) {
	v, err := s.db.Get(deletionKey(tenant, hash))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r := s.decodeDeletion(tenant, hash, v)
	return &r, nil
}

// decodeDeletion decodes the deletion record v of hash. One that does not
// decode (contract §8) stands for a deletion still to be done: the worker
// redoes it and rewrites the record, a restore re-applies it, and nothing
// stops on it.
func (s *Service) decodeDeletion(tenant, hash string, v []byte) DeletionRecord {
	var r DeletionRecord
	if err := json.Unmarshal(v, &r); err != nil {
		s.log.Warn().Err(err).Str("tenant", tenant).Str("cliente_hash", hash).Msg("deletion record does not decode: taken as programado")
		return DeletionRecord{Hash: hash, Estado: DeletionScheduled}
	}
	return r
}

// Deletions returns every deletion record of tenant, ordered by request
// time.
func (s *Service) Deletions(tenant string) ([]DeletionRecord, error) {
	out := []DeletionRecord{}
	lo, hi := store.DeletionSpan(tenant)
	err := s.db.Scan(lo, hi, func(k, v []byte) error {
		hash, ok := store.ParseDeletionKey(tenant, k)
		if !ok {
			return fmt.Errorf("deletion record of %s: bad key %q", tenant, k)
		}
		out = append(out, s.decodeDeletion(tenant, hash, v))
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].SolicitadoEn.Before(out[j].SolicitadoEn) })
	return out, err
}

// PendingDeletions counts the queued deletion jobs of every tenant.
func (s *Service) PendingDeletions() (int, error) {
	return s.db.CountEveryTenant(store.DeletionQueueSpan)
}

// RunDeletions runs the deletion worker until ctx ends: a pass every
// interval, and at once after RetryWaiting. It first compacts the queue ranges, so a queue entry removed
// just before a crash does not linger in an sstable.
func (s *Service) RunDeletions(ctx context.Context, interval time.Duration, hooks DeletionHooks) {
	for _, t := range s.db.Tenants() {
		lo, hi := store.DeletionQueueSpan(t.ID)
		if err := s.db.Compact(ctx, lo, hi); err != nil && ctx.Err() == nil {
			s.log.Error().Err(err).Str("tenant", t.ID).Msg("deletion queue compaction")
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if _, err := s.ProcessDeletions(ctx, hooks); err != nil && ctx.Err() == nil {
			s.log.Error().Err(err).Msg("deletion pass")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.wake:
		}
	}
}

// ProcessDeletions runs one pass of the deletion worker over every tenant:
// each queued job whose retry time has come is applied (see the file
// comment). Jobs that fail or wait stay queued. Each pass first finishes
// the compaction and the purge of write-ahead logs and MANIFESTs that
// completed deletions and finished batch jobs (their request chunks) still
// owe (store.DB.PurgeOwed), when no read of the store is open. The first
// pass, and one
// every deletionSweep after, first queues again the deletions stranded
// without a queue entry (requeueStranded).
func (s *Service) ProcessDeletions(ctx context.Context, hooks DeletionHooks) (DeletionStats, error) {
	s.deletionMu.Lock()
	defer s.deletionMu.Unlock()
	var st DeletionStats
	var firstErr error
	// Not while a read of the store is open: the purge would keep its
	// marks (it may be older than them), and redo its compaction and its
	// dozen flushes on every pass until the read closed.
	if s.db.AwaitSnapshots(ctx, 0) {
		err := s.db.PurgeOwed(ctx) // a pass's purge cut short (complete), a batch job's request dropped
		if err != nil && ctx.Err() != nil {
			return st, ctx.Err() // serve's shutdown: the marks stay for the pass after the restart
		}
		if err != nil {
			s.log.Error().Err(err).Msg("purge of write-ahead logs owed by completed deletions or finished batch jobs; retried on the next pass")
			firstErr = err
		}
	}
	if err := s.resumeTenants(ctx, hooks); err != nil && ctx.Err() != nil {
		return st, ctx.Err()
	} else if err != nil && firstErr == nil {
		firstErr = err
	}
	sweep := s.sweepOwed.Swap(false) || s.lastSweep.IsZero() || s.now().Sub(s.lastSweep) >= deletionSweep
	if sweep {
		s.lastSweep = s.now()
	}
	// One wait for older snapshots per pass, however many tenants it
	// serves (olderReadsDone).
	readsBy := time.Now().Add(s.snapshotWaitOrDefault())
	for _, t := range s.db.Tenants() {
		if sweep {
			if err := s.requeueStranded(t.ID); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		p := &tenantPass{s: s, tenant: t.ID, st: &st, firstErr: &firstErr, readsBy: readsBy}
		if err := p.run(ctx, hooks); err != nil {
			return st, err
		}
	}
	return st, firstErr
}

// deletionSweep is how often the worker looks for stranded deletions:
// at its first pass (serve's start, after an offline "admin check
// --repair", the one way a queue entry is moved to quarantine), at the
// pass after a repair run through a running server (SweepStranded), then
// hourly for a record damaged on disk while serving. A sweep reads every
// deletion record ever made (about 4 µs each, kept for good): every
// minute, 100,000 of them took 420 ms of each minute.
const deletionSweep = time.Hour

// SweepStranded makes the worker's next pass look for stranded deletions
// (requeueStranded) whatever the time since it last did: "admin check
// --repair" run through a running server calls it once it moved records
// to quarantine, which may strand a deletion (its queue entry), so that
// the deletion runs at the next pass, not up to deletionSweep later.
func (s *Service) SweepStranded() { s.sweepOwed.Store(true) }

// requeueStranded queues again, by keyed hash, every deletion of tenant
// that stands as programado with no queue entry, which nothing would ever
// run otherwise: its entry did not decode and "admin check --repair" moved
// it to quarantine, or its record does not decode or was moved to
// quarantine (contract §8: a damaged deletion record stands for a deletion
// still to do, redone and rewritten). It reads every deletion record of
// the tenant, hence the sweep interval.
func (s *Service) requeueStranded(tenant string) error {
	todo := map[string]bool{} // hash → stranded unless queued
	lo, hi := store.DeletionSpan(tenant)
	err := s.db.Scan(lo, hi, func(k, v []byte) error {
		if hash, ok := store.ParseDeletionKey(tenant, k); ok {
			todo[hash] = s.decodeDeletion(tenant, hash, v).Estado == DeletionScheduled
		}
		return nil
	})
	if err == nil { // quarantined records stand for the customers with none left in place
		err = s.db.Scan(store.DamagedKey(tenant, lo), store.DamagedKey(tenant, hi), func(k, _ []byte) error {
			if hash, ok := store.ParseDeletionKey(tenant, store.DamagedOriginal(tenant, k)); ok {
				if _, kept := todo[hash]; !kept {
					todo[hash] = true
				}
			}
			return nil
		})
	}
	if err == nil {
		lo, hi = store.DeletionQueueSpan(tenant)
		err = s.db.Scan(lo, hi, func(k, _ []byte) error {
			if _, hash, ok := store.ParseDeletionQueueKey(tenant, k); ok {
				delete(todo, hash)
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("stranded deletions of %s: %w", tenant, err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for hash, stranded := range todo {
		if !stranded {
			continue
		}
		s.log.Warn().Str("tenant", tenant).Str("cliente_hash", hash).Msg("deletion programado with no queue entry: queued again by keyed hash")
		if err := b.SetJSON(deletionQueueKey(tenant, s.now(), hash), &deletionJob{Hash: hash}); err != nil {
			return err
		}
	}
	if b.Empty() {
		return nil
	}
	return b.Commit()
}

// tenantPass is one worker pass over one tenant's queue. Failures of single
// jobs are counted in st and the first kept in firstErr; run returns only
// the errors that end the whole pass.
type tenantPass struct {
	s        *Service
	tenant   string
	st       *DeletionStats
	firstErr *error
	// readsBy is when the pass stops waiting for the snapshots older than
	// its erasures (olderReadsDone).
	readsBy time.Time
}

type queuedDeletion struct {
	key []byte
	job deletionJob
}

func (p *tenantPass) run(ctx context.Context, hooks DeletionHooks) error {
	jobs, err := p.queued()
	if err != nil || len(jobs) == 0 {
		return err
	}
	found, err := p.refsByHash(jobs)
	if err != nil {
		return err
	}
	// Phase 1: each job's data goes (one synced batch per customer).
	retry := p.s.takeRetry(p.tenant) // a batch job of the tenant ended
	var touched toCompact
	var ready, waiting []readyDeletion // erased: to complete; to retry after a batch job
	for _, q := range jobs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retry && !q.job.RetryAt.IsZero() && p.s.now().Before(q.job.RetryAt) {
			p.st.Pending++
			continue
		}
		ref := q.job.ClienteRef
		if ref == "" {
			ref = found[q.job.Hash]
		}
		r, keys, err := p.s.applyDeletion(p.tenant, q.key, q.job, ref, hooks)
		touched.add(keys)
		switch {
		case err != nil:
			p.fail(q.job.Hash, inStep(noteErase, err))
		case r == nil:
			p.st.Pending++
			waiting = append(waiting, readyDeletion{qkey: q.key, hash: q.job.Hash})
		default:
			ready = append(ready, *r)
		}
	}
	// Phase 2: one compaction for the pass, then the records say
	// completado and the queue entries go (and are compacted away); not
	// while a snapshot older than the erasures is open (olderReadsDone).
	if len(ready) > 0 && !p.s.olderReadsDone(ctx, p.readsBy) {
		p.st.Pending += len(ready)
		p.s.log.Info().Str("tenant", p.tenant).Int("deletions", len(ready)).
			Msg("deletions erased but left to the next pass: a read of the store older than them (a streamed export) is still open")
		return nil // their queue entries keep what they erased (Erased, Chunked)
	}
	// With no snapshot open (ready ones waited for those older than the
	// erasures), the compaction rewrites out of the files everything the
	// pass and the entries it read hold to compact.
	clean := len(ready) > 0 || p.s.db.AwaitSnapshots(ctx, 0)
	if err := p.s.compactKeys(ctx, touched); err != nil {
		// Erased already: a later pass finds little left to erase, and
		// compacts what the queue entries keep (Erased, Chunked).
		p.compactionFailed(ctx, ready, err)
		return nil
	}
	if clean {
		p.forgetCompacted(waiting)
	}
	if len(ready) == 0 {
		return nil
	}
	return p.complete(ctx, ready)
}

// forgetCompacted empties what the queue entries of the deletions left
// waiting for a batch job keep to compact (Erased, Chunked), once the
// pass has compacted it with no snapshot open: each retry, every
// deletionRetry while the batch job runs, would compact it all again, and
// a customer's keys past maxJobPoints, kept as their bounds per table,
// whole spans of the decisions and events tables. It is best effort: an
// entry it cannot rewrite keeps what it held, compacted again by the next
// retry.
func (p *tenantPass) forgetCompacted(waiting []readyDeletion) {
	for _, r := range waiting {
		var job deletionJob
		err := p.s.db.GetJSON(r.qkey, &job)
		if err == nil && (len(job.Erased) > 0 || len(job.Chunked) > 0) {
			job.Erased, job.Chunked = nil, nil
			err = p.s.putJob(r.qkey, &job)
		}
		if err != nil {
			p.s.log.Warn().Err(err).Str("tenant", p.tenant).Str("cliente_hash", r.hash).
				Msg("a waiting deletion's keys to compact, compacted by this pass, are kept: the next retry compacts them again")
		}
	}
}

// compactionFailed counts the erased deletions whose pass's compaction
// failed with err: failed (logged as errors, noted on their records), or,
// when ctx ended (serve's shutdown stopped the pass), pending, with one
// info line: the pass after the restart completes them.
func (p *tenantPass) compactionFailed(ctx context.Context, ready []readyDeletion, err error) {
	if ctx.Err() != nil {
		p.st.Pending += len(ready)
		p.s.log.Info().Str("tenant", p.tenant).Int("deletions", len(ready)).
			Msg("deletion pass stopped before its compaction: the erased deletions are completed by a later pass")
		return
	}
	err = inStep(noteCompact, err)
	for _, r := range ready {
		p.fail(r.hash, err)
	}
}

// queued reads up to deletionBatch jobs of the tenant's queue.
func (p *tenantPass) queued() ([]queuedDeletion, error) {
	var jobs []queuedDeletion
	lo, hi := store.DeletionQueueSpan(p.tenant)
	err := p.s.db.Scan(lo, hi, func(k, v []byte) error {
		var j deletionJob
		if err := json.Unmarshal(v, &j); err != nil || j.Hash == "" {
			// Damaged (contract §8): its key still names the customer's
			// hash, so the job goes on by hash, as a restored one does.
			_, hash, ok := store.ParseDeletionQueueKey(p.tenant, k)
			if !ok {
				return fmt.Errorf("deletion queue of %s: bad key %q", p.tenant, k)
			}
			p.s.log.Warn().AnErr("decode_error", err).Str("tenant", p.tenant).Str("cliente_hash", hash).
				Msg("deletion queue entry does not decode: the deletion goes on by keyed hash")
			j = deletionJob{Hash: hash}
		}
		jobs = append(jobs, queuedDeletion{key: append([]byte(nil), k...), job: j})
		if len(jobs) >= deletionBatch {
			return store.ErrStop // the next pass goes on
		}
		return nil
	})
	return jobs, err
}

// refsByHash finds, in one scan, the customers of the jobs known only by
// hash.
func (p *tenantPass) refsByHash(jobs []queuedDeletion) (map[string]string, error) {
	want := map[string]bool{}
	for _, q := range jobs {
		if q.job.ClienteRef == "" {
			want[q.job.Hash] = true
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	return p.s.refsForHashes(p.tenant, want)
}

// fail counts a failed job, logs err under a new error id and records on
// the deletion record the step that failed (failureNote) and that id.
func (p *tenantPass) fail(hash string, err error) {
	p.st.Failed++
	id := fmt.Sprintf("%016x", rand.Uint64())
	p.s.log.Error().Err(err).Str("tenant", p.tenant).Str("cliente_hash", hash).Str("error_id", id).
		Msg("customer deletion failed; retried on the next pass")
	p.s.noteDeletion(p.tenant, hash, func(r *DeletionRecord) {
		r.Intentos++
		r.UltimoError, r.UltimoErrorID = failureNote(err), id
	})
	if *p.firstErr == nil {
		*p.firstErr = err
	}
}

// complete marks the ready jobs completado, removes their queue entries and
// rotates the write-ahead logs and manifests that still name the customers.
func (p *tenantPass) complete(ctx context.Context, ready []readyDeletion) error {
	ready, err := p.markCompleted(ready)
	if err == nil && len(ready) == 0 {
		return nil
	}
	marked := err == nil
	if err == nil && p.s.beforePurge != nil {
		err = inStep(notePurge, p.s.beforePurge())
	}
	if err == nil {
		// The queue entries' old values and, in write-ahead logs,
		// tombstones and old records still name the customers: compact
		// the entries and rotate the logs away before reporting
		// completado. The batch marked the purge owed, naming the
		// entries, so a purge cut short by a crash or an error is redone
		// by the next pass (ProcessDeletions).
		err = inStep(notePurge, p.s.db.PurgeOwed(ctx))
	}
	if err != nil && marked && ctx.Err() != nil {
		// Serve's shutdown stopped the purge: completado is committed and
		// the purge owed, redone first by the pass after the restart.
		p.st.Pending += len(ready)
		p.s.log.Info().Str("tenant", p.tenant).Int("deletions", len(ready)).
			Msg("deletion pass stopped during its purge: the purge owed is redone by the next pass")
		return nil
	}
	if err != nil {
		for _, r := range ready {
			p.fail(r.hash, err)
		}
		return nil
	}
	for _, r := range ready {
		p.st.Completed++
		p.s.log.Info().Str("tenant", p.tenant).Str("cliente_hash", r.hash).Msg("customer deletion completed")
	}
	return nil
}

// markCompleted commits, in one batch, completado on the records of the
// ready jobs, the removal of their queue entries and the purge they owe
// (store.Batch.OwePurge, naming the entries), and returns the jobs it
// committed (on an error, the jobs it meant to commit).
// A job whose customer was asked to be deleted again since its record was
// read (Repeticiones moved: data may have arrived after the erasure and
// before that request) is left programado and queued, and redone by the
// next pass. It holds requestMu, so no request falls between that check
// and the commit.
func (p *tenantPass) markCompleted(ready []readyDeletion) ([]readyDeletion, error) {
	now, err := p.s.rec.TenantNow(p.tenant)
	if err != nil {
		return ready, inStep(noteComplete, err)
	}
	p.s.requestMu.Lock()
	defer p.s.requestMu.Unlock()
	b := p.s.db.NewBatch()
	defer b.Close()
	var done []readyDeletion
	var qkeys [][]byte
	for _, r := range ready {
		cur, err := p.s.deletionByHash(p.tenant, r.hash)
		if err != nil {
			return ready, inStep(noteComplete, err)
		}
		if cur != nil && cur.Repeticiones != r.rec.Repeticiones {
			p.st.Pending++ // asked again meanwhile: the next pass redoes it
			continue
		}
		// Not before its request, which may be a nanosecond ahead of a
		// clock standing still (scheduleDeletion).
		completed := now
		if completed.Before(r.rec.SolicitadoEn) {
			completed = r.rec.SolicitadoEn
		}
		r.rec.Estado, r.rec.CompletadoEn, r.rec.Espera, r.rec.UltimoError, r.rec.UltimoErrorID = DeletionCompleted, &completed, "", "", ""
		if err := b.SetJSON(deletionKey(p.tenant, r.hash), r.rec); err != nil {
			return ready, inStep(noteComplete, err)
		}
		b.Delete(r.qkey)
		done, qkeys = append(done, r), append(qkeys, r.qkey)
	}
	if len(done) > 0 {
		b.OwePurge(qkeys)
		if err := b.Commit(); err != nil {
			return done, inStep(noteComplete, err)
		}
	}
	return done, nil
}

// Notes a deletion record shows for the step of a job that failed
// (DeletionRecord.UltimoError). They are stable texts for the operator; the
// error itself is logged with the record's UltimoErrorID.
const (
	noteLedger   = "no se pudo anotar el borrado en el registro de las copias de seguridad"
	noteErase    = "no se pudieron borrar los datos del cliente en el almacén"
	noteBatch    = "no se pudieron borrar los datos del cliente en los lotes (archivos de resultados, solicitudes guardadas)"
	noteCompact  = "no se pudo compactar el almacén tras borrar los datos"
	noteComplete = "no se pudo marcar el borrado como completado"
	notePurge    = "no se pudieron retirar los registros de escritura anteriores al borrado"
	noteUnknown  = "error interno del borrado"
)

// stepError is the error of one step of a deletion job: the error as it
// is (logged) and the note the deletion record shows.
type stepError struct {
	note string
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// inStep ties err (nil stays nil) to the step note, unless it is already
// tied to a more precise one.
func inStep(note string, err error) error {
	var se *stepError
	if err == nil || errors.As(err, &se) {
		return err
	}
	return &stepError{note: note, err: err}
}

// failureNote is the note of err's step (noteUnknown for none).
func failureNote(err error) string {
	var se *stepError
	if errors.As(err, &se) {
		return se.note
	}
	return noteUnknown
}

// readyDeletion is a job whose data is gone, to be marked completado once
// the pass has compacted.
type readyDeletion struct {
	qkey []byte
	hash string
	rec  *DeletionRecord
}

// noteDeletion updates a deletion record's bookkeeping, best effort.
func (s *Service) noteDeletion(tenant, hash string, fn func(r *DeletionRecord)) {
	s.requestMu.Lock() // not to lose a request's Repeticiones
	defer s.requestMu.Unlock()
	rec, err := s.deletionByHash(tenant, hash)
	if err != nil || rec == nil {
		return
	}
	fn(rec)
	b := s.db.NewBatch()
	defer b.Close()
	if b.SetJSON(deletionKey(tenant, hash), rec) == nil {
		_ = b.Commit()
	}
}

// applyDeletion applies one job up to (not including) compaction: the
// ledger, the store data, the external data. It returns what to compact
// (the keys it touched, an earlier pass's chunks as bounds) and, when the job can be completed after compaction, a readyDeletion; nil
// when it must wait. ref is "" when the customer (known by hash) holds
// nothing.
func (s *Service) applyDeletion(tenant string, qkey []byte, job deletionJob, ref string, hooks DeletionHooks) (*readyDeletion, toCompact, error) {
	rec, err := s.deletionByHash(tenant, job.Hash)
	if err != nil {
		return nil, toCompact{}, err
	}
	if rec == nil { // the record is written with the job; rebuild a lost one
		rec = &DeletionRecord{Hash: job.Hash, Estado: DeletionScheduled}
	}
	if rec.SolicitadoEn.IsZero() { // lost or damaged
		rec.SolicitadoEn = s.now().UTC()
	}
	if !job.Ledgered && hooks.Ledger != nil {
		if err := hooks.Ledger(LedgerEntry{Tenant: tenant, Hash: job.Hash, RequestedAt: rec.SolicitadoEn, ClientID: rec.ClientID}); err != nil {
			return nil, toCompact{}, inStep(noteLedger, fmt.Errorf("backup ledger: %w", err))
		}
		job.Ledgered = true
		if err := s.putJob(qkey, &job); err != nil {
			return nil, toCompact{}, err
		}
	}
	if ref != "" && job.ClienteRef == "" {
		// Found by hash: the erasure removes what the hash was matched
		// against, so a retry (a wait, a crash) must find the customer in
		// the queue entry, as for a request.
		job.ClienteRef = ref
		if err := s.putJob(qkey, &job); err != nil {
			return nil, toCompact{}, err
		}
	}
	// What an earlier pass erased and may not have compacted.
	touched := toCompact{bounds: slices.Clone(job.Chunked), points: slices.Clone(job.Erased)}
	if ref != "" {
		q := &queuedDeletion{key: qkey, job: job}
		erased, err := s.eraseCustomer(tenant, ref, job.Hash, q)
		job = q.job
		touched.add(erased)
		if err != nil {
			return nil, touched, err
		}
		if hooks.External != nil {
			q := &queuedDeletion{key: qkey, job: job}
			changed, wait, err := s.external(tenant, ref, q, hooks.External)
			job = q.job
			touched.points = append(touched.points, changed...)
			if err != nil {
				return nil, touched, inStep(noteBatch, fmt.Errorf("batch data: %w", err))
			}
			if wait {
				s.noteDeletion(tenant, job.Hash, func(r *DeletionRecord) {
					r.Espera = "un lote de decisiones del inquilino está en cola o en curso; se reintenta al terminar"
				})
				return nil, touched, nil
			}
		}
	}
	return &readyDeletion{qkey: qkey, hash: job.Hash, rec: rec}, touched, nil
}

// external runs the External hook for ref and commits, in one synced
// batch, the store changes it made, the keys it changed kept in the queue
// entry q (keepErased) and, when it says part of the data must wait, the
// entry's retry time. It returns the keys changed and whether to wait.
func (s *Service) external(tenant, ref string, q *queuedDeletion, hook func(string, string, *store.Batch) ([][]byte, bool, error)) ([][]byte, bool, error) {
	b := s.db.NewBatch()
	defer b.Close()
	changed, wait, err := hook(tenant, ref, b)
	if err != nil {
		return nil, false, err
	}
	if len(changed) == 0 && !wait && b.Empty() {
		return nil, false, nil
	}
	if wait {
		q.job.RetryAt = s.now().Add(deletionRetry)
	}
	if err := keepErased(b, q, changed); err != nil {
		return nil, false, err
	}
	return changed, wait, b.Commit()
}

func (s *Service) putJob(key []byte, job *deletionJob) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(key, job); err != nil {
		return err
	}
	return b.Commit()
}

// defaultSnapshotWait is how long a deletion pass waits, at most, for the
// snapshots open when its erasures committed to close (olderReadsDone).
const defaultSnapshotWait = 10 * time.Second

// snapshotWaitOrDefault is how long a deletion pass waits, at most, for
// the snapshots older than its erasures to close.
func (s *Service) snapshotWaitOrDefault() time.Duration {
	if s.snapshotWait <= 0 {
		return defaultSnapshotWait
	}
	return s.snapshotWait
}

// olderReadsDone waits until every snapshot of the store open now (a
// customer's export, streamed to a client that may read slowly, holds one)
// is closed, and reports whether they all were by the real time by and
// before ctx ended (store.DB.AwaitSnapshots). A deletion is completado
// only once what its erasures deleted is compacted away, which no
// compaction does while a snapshot older than them is open: a pass calls
// it after its erasures commit, before compacting.
func (s *Service) olderReadsDone(ctx context.Context, by time.Time) bool {
	return s.db.AwaitSnapshots(ctx, time.Until(by))
}
