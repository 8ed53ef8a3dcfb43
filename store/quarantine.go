package store

import "time"

// Quarantine: event batches held by the abuse guard ('z', by time, trace
// id), JSON written by the server. (Damaged records are damaged.go.)

// QuarantineKey is the key of the event batch of trace held at at.
func QuarantineKey(tenant string, at time.Time, trace string) []byte {
	b := appendTime(tableKey(tenant, tableQuarantine, len(trace)+9), at)
	return appendStr(b, trace)
}

// QuarantineSpan bounds the tenant's quarantined event batches.
func QuarantineSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableQuarantine) }

// SetQuarantined writes in b the held event batch of trace, arrived at at.
func (b *Batch) SetQuarantined(tenant string, at time.Time, trace string, batch []byte) {
	key := QuarantineKey(tenant, at, trace)
	b.Set(key, batch)
}

// ScanQuarantined calls fn for each held event batch of tenant, oldest
// first, with its key (for DeleteQuarantined) and value, both valid only
// during the call.
func (db *DB) ScanQuarantined(tenant string, fn func(key, batch []byte) error) error {
	lo, hi := QuarantineSpan(tenant)
	return db.Scan(lo, hi, fn)
}

// DeleteQuarantined deletes in b the held event batch of key, a key
// ScanQuarantined gave.
func (b *Batch) DeleteQuarantined(key []byte) { b.Delete(key) }
