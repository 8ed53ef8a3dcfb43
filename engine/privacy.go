package engine

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
//     once, before any data is touched;
//  2. removes, in one synced batch and under the tenant's learner, ingestion
//     and customer locks, everything in the store that names the customer:
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
//     rewritten out of the sstables, not only shadowed by tombstones;
//  5. marks the records completado and removes the queue entries, and
//     compacts the queue range too.
//
// A job interrupted anywhere is redone from the start on the next pass: every
// step is idempotent. Decisions already folded into the model stay folded in
// (the model holds per-action sums, not people; they cannot be re-derived to
// the customer).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

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
	// Worker bookkeeping, shown by "admin deletions".
	Intentos    int    `json:"intentos,omitempty"`
	UltimoError string `json:"ultimo_error,omitempty"`
	// Espera says why a scheduled deletion waits (a batch job in progress).
	Espera string `json:"espera,omitempty"`
}

// deletionJob is a queue entry (TableDeletionQueue, key = request time,
// hash).
type deletionJob struct {
	// ClienteRef is empty for deletions re-applied from a backup's ledger:
	// the customer is then found by hash.
	ClienteRef string    `json:"cliente_ref,omitempty"`
	Hash       string    `json:"hash"`
	Ledgered   bool      `json:"ledgered,omitempty"`
	RetryAt    time.Time `json:"retry_at,omitempty"` // real time
}

// LedgerEntry is one line of a backup's deletion ledger: keyed hashes only.
type LedgerEntry struct {
	Tenant      string    `json:"tenant"`
	Hash        string    `json:"cliente_hash"`
	RequestedAt time.Time `json:"requested_at"`
	ClientID    string    `json:"client_id,omitempty"`
}

// DeletionHooks reach what lives outside the engine's tables. Both are
// optional.
type DeletionHooks struct {
	// Ledger records a deletion in every backup that may still hold the
	// customer. It is called once per job, before any data is removed; an
	// error leaves the job queued.
	Ledger func(LedgerEntry) error
	// External removes the customer from data the engine does not own
	// (batch result files, stored batch requests). It returns the store keys
	// it rewrote (to be compacted) and pending true when part of the data
	// cannot be touched now (a batch job is queued or running): the job is
	// then retried later, from the start.
	External func(tenant, clienteRef string) (changed [][]byte, pending bool, err error)
}

// DeletionStats counts what one worker pass did.
type DeletionStats struct {
	Completed int
	Pending   int
	Failed    int
}

// deletionRetry is how long a job that waits for a batch job sleeps.
const deletionRetry = 15 * time.Second

// deletionBatch bounds the jobs of one tenant in one pass (they share one
// compaction); the next pass takes the rest.
const deletionBatch = 1000

// deletionMu serialises worker passes; requestMu serialises deletion
// requests (so two requests for one customer queue one job) without making
// them wait for a pass's compactions.
var deletionMu, requestMu sync.Mutex

func deletionKey(tenant, hash string) []byte { return store.Key(tenant, store.TableDeletion, hash) }

func deletionQueueKey(tenant string, at time.Time, hash string) []byte {
	return store.Key(tenant, store.TableDeletionQueue, at, hash)
}

// CustomerHash is the keyed hash that stands for cliente_ref in deletion
// records, ledgers and the access log after deletion.
func (e *Engine) CustomerHash(tenant, clienteRef string) string {
	return e.secrets.CustomerHash(tenant, clienteRef)
}

// RequestDeletion schedules the deletion of a customer: the deletion record
// and the queue entry are durable when it returns. A deletion already
// scheduled is returned as it is; after a completed one a new one is
// scheduled (data may have arrived since).
func (e *Engine) RequestDeletion(tenant, clienteRef, clientID string) (*DeletionRecord, error) {
	_, now, err := e.tenantNow(tenant)
	if err != nil {
		return nil, err
	}
	hash := e.CustomerHash(tenant, clienteRef)
	return e.scheduleDeletion(tenant, hash, clienteRef, clientID, now, false)
}

// ScheduleDeletionByHash schedules the deletion of the customer whose keyed
// hash is hash (a deletion from a backup's ledger, re-applied by "admin
// restore"). requestedAt and clientID are the original request's; the job
// finds the customer by hash.
func (e *Engine) ScheduleDeletionByHash(tenant, hash string, requestedAt time.Time, clientID string) (*DeletionRecord, error) {
	if _, ok := e.db.Tenant(tenant); !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoTenant, tenant)
	}
	return e.scheduleDeletion(tenant, hash, "", clientID, requestedAt, true)
}

func (e *Engine) scheduleDeletion(tenant, hash, clienteRef, clientID string, at time.Time, always bool) (*DeletionRecord, error) {
	requestMu.Lock()
	defer requestMu.Unlock()
	var old DeletionRecord
	err := e.db.GetJSON(deletionKey(tenant, hash), &old)
	switch {
	case err == nil && old.Estado == DeletionScheduled && !always:
		return &old, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	rec := &DeletionRecord{Hash: hash, Estado: DeletionScheduled, SolicitadoEn: at.UTC(), ClientID: clientID}
	b := e.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(deletionKey(tenant, hash), rec); err != nil {
		return nil, err
	}
	if err := b.SetJSON(deletionQueueKey(tenant, e.now(), hash), &deletionJob{ClienteRef: clienteRef, Hash: hash}); err != nil {
		return nil, err
	}
	if err := b.Commit(); err != nil {
		return nil, err
	}
	return rec, nil
}

// Deletion returns the deletion record of a customer, or nil.
func (e *Engine) Deletion(tenant, clienteRef string) (*DeletionRecord, error) {
	return e.deletionByHash(tenant, e.CustomerHash(tenant, clienteRef))
}

func (e *Engine) deletionByHash(tenant, hash string) (*DeletionRecord, error) {
	var rec DeletionRecord
	err := e.db.GetJSON(deletionKey(tenant, hash), &rec)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// Deletions returns every deletion record of tenant, ordered by request
// time.
func (e *Engine) Deletions(tenant string) ([]DeletionRecord, error) {
	var out []DeletionRecord
	lo, hi := store.TableSpan(tenant, store.TableDeletion)
	err := e.db.Scan(lo, hi, func(_, v []byte) error {
		var r DeletionRecord
		if err := json.Unmarshal(v, &r); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].SolicitadoEn.Before(out[j].SolicitadoEn) })
	return out, err
}

// PendingDeletions counts the queued deletion jobs of every tenant.
func (e *Engine) PendingDeletions() (int, error) {
	n := 0
	for _, t := range e.db.Tenants() {
		lo, hi := store.TableSpan(t.ID, store.TableDeletionQueue)
		if err := e.db.Scan(lo, hi, func(_, _ []byte) error { n++; return nil }); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// RunDeletions runs the deletion worker until ctx ends: a pass every
// interval. It first compacts the queue ranges, so a queue entry removed
// just before a crash does not linger in an sstable.
func (e *Engine) RunDeletions(ctx context.Context, interval time.Duration, hooks DeletionHooks) {
	for _, t := range e.db.Tenants() {
		lo, hi := store.TableSpan(t.ID, store.TableDeletionQueue)
		if err := e.db.Compact(ctx, lo, hi); err != nil && ctx.Err() == nil {
			e.log.Error().Err(err).Str("tenant", t.ID).Msg("deletion queue compaction")
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if _, err := e.ProcessDeletions(ctx, hooks); err != nil && ctx.Err() == nil {
			e.log.Error().Err(err).Msg("deletion pass")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ProcessDeletions runs one pass of the deletion worker over every tenant:
// each queued job whose retry time has come is applied (see the file
// comment). Jobs that fail or wait stay queued.
func (e *Engine) ProcessDeletions(ctx context.Context, hooks DeletionHooks) (DeletionStats, error) {
	deletionMu.Lock()
	defer deletionMu.Unlock()
	var st DeletionStats
	var firstErr error
	for _, t := range e.db.Tenants() {
		type queued struct {
			key []byte
			job deletionJob
		}
		var jobs []queued
		lo, hi := store.TableSpan(t.ID, store.TableDeletionQueue)
		if err := e.db.Scan(lo, hi, func(k, v []byte) error {
			var j deletionJob
			if err := json.Unmarshal(v, &j); err != nil {
				return fmt.Errorf("deletion queue of %s: %w", t.ID, err)
			}
			jobs = append(jobs, queued{key: append([]byte(nil), k...), job: j})
			if len(jobs) >= deletionBatch {
				return store.ErrStop // the next pass goes on
			}
			return nil
		}); err != nil {
			return st, err
		}
		if len(jobs) == 0 {
			continue
		}
		// Jobs known only by hash: find their customers in one scan.
		want := map[string]bool{}
		for _, q := range jobs {
			if q.job.ClienteRef == "" {
				want[q.job.Hash] = true
			}
		}
		var found map[string]string
		if len(want) > 0 {
			var err error
			if found, err = e.refsForHashes(t.ID, want); err != nil {
				return st, err
			}
		}
		// Phase 1: each job's data goes (one synced batch per customer).
		var touched [][]byte
		var ready []readyDeletion
		fail := func(hash string, err error) {
			st.Failed++
			e.log.Error().Err(err).Str("tenant", t.ID).Str("cliente_hash", hash).Msg("customer deletion failed; retried on the next pass")
			e.noteDeletion(t.ID, hash, func(r *DeletionRecord) { r.Intentos++; r.UltimoError = err.Error() })
			if firstErr == nil {
				firstErr = err
			}
		}
		for _, q := range jobs {
			if ctx.Err() != nil {
				return st, ctx.Err()
			}
			if !q.job.RetryAt.IsZero() && e.now().Before(q.job.RetryAt) {
				st.Pending++
				continue
			}
			ref := q.job.ClienteRef
			if ref == "" {
				ref = found[q.job.Hash]
			}
			r, keys, err := e.applyDeletion(t.ID, q.key, q.job, ref, hooks)
			touched = append(touched, keys...)
			switch {
			case err != nil:
				fail(q.job.Hash, err)
			case r == nil:
				st.Pending++
			default:
				ready = append(ready, *r)
			}
		}
		// Phase 2: one compaction for the pass, then the records say
		// completado and the queue entries go (and are compacted away).
		if err := e.compactKeys(ctx, touched); err != nil {
			for _, r := range ready {
				fail(r.hash, err)
			}
			continue
		}
		if len(ready) == 0 {
			continue
		}
		_, now, err := e.tenantNow(t.ID)
		if err != nil {
			return st, err
		}
		b := e.db.NewBatch()
		var qkeys [][]byte
		for _, r := range ready {
			r.rec.Estado, r.rec.CompletadoEn, r.rec.Espera, r.rec.UltimoError = DeletionCompleted, &now, "", ""
			if err := b.SetJSON(deletionKey(t.ID, r.hash), r.rec); err != nil {
				b.Close()
				return st, err
			}
			b.Delete(r.qkey)
			qkeys = append(qkeys, r.qkey)
		}
		err = b.Commit()
		b.Close()
		if err == nil {
			err = e.compactKeys(ctx, qkeys)
		}
		if err == nil {
			// Tombstones and old records in write-ahead logs still name the
			// customers: rotate them away before reporting completado.
			err = e.db.PurgeWAL()
		}
		if err == nil {
			err = e.db.PurgeManifest()
		}
		if err != nil {
			for _, r := range ready {
				fail(r.hash, err)
			}
			continue
		}
		for _, r := range ready {
			st.Completed++
			e.log.Info().Str("tenant", t.ID).Str("cliente_hash", r.hash).Msg("customer deletion completed")
		}
	}
	return st, firstErr
}

// readyDeletion is a job whose data is gone, to be marked completado once
// the pass has compacted.
type readyDeletion struct {
	qkey []byte
	hash string
	rec  *DeletionRecord
}

// noteDeletion updates a deletion record's bookkeeping, best effort.
func (e *Engine) noteDeletion(tenant, hash string, fn func(r *DeletionRecord)) {
	rec, err := e.deletionByHash(tenant, hash)
	if err != nil || rec == nil {
		return
	}
	fn(rec)
	b := e.db.NewBatch()
	defer b.Close()
	if b.SetJSON(deletionKey(tenant, hash), rec) == nil {
		_ = b.Commit()
	}
}

// applyDeletion applies one job up to (not including) compaction: the
// ledger, the store data, the external data. It returns the keys it touched
// and, when the job can be completed after compaction, a readyDeletion; nil
// when it must wait. ref is "" when the customer (known by hash) holds
// nothing.
func (e *Engine) applyDeletion(tenant string, qkey []byte, job deletionJob, ref string, hooks DeletionHooks) (*readyDeletion, [][]byte, error) {
	rec, err := e.deletionByHash(tenant, job.Hash)
	if err != nil {
		return nil, nil, err
	}
	if rec == nil { // the record is written with the job; rebuild a lost one
		rec = &DeletionRecord{Hash: job.Hash, Estado: DeletionScheduled, SolicitadoEn: e.now().UTC()}
	}
	if !job.Ledgered && hooks.Ledger != nil {
		if err := hooks.Ledger(LedgerEntry{Tenant: tenant, Hash: job.Hash, RequestedAt: rec.SolicitadoEn, ClientID: rec.ClientID}); err != nil {
			return nil, nil, fmt.Errorf("backup ledger: %w", err)
		}
		job.Ledgered = true
		if err := e.putJob(qkey, &job); err != nil {
			return nil, nil, err
		}
	}
	var touched [][]byte
	if ref != "" {
		if touched, err = e.eraseCustomer(tenant, ref, job.Hash); err != nil {
			return nil, nil, err
		}
		if hooks.External != nil {
			changed, wait, err := hooks.External(tenant, ref)
			touched = append(touched, changed...)
			if err != nil {
				return nil, touched, fmt.Errorf("batch data: %w", err)
			}
			if wait {
				job.RetryAt = e.now().Add(deletionRetry)
				if err := e.putJob(qkey, &job); err != nil {
					return nil, touched, err
				}
				e.noteDeletion(tenant, job.Hash, func(r *DeletionRecord) {
					r.Espera = "un lote de decisiones del inquilino está en cola o en curso; se reintenta al terminar"
				})
				return nil, touched, nil
			}
		}
	}
	return &readyDeletion{qkey: qkey, hash: job.Hash, rec: rec}, touched, nil
}

func (e *Engine) putJob(key []byte, job *deletionJob) error {
	b := e.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(key, job); err != nil {
		return err
	}
	return b.Commit()
}

// eraseCustomer removes from the store everything that names the customer
// (see the file comment) in one synced batch and returns the keys it
// deleted or rewrote.
func (e *Engine) eraseCustomer(tenant, ref, hash string) ([][]byte, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	t, _, err := e.tenantNow(tenant)
	if err != nil {
		return nil, err
	}
	// Lock order: learner, ingestion, customer (no other path takes them in
	// another order). The learner could otherwise write back a decision
	// record it read before, ingestion the features.
	ts.learnMu.Lock()
	defer ts.learnMu.Unlock()
	ts.ingestMu.Lock()
	defer ts.ingestMu.Unlock()
	lock := ts.custLock(e.seed, ref)
	lock.Lock()
	defer lock.Unlock()

	b := e.db.NewBatch()
	defer b.Close()
	var keys [][]byte
	del := func(k []byte) {
		k = append([]byte(nil), k...)
		b.Delete(k)
		keys = append(keys, k)
	}
	set := func(k []byte, v any) error {
		k = append([]byte(nil), k...)
		keys = append(keys, k)
		return b.SetJSON(k, v)
	}

	// Events, through the customer event index.
	cupons := map[string]bool{}
	var evKeys [][]byte
	lo, hi := store.TableSpan(tenant, store.TableCustomerEvent, ref)
	if err := e.db.Scan(lo, hi, func(k, _ []byte) error {
		parts, ok := store.SplitKey(tenant, k, "s8s")
		if !ok {
			return nil
		}
		del(k)
		evKeys = append(evKeys, eventKey(tenant, string(parts[2])))
		return nil
	}); err != nil {
		return nil, err
	}
	known := slices.Clone(evKeys) // the customer's records found through its indexes
	damagedEvents := false
	for _, k := range evKeys {
		v, err := e.db.Get(k)
		if errors.Is(err, store.ErrNotFound) {
			damagedEvents = true // indexed but gone: moved to quarantine
			continue
		}
		if err != nil {
			return nil, err
		}
		ev, ok := Event{}, len(v) >= 32
		if ok {
			ev, ok = DecodeEvent(v[32:])
		}
		if !ok {
			// Damaged: its customer's index names it; it goes if its
			// bytes name the customer too. Its coupon cannot be read, so
			// the attribution links are searched by customer below.
			if bytes.Contains(v, []byte(ref)) {
				del(k)
			}
			damagedEvents = true
			continue
		}
		if ev.ClienteRef != ref {
			continue // an event_id first used by another customer stays theirs
		}
		if ev.CuponEmitidoID != "" {
			cupons[ev.CuponEmitidoID] = true
		}
		del(k)
	}
	del(featuresKey(tenant, ref))

	// Decisions (confirmations are in the records), through the customer
	// decision index, and their reward-queue entries.
	ids := map[string]bool{}
	var nonces []string
	lo, hi = store.TableSpan(tenant, store.TableCustomerDecide, ref)
	if err := e.db.Scan(lo, hi, func(k, _ []byte) error {
		parts, ok := store.SplitKey(tenant, k, "s8s")
		if !ok {
			return nil
		}
		del(k)
		nonces = append(nonces, string(parts[2]))
		return nil
	}); err != nil {
		return nil, err
	}
	s := t.Settings
	for _, nonce := range nonces {
		known = append(known, decisionKey(tenant, nonce))
		r, err := e.loadDecision(tenant, nonce)
		if errors.Is(err, ErrNotFound) {
			continue // deleted, or damaged: moved to quarantine, erased below
		}
		if err != nil {
			return nil, err
		}
		if r.ClienteRef != ref {
			continue
		}
		ids[e.ids.issue(tenant, nonce)] = true
		del(decisionKey(tenant, nonce))
		del(queueKey(tenant, r.At.Add(s.RewardWindow+s.RewardGrace), queueReward_, nonce))
		if r.Accion != 0 && r.CampanaID != "" {
			xk := queueKey(tenant, r.CaducaEn, queueExpiry, nonce)
			pendingSend, err := e.db.Has(xk)
			if err != nil {
				return nil, err
			}
			if pendingSend && r.Estado == EstadoPendiente && !r.EnRespaldo {
				// The send is forgotten with the decision: give its budget
				// back now, as its expiry would have.
				if err := e.releaseBudget(ts, b, tenant, r); err != nil {
					return nil, err
				}
			}
			del(xk)
		}
	}
	del(customerStateKey(tenant, ref))

	// Attribution links of the customer's coupons; when one of the
	// customer's events was damaged, every link that names the customer (a
	// scan, rare).
	if damagedEvents {
		lo, hi := store.TableSpan(tenant, store.TableAttribution)
		if err := e.db.Scan(lo, hi, func(k, v []byte) error {
			var a attribution
			if bytes.Contains(v, []byte(ref)) && json.Unmarshal(v, &a) == nil && a.ClienteRef == ref {
				del(k)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	for cupon := range cupons {
		var a attribution
		err := e.db.GetJSON(attributionKey(tenant, cupon), &a)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if a.ClienteRef == ref || ids[a.DecisionID] {
			del(attributionKey(tenant, cupon))
		}
	}

	// Idempotency records that answered for the customer: by cliente_ref
	// (records written since it is stored) or by the decision id of the
	// answer. The table is keyed by Idempotency-Key alone, so this is a
	// scan; the raw JSON is matched before anything is decoded.
	refField := []byte(`"cliente_ref":"` + ref + `"`)
	lo, hi = store.TableSpan(tenant, store.TableIdempotency)
	if err := e.db.Scan(lo, hi, func(k, v []byte) error {
		if bytes.Contains(v, refField) || (len(ids) > 0 && ids[answerDecisionID(v)]) {
			del(k)
		}
		return nil
	}); err != nil {
		return nil, err
	}

	// Per-customer daily counters (key: day, name, cliente_ref).
	lo, hi = store.TableSpan(tenant, store.TableDaily)
	if err := e.db.Scan(lo, hi, func(k, _ []byte) error {
		if parts, ok := store.SplitKey(tenant, k, "sss"); ok && string(parts[2]) == ref {
			del(k)
		}
		return nil
	}); err != nil {
		return nil, err
	}

	// Quarantined events of the customer.
	lo, hi = store.TableSpan(tenant, store.TableQuarantine)
	type rewrite struct {
		key []byte
		val map[string]json.RawMessage
	}
	var rewrites []rewrite
	var drops [][]byte
	if err := e.db.Scan(lo, hi, func(k, v []byte) error {
		if !bytes.Contains(v, []byte(ref)) {
			return nil
		}
		var q map[string]json.RawMessage
		if err := json.Unmarshal(v, &q); err != nil {
			return nil
		}
		var evs []json.RawMessage
		if err := json.Unmarshal(q["eventos"], &evs); err != nil {
			return nil
		}
		kept := evs[:0:0]
		for _, raw := range evs {
			var one struct {
				ClienteRef string `json:"cliente_ref"`
			}
			if json.Unmarshal(raw, &one) == nil && one.ClienteRef == ref {
				continue
			}
			kept = append(kept, raw)
		}
		if len(kept) == len(evs) {
			return nil
		}
		k = append([]byte(nil), k...)
		if len(kept) == 0 {
			drops = append(drops, k)
			return nil
		}
		enc, err := json.Marshal(kept)
		if err != nil {
			return err
		}
		q["eventos"] = enc
		rewrites = append(rewrites, rewrite{key: k, val: q})
		return nil
	}); err != nil {
		return nil, err
	}
	for _, k := range drops {
		del(k)
	}
	for _, r := range rewrites {
		if err := set(r.key, r.val); err != nil {
			return nil, err
		}
	}

	// Access-log entries: the raw cliente_ref becomes the keyed hash.
	var logRewrites []rewriteEntry
	lo, hi = store.TableSpan(tenant, store.TableAccessLog)
	if err := e.db.Scan(lo, hi, func(k, v []byte) error {
		if !bytes.Contains(v, []byte(ref)) {
			return nil
		}
		var a AccessEntry
		if err := json.Unmarshal(v, &a); err != nil || a.ClienteRef != ref {
			return nil
		}
		a.ClienteRef, a.ClienteHash = "", hash
		logRewrites = append(logRewrites, rewriteEntry{key: append([]byte(nil), k...), entry: a})
		return nil
	}); err != nil {
		return nil, err
	}
	for _, r := range logRewrites {
		if err := set(r.key, &r.entry); err != nil {
			return nil, err
		}
	}

	// Quarantined records of the customer (contract §8: deletion reaches
	// every record that names the customer, damaged ones included).
	known = append(known, featuresKey(tenant, ref), customerStateKey(tenant, ref))
	qkeys, err := e.customerDamaged(tenant, ref, known)
	if err != nil {
		return nil, err
	}
	for _, k := range qkeys {
		del(k)
	}

	if err := b.Commit(); err != nil {
		return nil, err
	}
	return keys, nil
}

type rewriteEntry struct {
	key   []byte
	entry AccessEntry
}

// answerDecisionID returns the decision_id of an idempotency record's
// answer without decoding the record ("" if there is none).
func answerDecisionID(v []byte) string {
	const field = `"decision_id":"`
	i := bytes.Index(v, []byte(field))
	if i < 0 {
		return ""
	}
	rest := v[i+len(field):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// compactKeys flushes the memtable and compacts, per table, the span from
// the smallest to the largest of keys, so deleted and overwritten values
// are rewritten out of the sstables.
func (e *Engine) compactKeys(ctx context.Context, keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	sort.Slice(keys, func(i, j int) bool { return bytes.Compare(keys[i], keys[j]) < 0 })
	// A table is the key up to and including its table byte: the tenant
	// prefix (0x02 tenant 0x00) plus one byte.
	table := func(k []byte) []byte {
		i := bytes.IndexByte(k, 0)
		if i < 0 || i+2 > len(k) {
			return k
		}
		return k[:i+2]
	}
	start := 0
	for i := 1; i <= len(keys); i++ {
		if i < len(keys) && bytes.Equal(table(keys[i]), table(keys[start])) {
			continue
		}
		lo, hi := keys[start], append(append([]byte(nil), keys[i-1]...), 0)
		if err := e.db.Compact(ctx, lo, hi); err != nil {
			return err
		}
		start = i
	}
	return nil
}

// refsForHashes finds the customers of tenant whose keyed hashes are in
// want, by hashing every cliente_ref the tenant's data names: the customer
// indexes (one seek per customer, not one step per key), the customer
// states, idempotency records, quarantined events, the access log and the
// stored batch requests.
func (e *Engine) refsForHashes(tenant string, want map[string]bool) (map[string]string, error) {
	found := map[string]string{}
	seen := map[string]bool{}
	check := func(ref string) {
		if ref == "" || seen[ref] {
			return
		}
		seen[ref] = true
		if h := e.CustomerHash(tenant, ref); want[h] {
			found[h] = ref
		}
	}
	for _, sp := range []struct {
		table  byte
		prefix []any
	}{
		{store.TableCustomerEvent, nil},
		{store.TableFeatures, nil},
		{store.TableCustomerDecide, nil},
		{store.TableMeta, []any{"cust"}},
	} {
		if err := e.distinctRefs(tenant, sp.table, sp.prefix, check); err != nil {
			return nil, err
		}
	}
	refOf := func(v []byte) string {
		var one struct {
			ClienteRef string `json:"cliente_ref"`
		}
		if json.Unmarshal(v, &one) != nil {
			return ""
		}
		return one.ClienteRef
	}
	for _, table := range []byte{store.TableIdempotency, store.TableAccessLog} {
		lo, hi := store.TableSpan(tenant, table)
		if err := e.db.Scan(lo, hi, func(_, v []byte) error {
			if bytes.Contains(v, []byte(`"cliente_ref"`)) {
				check(refOf(v))
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	lo, hi := store.TableSpan(tenant, store.TableQuarantine)
	if err := e.db.Scan(lo, hi, func(_, v []byte) error {
		var q struct {
			Eventos []json.RawMessage `json:"eventos"`
		}
		if json.Unmarshal(v, &q) == nil {
			for _, raw := range q.Eventos {
				check(refOf(raw))
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	lo, hi = store.TableSpan(tenant, store.TableJobClients)
	if err := e.db.Scan(lo, hi, func(_, v []byte) error {
		var refs []string
		if json.Unmarshal(v, &refs) == nil {
			for _, r := range refs {
				check(r)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return found, nil
}

// distinctRefs calls fn once per cliente_ref that leads keys of table
// (after prefix), seeking past each customer's keys.
func (e *Engine) distinctRefs(tenant string, table byte, prefix []any, fn func(ref string)) error {
	lo, hi := store.TableSpan(tenant, table, prefix...)
	it, err := e.db.Pebble().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: iter: %w", err)
	}
	for valid := it.First(); valid; {
		rest := it.Key()[len(lo):]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			valid = it.Next()
			continue
		}
		fn(string(rest[:i]))
		next := append(append([]byte(nil), lo...), rest[:i+1]...)
		valid = it.SeekGE(store.PrefixEnd(next))
	}
	return it.Close()
}

// ---- access log ----

// AccessEntry is one access-log entry (TableAccessLog, key = real time,
// trace id): who exported which customer, when. After the customer's
// deletion ClienteRef is empty and ClienteHash names them.
type AccessEntry struct {
	At          time.Time `json:"at"`
	ClientID    string    `json:"client_id"`
	ClienteRef  string    `json:"cliente_ref,omitempty"`
	ClienteHash string    `json:"cliente_hash,omitempty"`
	TraceID     string    `json:"trace_id"`
	Accion      string    `json:"accion"`
}

// logAccess appends an access-log entry, synced. A customer with a
// deletion record is logged by keyed hash only, so an export after (or
// while) deleting never writes the identifier back.
func (e *Engine) logAccess(tenant, clienteRef, clientID, trace, accion string, deleted bool) error {
	at := e.now().UTC()
	a := AccessEntry{At: at, ClientID: clientID, ClienteRef: clienteRef, TraceID: trace, Accion: accion}
	if deleted {
		a.ClienteRef, a.ClienteHash = "", e.CustomerHash(tenant, clienteRef)
	}
	b := e.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(store.Key(tenant, store.TableAccessLog, at, trace), &a); err != nil {
		return err
	}
	return b.Commit()
}

// AccessLog returns the tenant's access-log entries in time order.
func (e *Engine) AccessLog(tenant string) ([]AccessEntry, error) {
	out := []AccessEntry{}
	lo, hi := store.TableSpan(tenant, store.TableAccessLog)
	err := e.db.Scan(lo, hi, func(_, v []byte) error {
		var a AccessEntry
		if err := json.Unmarshal(v, &a); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out, err
}

// ---- export ----

// CustomerExport is everything the engine holds about a customer (the body
// of GET /v1/clientes/{cliente_ref}/exportacion). Times are UTC.
type CustomerExport struct {
	ClienteRef     string               `json:"cliente_ref"`
	GeneradoEn     time.Time            `json:"generado_en"`
	Eventos        []ExportEvent        `json:"eventos"`
	Caracteristica map[string]any       `json:"caracteristicas"`
	Decisiones     []ExportDecision     `json:"decisiones"`
	Confirmaciones []ExportConfirmation `json:"confirmaciones"`
	VinculosCupon  []ExportCouponLink   `json:"vinculos_cupon"`
	Borrado        *ExportDeletion      `json:"borrado"`
	// EnCuarentena counts records held about the customer that could not be
	// read (damaged): kept in quarantine, erased by the customer's deletion.
	EnCuarentena int `json:"en_cuarentena"`
}

// ExportEvent is an event as it was received (event contract v1).
type ExportEvent struct {
	EventID    string         `json:"event_id"`
	ClienteRef string         `json:"cliente_ref"`
	TS         time.Time      `json:"ts"`
	Tipo       string         `json:"tipo"`
	Clave      string         `json:"clave"`
	Valor      float64        `json:"valor"`
	DecisionID *string        `json:"decision_id"`
	Extra      map[string]any `json:"extra"`
}

// ExportDecision is a decision, batch line or fallback record.
type ExportDecision struct {
	DecisionID      string             `json:"decision_id"`
	CreadaEn        time.Time          `json:"creada_en"`
	Canal           string             `json:"canal,omitempty"`
	CampanaID       string             `json:"campana_id,omitempty"`
	JobID           string             `json:"job_id,omitempty"`
	Accion          int                `json:"accion"`
	Propension      float64            `json:"propension"`
	PoliticaVersion string             `json:"politica_version"`
	Explorado       bool               `json:"explorado"`
	EnControl       bool               `json:"en_control"`
	EnRespaldo      bool               `json:"en_respaldo"`
	CaducaEn        time.Time          `json:"caduca_en"`
	Motivo          string             `json:"motivo"`
	EstadoEjecucion string             `json:"estado_ejecucion"`
	RecompensaMXN   *float64           `json:"recompensa_mxn,omitempty"`
	Vector          map[string]float64 `json:"caracteristicas_usadas,omitempty"`
}

// ExportConfirmation is an execution confirmation.
type ExportConfirmation struct {
	DecisionID      string     `json:"decision_id"`
	EstadoEjecucion string     `json:"estado_ejecucion"`
	AccionReal      *int       `json:"accion_real"`
	MotivoRechazo   *string    `json:"motivo_rechazo"`
	TsEjecucion     *time.Time `json:"ts_ejecucion"`
	ConfirmadaEn    time.Time  `json:"confirmada_en"`
}

// ExportCouponLink links a coupon sent to the decision that chose it.
type ExportCouponLink struct {
	CuponEmitidoID string  `json:"cupon_emitido_id"`
	DecisionID     *string `json:"decision_id"`
	Recibido       bool    `json:"recibido"`
	Redimido       bool    `json:"redimido"`
	Caducado       bool    `json:"caducado"`
}

// ExportDeletion is the customer's deletion record as the export shows it.
type ExportDeletion struct {
	Estado       string     `json:"estado"`
	SolicitadoEn time.Time  `json:"solicitado_en"`
	CompletadoEn *time.Time `json:"completado_en"`
}

// Export gathers everything held about a customer and writes the access to
// the access log (synced) before returning. An unknown customer gets empty
// collections.
func (e *Engine) Export(tenant, clienteRef, clientID, trace string) (*CustomerExport, error) {
	_, now, err := e.tenantNow(tenant)
	if err != nil {
		return nil, err
	}
	del, err := e.Deletion(tenant, clienteRef)
	if err != nil {
		return nil, err
	}
	if err := e.logAccess(tenant, clienteRef, clientID, trace, "exportacion", del != nil); err != nil {
		return nil, err
	}
	x := &CustomerExport{
		ClienteRef: clienteRef, GeneradoEn: now.UTC(), Eventos: []ExportEvent{}, Caracteristica: map[string]any{},
		Decisiones: []ExportDecision{}, Confirmaciones: []ExportConfirmation{}, VinculosCupon: []ExportCouponLink{},
	}
	if del != nil {
		x.Borrado = &ExportDeletion{Estado: del.Estado, SolicitadoEn: del.SolicitadoEn.UTC(), CompletadoEn: utcPtr(del.CompletadoEn)}
	}

	cupons := map[string]bool{}
	lo, hi := store.TableSpan(tenant, store.TableCustomerEvent, clienteRef)
	var evIDs []string
	if err := e.db.Scan(lo, hi, func(k, _ []byte) error {
		if parts, ok := store.SplitKey(tenant, k, "s8s"); ok {
			evIDs = append(evIDs, string(parts[2]))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var known [][]byte // the customer's records found through its indexes
	for _, id := range evIDs {
		k := eventKey(tenant, id)
		known = append(known, k)
		v, err := e.db.Get(k)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ev, ok := Event{}, len(v) >= 32
		if ok {
			ev, ok = DecodeEvent(v[32:])
		}
		if !ok {
			e.quarantine(tenant, k, v, errors.New("event record: does not decode"))
			continue
		}
		if ev.ClienteRef != clienteRef {
			continue
		}
		if ev.CuponEmitidoID != "" {
			cupons[ev.CuponEmitidoID] = true
		}
		x.Eventos = append(x.Eventos, exportEvent(&ev))
	}

	if b, err := e.db.Get(featuresKey(tenant, clienteRef)); err == nil {
		if f, ok := DecodeFeatures(b); ok {
			x.Caracteristica = f.Export(now)
		} else {
			e.quarantine(tenant, featuresKey(tenant, clienteRef), b, errors.New("features: do not decode"))
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}

	var nonces []string
	lo, hi = store.TableSpan(tenant, store.TableCustomerDecide, clienteRef)
	if err := e.db.Scan(lo, hi, func(k, _ []byte) error {
		if parts, ok := store.SplitKey(tenant, k, "s8s"); ok {
			nonces = append(nonces, string(parts[2]))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	names := VectorNames()
	for _, nonce := range nonces {
		known = append(known, decisionKey(tenant, nonce))
		r, err := e.loadDecision(tenant, nonce)
		if errors.Is(err, ErrNotFound) {
			continue // deleted, or damaged: quarantined, counted below
		}
		if err != nil {
			return nil, err
		}
		if r.ClienteRef != clienteRef {
			continue
		}
		id := e.ids.issue(tenant, nonce)
		d := ExportDecision{
			DecisionID: id, CreadaEn: r.At.UTC(), Canal: r.Canal, CampanaID: r.CampanaID, JobID: r.JobID,
			Accion: r.Accion, Propension: r.Propension, PoliticaVersion: r.Version, Explorado: r.Explorado,
			EnControl: r.EnControl, EnRespaldo: r.EnRespaldo, CaducaEn: r.CaducaEn.UTC(), Motivo: r.Motivo,
			EstadoEjecucion: r.Estado,
		}
		if d.EstadoEjecucion == EstadoPendiente {
			d.EstadoEjecucion = "pendiente"
		}
		if r.Recompensa != nil {
			m := float64(*r.Recompensa) / 100
			d.RecompensaMXN = &m
		}
		if len(r.X) == len(names) {
			d.Vector = make(map[string]float64, len(names))
			for i, n := range names {
				d.Vector[n] = r.X[i]
			}
		}
		x.Decisiones = append(x.Decisiones, d)
		if r.ConfirmadaEn != nil {
			c := ExportConfirmation{DecisionID: id, EstadoEjecucion: r.Estado, AccionReal: r.AccionReal,
				TsEjecucion: utcPtr(r.TsEjecucion), ConfirmadaEn: r.ConfirmadaEn.UTC()}
			if r.MotivoRechazo != "" {
				m := r.MotivoRechazo
				c.MotivoRechazo = &m
			}
			x.Confirmaciones = append(x.Confirmaciones, c)
		}
	}

	ordered := make([]string, 0, len(cupons))
	for c := range cupons {
		ordered = append(ordered, c)
	}
	sort.Strings(ordered)
	for _, cupon := range ordered {
		var a attribution
		err := e.db.GetJSON(attributionKey(tenant, cupon), &a)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if a.ClienteRef != clienteRef {
			continue
		}
		l := ExportCouponLink{CuponEmitidoID: cupon, Recibido: a.Recibido, Redimido: a.Redimido, Caducado: a.Caducado}
		if a.DecisionID != "" {
			id := a.DecisionID
			l.DecisionID = &id
		}
		x.VinculosCupon = append(x.VinculosCupon, l)
	}
	q, err := e.customerDamaged(tenant, clienteRef, known)
	if err != nil {
		return nil, err
	}
	x.EnCuarentena = len(q)
	return x, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// exportEvent renders a stored event as the event contract's JSON.
func exportEvent(ev *Event) ExportEvent {
	out := ExportEvent{EventID: ev.ID, ClienteRef: ev.ClienteRef, TS: ev.TS.UTC(), Tipo: string(ev.Tipo), Clave: ev.Clave,
		Valor: float64(ev.ValorCents) / 100, Extra: map[string]any{}}
	if ev.DecisionID != "" {
		id := ev.DecisionID
		out.DecisionID = &id
	}
	str := func(name, v string) {
		if v != "" {
			out.Extra[name] = v
		}
	}
	str("ticket_id", ev.TicketID)
	str("tienda", ev.Tienda)
	str("canal", ev.Canal)
	str("cupon_emitido_id", ev.CuponEmitidoID)
	str("campana_id", ev.CampanaID)
	str("segmento", ev.Segmento)
	str("perfil", ev.Perfil)
	if ev.Tipo == CompraCat {
		out.Extra["margen"] = float64(ev.MargenCents) / 100
	}
	if ev.HasCantidad {
		out.Extra["cantidad"] = ev.Cantidad
	}
	if ev.HasTicketTotal {
		out.Extra["ticket_total"] = float64(ev.TicketTotalCents) / 100
	}
	if !ev.Caducidad.IsZero() {
		out.Extra["caducidad"] = ev.Caducidad.UTC()
	}
	if ev.HasDescuentoPct {
		out.Extra["descuento_pct"] = ev.DescuentoPct
	}
	return out
}
