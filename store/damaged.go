package store

// Damaged: records that failed to decode, moved aside ('U', by the original
// key from its table byte on). A record's quarantine key is derived from its
// own key, so whoever deletes the record by its key (a customer's deletion)
// can delete its quarantined copy too.

// DamagedKey is the key under which a damaged record of tenant stored at key
// is kept in quarantine. It returns nil when key is not a data key of
// tenant.
func DamagedKey(tenant string, key []byte) []byte {
	p := tenantPrefix(tenant)
	if len(key) <= len(p) || string(key[:len(p)]) != string(p) || key[len(p)] == tableDamaged {
		return nil
	}
	out := make([]byte, 0, len(key)+1)
	out = append(out, p...)
	out = append(out, tableDamaged)
	return append(out, key[len(p):]...)
}

// DamagedOriginal is the inverse of DamagedKey: the key a quarantined record
// was stored at, or nil when qkey is not a quarantine key of tenant.
func DamagedOriginal(tenant string, qkey []byte) []byte {
	p := tenantPrefix(tenant)
	if len(qkey) <= len(p)+1 || string(qkey[:len(p)]) != string(p) || qkey[len(p)] != tableDamaged {
		return nil
	}
	out := make([]byte, 0, len(qkey)-1)
	out = append(out, p...)
	return append(out, qkey[len(p)+1:]...)
}

// DamagedSpan bounds the tenant's quarantined damaged records.
func DamagedSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableDamaged) }
