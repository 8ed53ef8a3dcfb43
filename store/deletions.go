package store

import "time"

// Deletions: the deletion ledger ('x', by keyed hash of cliente_ref) and the
// queue of pending deletions ('X', by request time, hash), JSON written by
// privacy.

// DeletionKey is the key of the deletion record of customer hash.
func DeletionKey(tenant, hash string) []byte {
	return appendStr(tableKey(tenant, tableDeletion, len(hash)+1), hash)
}

// DeletionSpan bounds the tenant's deletion records.
func DeletionSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableDeletion) }

// DeletionQueueKey is the queue key of the deletion of hash requested at at.
func DeletionQueueKey(tenant string, at time.Time, hash string) []byte {
	b := appendTime(tableKey(tenant, tableDeletionQueue, len(hash)+9), at)
	return appendStr(b, hash)
}

// DeletionQueueSpan bounds the tenant's pending deletions, oldest first.
func DeletionQueueSpan(tenant string) (lower, upper []byte) {
	return tableSpan(tenant, tableDeletionQueue)
}

// ParseDeletionQueueKey decodes a pending deletion's key of tenant.
func ParseDeletionQueueKey(tenant string, key []byte) (at time.Time, hash string, ok bool) {
	parts, ok := splitKey(tenant, key, "8s")
	if !ok {
		return time.Time{}, "", false
	}
	return timeAt(parts[0]), string(parts[1]), true
}

// ParseDeletionKey decodes a deletion record's key of tenant.
func ParseDeletionKey(tenant string, key []byte) (hash string, ok bool) {
	parts, ok := splitKey(tenant, key, "s")
	if !ok {
		return "", false
	}
	return string(parts[0]), true
}
