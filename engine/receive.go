package engine

import (
	"encoding/json"
	"time"
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

// Receive is the events endpoint's one call. Validated events are held in
// the abuse quarantine when d.Hold (all of them count as aceptados; held
// events never count against the quota), or applied by Ingest and counted
// against the tenant's daily quota of events.
func (e *Ingester) Receive(tenant string, events []IngestEvent, d Delivery) (IngestResult, error) {
	if d.Hold && len(events) > 0 {
		return IngestResult{Aceptados: len(events)}, e.hold(tenant, events, d)
	}
	res, err := e.Ingest(tenant, events)
	if err != nil {
		return res, err
	}
	return res, e.quotas.count(tenant, QuotaEvents, d.Now, int64(res.Aceptados))
}

// heldBatch is one request's events held in quarantine (TableQuarantine):
// their canonical JSON, to be validated and applied again on release.
type heldBatch struct {
	ClientID string            `json:"client_id"`
	Events   []json.RawMessage `json:"eventos"`
}

// hold keeps a request's events in quarantine, committed with Sync.
func (e *Ingester) hold(tenant string, events []IngestEvent, d Delivery) error {
	h := heldBatch{ClientID: d.ClientID}
	for _, ev := range events {
		h.Events = append(h.Events, json.RawMessage(ev.Canonical))
	}
	v, err := json.Marshal(&h)
	if err != nil {
		return err
	}
	b := e.db.NewBatch()
	defer b.Close()
	b.SetQuarantined(tenant, d.At, d.Trace, v)
	return b.Commit()
}

// ReleaseHeld applies every held event of tenant (idempotently, as if
// posted now) and removes them from quarantine. check validates one held
// event again (its canonical JSON; index is its position among the
// released events) and converts it; ok false drops it. It returns how
// many were accepted and how many were duplicates.
func (e *Ingester) ReleaseHeld(tenant string, check func(raw []byte, index int) (ev IngestEvent, ok bool, err error)) (accepted, duplicates int, err error) {
	var keys [][]byte
	var all []IngestEvent
	err = e.db.ScanQuarantined(tenant, func(k, v []byte) error {
		var h heldBatch
		if err := json.Unmarshal(v, &h); err != nil {
			return err
		}
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
		accepted, duplicates = accepted+res.Aceptados, duplicates+res.Duplicados
		all = all[n:]
	}
	b := e.db.NewBatch()
	defer b.Close()
	for _, k := range keys {
		b.DeleteQuarantined(k)
	}
	return accepted, duplicates, b.Commit()
}

// HeldCount is how many requests of tenant wait in quarantine.
func (e *Ingester) HeldCount(tenant string) int {
	n := 0
	e.db.ScanQuarantined(tenant, func(_, _ []byte) error { n++; return nil })
	return n
}
