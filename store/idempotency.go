package store

// Idempotency: the answer stored for each Idempotency-Key ('i'), JSON
// written by the engine.

// IdempotencyKey is the key of the record of Idempotency-Key k.
func IdempotencyKey(tenant, k string) []byte {
	return appendStr(tableKey(tenant, tableIdempotency, len(k)+1), k)
}

// IdempotencySpan bounds the tenant's idempotency records.
func IdempotencySpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableIdempotency) }

// ParseIdempotencyKey returns the Idempotency-Key of an idempotency record
// key of tenant.
func ParseIdempotencyKey(tenant string, key []byte) (k string, ok bool) {
	return keyString(tenant, key, "s", 0)
}

// Idempotency reads the record of Idempotency-Key k (ErrNotFound when
// there is none).
func (db *DB) Idempotency(tenant, k string) ([]byte, error) {
	key := IdempotencyKey(tenant, k)
	return db.Get(key)
}

// SetIdempotency writes the record of Idempotency-Key k in b.
func (b *Batch) SetIdempotency(tenant, k string, rec []byte) { b.Set(IdempotencyKey(tenant, k), rec) }

// DeleteIdempotency deletes the record of Idempotency-Key k in b.
func (b *Batch) DeleteIdempotency(tenant, k string) { b.Delete(IdempotencyKey(tenant, k)) }
