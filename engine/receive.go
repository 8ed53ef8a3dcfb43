package engine

import (
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
// by Ingest and counted against the tenant's daily quota of events, or,
// when d.Hold, held in the abuse quarantine: those with a good decision_id
// (or none) count as aceptados, and held events never count against the
// quota.
func (e *Ingester) Receive(tenant string, events []IngestEvent, d Delivery) (IngestResult, error) {
	if !d.Hold || len(events) == 0 {
		res, err := e.Ingest(tenant, events)
		if err != nil {
			return res, err
		}
		e.counters.ingested(tenant, d.Now, res.Aceptados)
		return res, e.quotas.count(tenant, QuotaEvents, d.Now, int64(res.Aceptados))
	}
	// Quarantine: keep each event's canonical JSON, committed with Sync.
	var res IngestResult
	h := store.HeldBatch{ClientID: d.ClientID}
	for i := range events {
		if rej := e.unsignedDecisionID(tenant, &events[i]); rej != nil {
			res.Rechazados = append(res.Rechazados, *rej)
		} else {
			h.Events = append(h.Events, events[i].Canonical)
		}
	}
	if res.Aceptados = len(h.Events); res.Aceptados == 0 {
		return res, nil
	}
	return res, e.db.HoldBatch(tenant, d.At, d.Trace, &h)
}

// ReleaseHeld applies every held event of tenant (idempotently, as if
// posted at now, the tenant clock) and removes them from quarantine. check
// validates one held event again (its canonical JSON; index is its
// position among the released events) and converts it; ok false drops it.
// It returns how many were accepted and how many were duplicates.
func (e *Ingester) ReleaseHeld(tenant string, now time.Time, check func(raw []byte, index int) (ev IngestEvent, ok bool, err error)) (accepted, duplicates int, err error) {
	var keys [][]byte
	var all []IngestEvent
	err = e.db.ScanHeld(tenant, func(k []byte, h *store.HeldBatch) error {
		keys = append(keys, append([]byte(nil), k...))
		for _, raw := range h.Events {
			ev, ok, err := check(raw, len(all))
			if err != nil {
				return err
			}
			if ok {
				all = append(all, ev)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
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
	for _, k := range keys {
		b.DeleteHeld(k)
	}
	return accepted, duplicates, b.Commit()
}

// HeldCount is how many requests of tenant wait in quarantine.
func (e *Ingester) HeldCount(tenant string) int { return e.db.CountHeld(tenant) }
