package store

import (
	"encoding/json"
	"time"
)

// Quarantine: event batches held by the abuse guard ('z', by time, trace
// id), HeldBatch as JSON. (Damaged records are damaged.go.)

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

// HoldBatch writes the held batch of request trace, arrived at at,
// committed with Sync.
func (db *DB) HoldBatch(tenant string, at time.Time, trace string, h *HeldBatch) error {
	key := QuarantineKey(tenant, at, trace)
	b := db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(key, h); err != nil {
		return err
	}
	return b.Commit()
}

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
