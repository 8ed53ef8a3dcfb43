package privacy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// erasure is one customer's deletion in progress: one batch, the keys to
// compact (those it deleted or rewrote, and those its quarantined records
// were stored at: see damaged), and what the table erasers learn on the
// way (the customer's coupons and decision ids, the records found through
// its indexes, whether one of its events was damaged).
type erasure struct {
	s                 *Service
	tenant, ref, hash string
	settings          store.Settings
	b                 *store.Batch
	keys              [][]byte

	cupons        map[string]bool
	ids           map[string]bool
	known         [][]byte
	damagedEvents bool
	released      engine.Releases // pending sends given back, for CommitErasure
}

func (x *erasure) del(k []byte) {
	k = append([]byte(nil), k...)
	x.b.Delete(k)
	x.keys = append(x.keys, k)
}

func (x *erasure) set(k []byte, v any) error {
	k = append([]byte(nil), k...)
	x.keys = append(x.keys, k)
	return x.b.SetJSON(k, v)
}

// eraseCustomer removes from the store everything that names the customer
// (see the file comment of deletion.go): first her plain events, in chunks
// (eraseEventChunks), then the rest in one synced batch, under the
// engine's locks for the customer; it returns what to compact: the keys it
// deleted or rewrote (of a customer's many chunks, their bounds), those of
// a failed erasure too.
// job, when not nil, is the deletion's queue entry (see erasechunk.go).
// Each table has its eraser below, run in this order.
func (s *Service) eraseCustomer(tenant, ref, hash string, job *queuedDeletion) (toCompact, error) {
	chunked, err := s.eraseEventChunks(tenant, ref, job)
	if err != nil {
		return chunked, err
	}
	unlock, err := s.rec.LockCustomer(tenant, ref)
	if err != nil {
		return chunked, err
	}
	defer unlock()
	t, ok := s.db.Tenant(tenant)
	if !ok {
		return toCompact{}, fmt.Errorf("%w: %q", engine.ErrNoTenant, tenant)
	}
	b := s.db.NewBatch()
	defer b.Close()
	x := &erasure{s: s, tenant: tenant, ref: ref, hash: hash, settings: t.Settings, b: b,
		cupons: map[string]bool{}, ids: map[string]bool{}, released: engine.Releases{}}
	for _, erase := range []func() error{
		x.events, x.features, x.decisions, x.customerState, x.attributions,
		x.idempotency, x.daily, x.quarantinedEvents, x.accessLog, x.damaged,
	} {
		if err := erase(); err != nil {
			return toCompact{}, err
		}
	}
	if job != nil {
		if err := keepErased(b, job, x.keys); err != nil {
			return chunked, err
		}
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	if err := s.rec.CommitErasure(tenant, b, x.released); err != nil {
		return chunked, err
	}
	chunked.points = append(chunked.points, x.keys...)
	return chunked, nil
}

// maxJobPoints bounds the keys a deletion's queue entry keeps one by one
// (deletionJob.Erased, a few tens of bytes each); past it they are kept as
// their bounds per table (deletionJob.Chunked), whose whole span a resumed
// pass compacts.
const maxJobPoints = 4096

// keepErased adds keys, which the erasure's batch b deletes or overwrites,
// to job's queue entry, written in b: the erasure and the record of what
// it erased commit together, so a pass resumed after a crash before the
// compaction still compacts them (deletionJob.Erased). Each key is kept
// once: every retry of a deletion that waits for a batch job deletes the
// customer's features and state keys again.
func keepErased(b *store.Batch, job *queuedDeletion, keys [][]byte) error {
	j := &job.job
	j.Erased = append(j.Erased, keys...)
	slices.SortFunc(j.Erased, bytes.Compare)
	j.Erased = slices.CompactFunc(j.Erased, bytes.Equal)
	if len(j.Erased) > maxJobPoints {
		j.Chunked, j.Erased = tableBounds(append(j.Chunked, j.Erased...)), nil
	}
	return b.SetJSON(job.key, j)
}

// indexed deletes the entries of a customer index (events or decisions)
// and returns the ids they name.
func (x *erasure) indexed(idx customerIndex) ([]string, error) {
	var ids []string
	lo, hi := idx.span(x.tenant, x.ref)
	err := x.s.db.Scan(lo, hi, func(k, _ []byte) error {
		_, _, id, ok := idx.parse(x.tenant, k)
		if !ok {
			return nil
		}
		x.del(k)
		ids = append(ids, id)
		return nil
	})
	return ids, err
}

// events erases the customer's events, found through the customer event
// index, and the index.
func (x *erasure) events() error {
	ids, err := x.indexed(eventIndex)
	if err != nil {
		return err
	}
	var evKeys [][]byte
	for _, id := range ids {
		evKeys = append(evKeys, x.s.rec.EventKey(x.tenant, id))
	}
	x.known = slices.Clone(evKeys) // the customer's records found through its indexes
	for _, k := range evKeys {
		v, err := x.s.db.Get(k)
		if errors.Is(err, store.ErrNotFound) {
			x.damagedEvents = true // indexed but gone: moved to quarantine
			continue
		}
		if err != nil {
			return err
		}
		ev, ok := engine.Event{}, len(v) >= 32
		if ok {
			ev, ok = engine.DecodeEvent(v[32:])
		}
		if !ok {
			// Damaged: its customer's index names it; it goes if its
			// bytes name the customer too (as a whole: not a longer
			// cliente_ref that starts with hers). Its coupon cannot be
			// read, so the attribution links are searched by customer.
			if x.s.rec.NamesRef(v, x.ref) {
				x.del(k)
			}
			x.damagedEvents = true
			continue
		}
		if ev.ClienteRef != x.ref {
			continue // an event_id first used by another customer stays theirs
		}
		if ev.CuponEmitidoID != "" {
			x.cupons[ev.CuponEmitidoID] = true
		}
		x.del(k)
	}
	return nil
}

func (x *erasure) features() error {
	x.del(x.s.rec.FeaturesKey(x.tenant, x.ref))
	return nil
}

// decisions erases the customer's decision records (confirmations are in
// them), found through the customer decision index, the index, and their
// learner queue entries.
func (x *erasure) decisions() error {
	nonces, err := x.indexed(decisionIndex)
	if err != nil {
		return err
	}
	for _, nonce := range nonces {
		x.known = append(x.known, x.s.rec.DecisionKey(x.tenant, nonce))
		r, err := x.s.rec.LoadDecision(x.tenant, nonce)
		if errors.Is(err, engine.ErrNotFound) {
			continue // deleted, or damaged: moved to quarantine, erased by damaged
		}
		if err != nil {
			return err
		}
		if r.ClienteRef != x.ref {
			continue
		}
		x.ids[x.s.rec.DecisionID(x.tenant, nonce)] = true
		x.del(x.s.rec.DecisionKey(x.tenant, nonce))
		if err := x.s.rec.ForgetDecision(x.released, x.tenant, nonce, x.settings, r, x.del); err != nil {
			return err
		}
	}
	return nil
}

func (x *erasure) customerState() error {
	x.del(x.s.rec.CustomerStateKey(x.tenant, x.ref))
	return nil
}

// attributions erases the links of the customer's coupons (and those of
// them that do not decode, contract §8); when one of the customer's events
// was damaged, every link that names the customer (a scan, rare).
func (x *erasure) attributions() error {
	if x.damagedEvents {
		lo, hi := store.AttributionSpan(x.tenant)
		if err := x.s.db.Scan(lo, hi, func(k, v []byte) error {
			var a engine.Attribution
			if bytes.Contains(v, []byte(x.ref)) && json.Unmarshal(v, &a) == nil && a.ClienteRef == x.ref {
				x.del(k)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for cupon := range x.cupons {
		key := x.s.rec.AttributionKey(x.tenant, cupon)
		x.known = append(x.known, key) // its copy in quarantine, if damaged, goes too (damaged)
		v, err := x.s.db.Get(key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		var a engine.Attribution
		if json.Unmarshal(v, &a) != nil || a.ClienteRef == x.ref || x.ids[a.DecisionID] {
			x.del(key) // a link of the customer's coupon that does not decode goes too
		}
	}
	return nil
}

// idempotency erases the idempotency records that answered for the
// customer: by cliente_ref (records written since it is stored) or by the
// decision id of the answer. The table is keyed by Idempotency-Key alone,
// so this is a scan; the raw JSON is matched before anything is decoded.
func (x *erasure) idempotency() error {
	refField := []byte(`"cliente_ref":"` + x.ref + `"`)
	lo, hi := store.IdempotencySpan(x.tenant)
	return x.s.db.Scan(lo, hi, func(k, v []byte) error {
		if bytes.Contains(v, refField) || (len(x.ids) > 0 && x.ids[answerDecisionID(v)]) {
			x.del(k)
		}
		return nil
	})
}

// daily erases the per-customer daily counters (key: day, name,
// cliente_ref).
func (x *erasure) daily() error {
	lo, hi := store.DailySpan(x.tenant)
	return x.s.db.Scan(lo, hi, func(k, _ []byte) error {
		if ref, ok := store.DailyCustomer(x.tenant, k); ok && ref == x.ref {
			x.del(k)
		}
		return nil
	})
}

// quarantinedEvents removes the customer's events from the quarantined
// event batches (store.QuarantineSpan), and their entries from the
// held-event index, so that an erased event's event_id is new again: a
// batch left empty goes, another is rewritten without them. (A damaged
// batch goes whole; its index entries name a batch no longer held, which
// holds nothing: store.DB.HeldSums.)
func (x *erasure) quarantinedEvents() error {
	type rewrite struct {
		key []byte
		val map[string]json.RawMessage
	}
	var rewrites []rewrite
	var drops [][]byte
	lo, hi := store.QuarantineSpan(x.tenant)
	if err := x.s.db.Scan(lo, hi, func(k, v []byte) error {
		if !x.s.rec.NamesRef(v, x.ref) { // a damaged batch goes whole: only one that names her
			return nil
		}
		k = append([]byte(nil), k...)
		var q map[string]json.RawMessage
		if err := json.Unmarshal(v, &q); err != nil {
			drops = append(drops, k) // damaged, and its bytes name the customer
			return nil
		}
		kept, removed, changed, err := withoutCustomer(q["eventos"], x.ref)
		if err != nil || !changed {
			return err
		}
		for _, id := range removed {
			x.del(store.HeldEventKey(x.tenant, id))
		}
		if kept == nil {
			drops = append(drops, k)
			return nil
		}
		q["eventos"] = kept
		rewrites = append(rewrites, rewrite{key: k, val: q})
		return nil
	}); err != nil {
		return err
	}
	for _, k := range drops {
		x.del(k)
	}
	for _, r := range rewrites {
		if err := x.set(r.key, r.val); err != nil {
			return err
		}
	}
	return nil
}

// withoutCustomer returns the JSON array evs without the events of ref,
// and the event_ids of those it took out: changed false when none was,
// kept nil when none is left. An array that does not decode (damaged; its
// batch names ref) is none left.
func withoutCustomer(raw json.RawMessage, ref string) (kept json.RawMessage, removed []string, changed bool, err error) {
	var evs []json.RawMessage
	if json.Unmarshal(raw, &evs) != nil {
		return nil, nil, true, nil
	}
	left := evs[:0:0]
	for _, ev := range evs {
		var one struct {
			EventID    string `json:"event_id"`
			ClienteRef string `json:"cliente_ref"`
		}
		if json.Unmarshal(ev, &one) == nil && one.ClienteRef == ref {
			removed = append(removed, one.EventID)
			continue
		}
		left = append(left, ev)
	}
	if len(left) == len(evs) {
		return nil, nil, false, nil
	}
	if len(left) == 0 {
		return nil, removed, true, nil
	}
	enc, err := json.Marshal(left)
	return enc, removed, true, err
}

// accessLog rewrites the access-log entries that name the customer: the
// raw cliente_ref becomes the keyed hash.
func (x *erasure) accessLog() error {
	var logRewrites []rewriteEntry
	lo, hi := store.AccessLogSpan(x.tenant)
	if err := x.s.db.Scan(lo, hi, func(k, v []byte) error {
		if !x.s.rec.NamesRef(v, x.ref) { // a damaged entry goes: only one that names her
			return nil
		}
		var a AccessEntry
		if err := json.Unmarshal(v, &a); err != nil {
			x.del(k) // damaged, and its bytes name the customer
			return nil
		}
		if a.ClienteRef != x.ref {
			return nil
		}
		a.ClienteRef, a.ClienteHash = "", x.hash
		logRewrites = append(logRewrites, rewriteEntry{key: append([]byte(nil), k...), entry: a})
		return nil
	}); err != nil {
		return err
	}
	for _, r := range logRewrites {
		if err := x.set(r.key, &r.entry); err != nil {
			return err
		}
	}
	return nil
}

// damaged erases the quarantined records of the customer (contract §8:
// deletion reaches every record that names the customer, damaged ones
// included), and compacts the keys they were stored at as well: moving a
// record to quarantine deleted it there, in a batch of its own (during
// this erasure, when a reader such as LoadDecision met it, or earlier),
// and nothing else rewrites its bytes out of the sstables.
func (x *erasure) damaged() error {
	known := append(x.known, x.s.rec.FeaturesKey(x.tenant, x.ref), x.s.rec.CustomerStateKey(x.tenant, x.ref))
	qkeys, err := x.s.rec.CustomerDamaged(x.tenant, x.ref, known)
	if err != nil {
		return err
	}
	for _, k := range qkeys {
		x.del(k)
		if orig := store.DamagedOriginal(x.tenant, k); orig != nil {
			x.keys = append(x.keys, orig) // to compact, not deleted here: it may hold a newer record
		}
	}
	return nil
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

// tableOf is the table of key k: the key up to and including its table
// byte, the tenant prefix (0x02 tenant 0x00) plus one byte.
func tableOf(k []byte) []byte {
	i := bytes.IndexByte(k, 0)
	if i < 0 || i+2 > len(k) {
		return k
	}
	return k[:i+2]
}

// toCompact is what a deletion pass compacts so that the bytes it deleted
// or overwrote leave the store's files: points, the keys themselves (only
// the sstables that hold one are rewritten, store.CompactPoints), and
// bounds, per table the smallest and largest of keys known only by their
// range (an earlier pass's chunks, deletionJob.Chunked; the chunks of a
// customer with more than maxPointKeys plain events), everything between
// which is compacted.
type toCompact struct {
	points, bounds [][]byte
}

func (c *toCompact) add(o toCompact) {
	c.points = append(c.points, o.points...)
	c.bounds = append(c.bounds, o.bounds...)
}

// asBounds is c as bounds alone, per table its smallest and largest key
// (tableBounds): what an erasure's chunks return past maxPointKeys.
func (c toCompact) asBounds() [][]byte {
	return tableBounds(append(slices.Clone(c.bounds), c.points...))
}

// compactKeys flushes the memtable and compacts c: its points, and per
// table the span from the smallest to the largest of its bounds, so
// deleted and overwritten values are rewritten out of the sstables.
func (s *Service) compactKeys(ctx context.Context, c toCompact) error {
	if err := s.db.CompactPoints(ctx, c.points); err != nil {
		return err
	}
	keys := c.bounds
	if len(keys) == 0 {
		return nil
	}
	sort.Slice(keys, func(i, j int) bool { return bytes.Compare(keys[i], keys[j]) < 0 })
	start := 0
	for i := 1; i <= len(keys); i++ {
		if i < len(keys) && bytes.Equal(tableOf(keys[i]), tableOf(keys[start])) {
			continue
		}
		lo, hi := keys[start], append(append([]byte(nil), keys[i-1]...), 0)
		if err := s.db.Compact(ctx, lo, hi); err != nil {
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
