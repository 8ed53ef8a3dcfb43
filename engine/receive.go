package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/coupond/coupond/store"
)

// Delivery is how a request of events arrived: what the daily quota and
// the abuse guard's quarantine need besides the events.
type Delivery struct {
	ClientID string
	Trace    string    // the request's trace id
	At       time.Time // real time of arrival: held batches are kept in this order
	Now      time.Time // the tenant clock: the day of the quota
	// Hold: the client is at the abuse guard's quarantine step; its events
	// are kept, not applied, until the operator releases them.
	Hold bool
}

// Receive is the events endpoint's one call. Validated events are applied
// by Ingest, their accepted ones taken from the tenant's daily quota of
// events (on d.Now's day) in one step with the check, before anything is
// applied: when they do not all fit, the request applies nothing and
// fails with a DayLimitError (ErrQuota), so concurrent requests never
// accept more events than the quota. Duplicates and rejected events take
// nothing: a resend of accepted events is answered when the quota is used
// up. When d.Hold the events are held in the abuse quarantine instead:
// the events Ingest would admit (admitEvents: a good decision_id or none,
// an event_id new to the tenant and to the request, else a duplicate or a
// rejection as Ingest answers) and that no batch still held holds (else a
// duplicate or a duplicado, admitHeld) are held and count as aceptados,
// and held events never count against the quota. Batches held by a
// release without the held-event index get their entries at serve's start
// (IndexHeld).
func (e *Ingester) Receive(tenant string, events []IngestEvent, d Delivery) (IngestResult, error) {
	if !d.Hold || len(events) == 0 {
		t, ok := e.db.Tenant(tenant)
		if !ok {
			return IngestResult{}, fmt.Errorf("%w: %q", ErrNoTenant, tenant)
		}
		res, err := e.ingest(tenant, events, &eventUnits{q: e.quotas, t: t, now: d.Now})
		if err != nil {
			return res, err
		}
		e.counters.ingested(tenant, d.Now, res.Aceptados)
		return res, nil
	}
	// Quarantine: keep each admitted event's canonical JSON, committed
	// with Sync, once the requests folded before it are applied.
	ts, err := e.state(tenant)
	if err != nil {
		return IngestResult{}, err
	}
	for i := range events {
		events[i].sum = sha256.Sum256(events[i].Canonical)
	}
	ts.heldMu.Lock() // held batches change only under it (releaseBatch, erasure)
	defer ts.heldMu.Unlock()
	var res IngestResult
	t := &ts.ingestMu
	t.mu.Lock()
	dependent := t.beginFold()
	accepted, _, err := e.admitEvents(tenant, events, t, &res)
	if err == nil && dependent {
		// Its duplicates may be events of requests not yet durable: the
		// answer waits for them, as a dependent Ingest's does.
		err = t.awaitApplied()
	}
	t.mu.Unlock()
	if err == nil {
		accepted, err = e.admitHeld(tenant, events, accepted, &res)
	}
	if err != nil {
		return IngestResult{}, err
	}
	h := store.HeldBatch{ClientID: d.ClientID}
	index := make([]store.HeldEvent, 0, len(accepted))
	for _, i := range accepted {
		held := events[i].Canonical
		if events[i].AsWritten != nil {
			held = events[i].AsWritten // all that was sent: checked again on release
		}
		h.Events = append(h.Events, held)
		index = append(index, store.HeldEvent{ID: events[i].Event.ID, Sum: events[i].sum})
	}
	if res.Aceptados = len(h.Events); res.Aceptados == 0 {
		return res, nil
	}
	return res, e.db.HoldBatch(tenant, d.At, d.Trace, &h, index)
}

// admitHeld returns accepted (admitEvents' new events of a held request)
// without those whose event_id a batch still held holds: as for a stored
// event, the same content counts in res as a duplicate and other content
// is rejected as "duplicado". Without it a resend of held events was
// answered as accepted and held again, and an event_id resent with other
// content was answered as accepted and then dropped at the release. Under
// the tenant's heldMu.
func (e *Ingester) admitHeld(tenant string, events []IngestEvent, accepted []int, res *IngestResult) ([]int, error) {
	ids := make([]string, len(accepted))
	for k, i := range accepted {
		ids[k] = events[i].Event.ID
	}
	held := map[int][32]byte{}
	if err := e.db.HeldSums(tenant, ids, func(k int, sum [32]byte) { held[k] = sum }); err != nil {
		return nil, err
	}
	if len(held) == 0 {
		return accepted, nil
	}
	kept := make([]int, 0, len(accepted)-len(held))
	for k, i := range accepted {
		prev, ok := held[k]
		switch {
		case !ok:
			kept = append(kept, i)
		case events[i].sameContent(prev):
			res.Duplicados++
		default:
			res.Rechazados = append(res.Rechazados, rejectDuplicado(&events[i]))
		}
	}
	slices.SortStableFunc(res.Rechazados, func(a, b Rejection) int { return a.Indice - b.Indice })
	return kept, nil
}

// eventUnits is the tenant's daily quota of events as a request of
// Receive takes it: on the tenant clock's day now, units for the events
// its fold accepts (take, under the tenant's ingestion turn, so the check
// sees every request folded before), given back when they are not
// committed. A nil *eventUnits takes nothing (Ingest).
type eventUnits struct {
	q   *Quotas
	t   *store.Tenant
	now time.Time
}

// take reserves n units: ErrQuota (a DayLimitError) when they do not fit.
func (u *eventUnits) take(n int) error {
	if u == nil || n == 0 {
		return nil
	}
	return u.q.reserve(u.t, QuotaEvents, u.now, int64(n))
}

// giveBack releases n units take reserved, for events not committed.
func (u *eventUnits) giveBack(n int) {
	if u == nil || n == 0 {
		return
	}
	if err := u.q.release(u.t.ID, QuotaEvents, u.now, int64(n)); err != nil {
		u.q.log.Error().Err(err).Str("tenant", u.t.ID).Msg("events not applied but their units of the daily quota not given back")
	}
}

// ReleaseHeld applies every held event of tenant (idempotently, as if
// posted at now, the tenant clock) and removes them from quarantine, one
// held batch (one request's events) at a time, oldest first. check
// validates one held event again (its canonical JSON; index is its
// position among its batch's released events) and converts it; ok false
// drops it. A batch that does not decode, or holds an event check fails
// on, is moved to the damaged-record quarantine whole (contract §8) and
// the release goes on. It returns how many were accepted and how many
// were duplicates; after an error, those of the batches released before.
func (e *Ingester) ReleaseHeld(tenant string, now time.Time, check func(raw []byte, index int) (ev IngestEvent, ok bool, err error)) (accepted, duplicates int, err error) {
	keys, err := e.heldKeys(tenant)
	if err != nil {
		return 0, 0, err
	}
	for _, k := range keys {
		acc, dup, err := e.releaseBatch(tenant, now, k, check)
		accepted, duplicates = accepted+acc, duplicates+dup
		if err != nil {
			return accepted, duplicates, err
		}
	}
	return accepted, duplicates, nil
}

// releaseBatch applies the held batch at key and deletes it (see
// ReleaseHeld); a batch gone meanwhile (a customer's erasure took its last
// event) is skipped. The events are checked without a lock, then applied
// under the tenant's heldMu, which a customer's erasure takes too
// (Records.LockCustomer), and only if the batch still holds what was
// checked: one an erasure rewrote in between is read and checked again, so
// a deleted customer's held events never come back.
func (e *Ingester) releaseBatch(tenant string, now time.Time, key []byte, check func(raw []byte, index int) (IngestEvent, bool, error)) (accepted, duplicates int, err error) {
	ts, err := e.state(tenant)
	if err != nil {
		return 0, 0, err
	}
	for {
		raw, err := e.db.Get(key)
		if errors.Is(err, store.ErrNotFound) {
			return 0, 0, nil
		}
		if err != nil {
			return 0, 0, err
		}
		all, bad := checkHeld(raw, check)
		ts.heldMu.Lock()
		cur, err := e.db.Get(key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			ts.heldMu.Unlock()
			return 0, 0, nil
		case err != nil:
			ts.heldMu.Unlock()
			return 0, 0, err
		case !bytes.Equal(cur, raw):
			ts.heldMu.Unlock()
			continue // rewritten by an erasure since it was checked
		case bad != nil:
			err = e.quarantine(tenant, key, raw, fmt.Errorf("held event batch: %w", bad))
			ts.heldMu.Unlock()
			return 0, 0, err
		}
		accepted, duplicates, err = e.applyHeld(tenant, now, key, all)
		ts.heldMu.Unlock()
		return accepted, duplicates, err
	}
}

// checkHeld decodes the held batch raw and checks its events (see
// ReleaseHeld); bad is why the batch cannot be applied.
func checkHeld(raw []byte, check func(raw []byte, index int) (IngestEvent, bool, error)) (all []IngestEvent, bad error) {
	var h store.HeldBatch
	err := json.Unmarshal(raw, &h)
	for i := 0; err == nil && i < len(h.Events); i++ {
		var ev IngestEvent
		var ok bool
		if ev, ok, err = check(h.Events[i], len(all)); err == nil && ok {
			all = append(all, ev)
		}
	}
	return all, err
}

// applyHeld ingests the checked events of the held batch at key and
// deletes it; under the tenant's heldMu.
func (e *Ingester) applyHeld(tenant string, now time.Time, key []byte, all []IngestEvent) (accepted, duplicates int, err error) {
	released := all
	for len(all) > 0 {
		n := min(len(all), 1000)
		res, err := e.Ingest(tenant, all[:n])
		if err != nil {
			return accepted, duplicates, err
		}
		e.counters.ingested(tenant, now, res.Aceptados)
		accepted, duplicates = accepted+res.Aceptados, duplicates+res.Duplicados
		all = all[n:]
	}
	b := e.db.NewBatch()
	defer b.Close()
	b.DeleteHeld(key)
	for _, ev := range released {
		b.DeleteHeldEvent(tenant, ev.Event.ID) // stored now: the event table answers for it
	}
	return accepted, duplicates, b.Commit()
}

// IndexHeld writes the held-event index entries (admitHeld reads them)
// that the batches held in tenant's abuse quarantine lack, and deletes
// those that no held batch holds: a release before the index (table 'h')
// held batches without entries, and one run on the data dir since (going
// back) left entries behind when it released a batch or took an erased
// customer's events out of one; an entry left naming a batch still held
// answered a resend of an erased event as a duplicate, and the event was
// lost. Without the entries a resend of a held event was held again
// instead of answered as a duplicate (or duplicado). It returns how many
// entries it wrote and deleted. The stale entries go first, in one
// commit: until then such an entry reads as live (its batch is held), and
// an event held again since (the resend of an erased one) would be left
// without its own. Each batch's entries are then committed with Sync, and
// an event_id with a live entry is skipped: run again (at every start,
// serve), after a crash too, it writes only what is still missing,
// nothing when nothing is. check converts a held event as the release
// does (ReleaseHeld); one it drops, and a batch that does not decode, get
// no entry (the release drops or moves them too). Under the tenant's
// heldMu, so Receive waits for it.
func (e *Ingester) IndexHeld(tenant string, check func(raw []byte, index int) (IngestEvent, bool, error)) (indexed, deleted int, err error) {
	ts, err := e.state(tenant)
	if err != nil {
		return 0, 0, err
	}
	ts.heldMu.Lock()
	defer ts.heldMu.Unlock()
	keys, err := e.heldKeys(tenant)
	if err != nil {
		return 0, 0, err
	}
	batches := make([]*store.HeldBatch, len(keys))       // nil: one that does not decode, which the release moves to the damaged-record quarantine
	holds := make(map[string]map[string]bool, len(keys)) // held batch key → the index keys of its events
	for i, key := range keys {
		raw, err := e.db.Get(key)
		if err != nil {
			return 0, 0, err
		}
		var h store.HeldBatch
		if json.Unmarshal(raw, &h) == nil {
			batches[i] = &h
		}
		holds[string(key)] = heldIndexKeys(tenant, batches[i])
	}
	if deleted, err = e.deleteStaleHeld(tenant, holds); err != nil {
		return 0, 0, err
	}
	// Oldest first: an event_id held twice is the first batch's, as the
	// release applies it.
	for i, key := range keys {
		if batches[i] == nil {
			continue
		}
		evs, err := e.unindexedHeld(tenant, batches[i], check)
		if err == nil && len(evs) > 0 {
			err = e.db.IndexHeld(tenant, key, evs)
		}
		if err != nil {
			return indexed, deleted, err
		}
		indexed += len(evs)
	}
	return indexed, deleted, nil
}

// heldIndexKeys returns the held-event index keys of the events of the
// held batch h (none for nil, a batch that does not decode).
func heldIndexKeys(tenant string, h *store.HeldBatch) map[string]bool {
	held := map[string]bool{}
	if h == nil {
		return held
	}
	for _, id := range heldIDs(h) {
		if id != "" {
			held[string(store.HeldEventKey(tenant, id))] = true
		}
	}
	return held
}

// heldIDs returns the event_id of each event of the held batch h ("" for
// an event without one).
func heldIDs(h *store.HeldBatch) []string {
	ids := make([]string, len(h.Events))
	for i, ev := range h.Events {
		var one struct {
			ID string `json:"event_id"`
		}
		if json.Unmarshal(ev, &one) == nil {
			ids[i] = one.ID
		}
	}
	return ids
}

// unindexedHeld returns the events of the held batch h that have no live
// held-event index entry, each with the hash of its canonical JSON
// (check's), as Receive indexes them.
func (e *Ingester) unindexedHeld(tenant string, h *store.HeldBatch, check func(raw []byte, index int) (IngestEvent, bool, error)) ([]store.HeldEvent, error) {
	ids := heldIDs(h)
	live := make([]bool, len(ids))
	if err := e.db.HeldSums(tenant, ids, func(i int, _ [32]byte) { live[i] = true }); err != nil {
		return nil, err
	}
	var evs []store.HeldEvent
	for i, ev := range h.Events {
		if live[i] || ids[i] == "" {
			continue
		}
		it, ok, err := check(ev, i)
		if err != nil || !ok || it.Event.ID != ids[i] {
			continue // the release drops it
		}
		evs = append(evs, store.HeldEvent{ID: it.Event.ID, Sum: sha256.Sum256(it.Canonical)})
	}
	return evs, nil
}

// deleteStaleHeld deletes, in one commit, the held-event index entries of
// tenant that name a batch not held or one that does not hold their
// event_id (holds: each held batch's index keys), and returns how many.
func (e *Ingester) deleteStaleHeld(tenant string, holds map[string]map[string]bool) (int, error) {
	var stale [][]byte
	lo, hi := store.HeldEventSpan(tenant)
	err := e.db.Scan(lo, hi, func(k, v []byte) error {
		if len(v) > 32 && !holds[string(v[32:])][string(k)] {
			stale = append(stale, bytes.Clone(k))
		}
		return nil
	})
	if err != nil || len(stale) == 0 {
		return 0, err
	}
	b := e.db.NewBatch()
	defer b.Close()
	for _, k := range stale {
		b.Delete(k)
	}
	return len(stale), b.Commit()
}

// heldKeys returns the keys of tenant's held batches, oldest first.
func (e *Ingester) heldKeys(tenant string) ([][]byte, error) {
	var keys [][]byte
	lo, hi := store.QuarantineSpan(tenant)
	err := e.db.Scan(lo, hi, func(k, _ []byte) error {
		keys = append(keys, bytes.Clone(k))
		return nil
	})
	return keys, err
}

// HeldCount is how many requests of tenant wait in quarantine.
func (e *Ingester) HeldCount(tenant string) int { return e.db.CountHeld(tenant) }
