package store

import (
	"crypto/sha256"
	"encoding/json"
	"time"
)

// Quarantine: event batches held by the abuse guard ('z', by time, trace
// id), HeldBatch as JSON, and the index of the event_ids they hold ('h',
// by a hash of the event_id). (Damaged records are damaged.go.)

// QuarantineKey is the key of the event batch of trace held at at.
func QuarantineKey(tenant string, at time.Time, trace string) []byte {
	b := appendTime(tableKey(tenant, tableQuarantine, len(trace)+9), at)
	return appendStr(b, trace)
}

// QuarantineSpan bounds the tenant's quarantined event batches.
func QuarantineSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableQuarantine) }

// HeldBatch is one request's events held by the abuse guard: the client
// that sent them and each event's canonical JSON, to be validated and
// applied again when the operator releases them.
type HeldBatch struct {
	ClientID string            `json:"client_id"`
	Events   []json.RawMessage `json:"eventos"`
}

// HeldEvent is one event of a held batch as the held-event index knows
// it: its event_id and the hash of its content.
type HeldEvent struct {
	ID  string
	Sum [32]byte
}

// HeldEventKey is the held-event index entry of event_id id: the table
// byte and the first 16 bytes of the id's SHA-256 (the index holds no
// identifier a client sent). Its value is the event's content hash (32
// bytes) and the key of the held batch that holds it.
func HeldEventKey(tenant, id string) []byte {
	h := sha256.Sum256([]byte(id))
	return append(tableKey(tenant, tableHeldEvent, 16), h[:16]...)
}

// HeldEventSpan bounds the tenant's held-event index.
func HeldEventSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableHeldEvent) }

// HoldBatch writes the held batch of request trace, arrived at at, and
// the held-event index entries of its events, evs, committed with Sync.
func (db *DB) HoldBatch(tenant string, at time.Time, trace string, h *HeldBatch, evs []HeldEvent) error {
	key := QuarantineKey(tenant, at, trace)
	b := db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(key, h); err != nil {
		return err
	}
	b.setHeldEvents(tenant, key, evs)
	return b.Commit()
}

// IndexHeld writes, committed with Sync, the held-event index entries of
// evs, events of the held batch at key (a key ScanHeld gave): the entries
// a batch held by a release without the index lacks (engine's
// Ingester.IndexHeld).
func (db *DB) IndexHeld(tenant string, key []byte, evs []HeldEvent) error {
	b := db.NewBatch()
	defer b.Close()
	b.setHeldEvents(tenant, key, evs)
	return b.Commit()
}

// setHeldEvents sets in b the held-event index entries of evs, held in
// the batch at key.
func (b *Batch) setHeldEvents(tenant string, key []byte, evs []HeldEvent) {
	for _, ev := range evs {
		b.Set(HeldEventKey(tenant, ev.ID), append(ev.Sum[:], key...))
	}
}

// HeldSums calls fn for each of ids held in a batch still held, with its
// index in ids and the content hash it was held with. An index entry whose
// batch is gone (released, erased, or moved to the damaged-record
// quarantine) or that does not decode holds nothing.
func (db *DB) HeldSums(tenant string, ids []string, fn func(i int, sum [32]byte)) error {
	keys := make([][]byte, len(ids))
	for i, id := range ids {
		keys[i] = HeldEventKey(tenant, id)
	}
	type entry struct {
		i     int
		sum   [32]byte
		batch string
	}
	var found []entry
	err := db.GetMany(keys, func(i int, v []byte) error {
		if len(v) > 32 {
			found = append(found, entry{i, [32]byte(v[:32]), string(v[32:])})
		}
		return nil
	})
	if err != nil {
		return err
	}
	held := map[string]bool{}
	for _, f := range found {
		ok, seen := held[f.batch]
		if !seen {
			if ok, err = db.Has([]byte(f.batch)); err != nil {
				return err
			}
			held[f.batch] = ok
		}
		if ok {
			fn(f.i, f.sum)
		}
	}
	return nil
}

// DeleteHeldEvent deletes in b the held-event index entry of event_id id.
func (b *Batch) DeleteHeldEvent(tenant, id string) { b.Delete(HeldEventKey(tenant, id)) }

// ScanHeld calls fn for each held batch of tenant, oldest first, with its
// key (for DeleteHeld); a batch that does not decode stops the scan with
// its error.
func (db *DB) ScanHeld(tenant string, fn func(key []byte, h *HeldBatch) error) error {
	lo, hi := QuarantineSpan(tenant)
	return db.Scan(lo, hi, func(k, v []byte) error {
		var h HeldBatch
		if err := json.Unmarshal(v, &h); err != nil {
			return err
		}
		return fn(k, &h)
	})
}

// CountHeld is the number of held batches of tenant.
func (db *DB) CountHeld(tenant string) int {
	n, _ := db.Count(QuarantineSpan(tenant))
	return n
}

// DeleteHeld deletes in b the held batch of key, a key ScanHeld gave.
func (b *Batch) DeleteHeld(key []byte) { b.Delete(key) }
