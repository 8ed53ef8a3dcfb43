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
	parts, ok := splitKey(tenant, key, "s")
	if !ok {
		return "", false
	}
	return string(parts[0]), true
}
