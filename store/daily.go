package store

import (
	"encoding/binary"
	"errors"
)

// Daily: counters of one day ('q', by day, counter name and, for
// per-customer counters, cliente_ref): the server's daily quotas are 8-byte
// big-endian counts.

// QuotaKey is the key of the tenant's daily quota counter of kind on day
// (YYYY-MM-DD).
func QuotaKey(tenant, day, kind string) []byte {
	b := tableKey(tenant, tableDaily, len(day)+len(kind)+8)
	b = appendStr(b, day)
	return appendStr(b, "quota:"+kind)
}

// DailySpan bounds the tenant's daily counters.
func DailySpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableDaily) }

// DailyCustomer returns the cliente_ref of a per-customer daily counter key
// of tenant; ok false for the tenant-wide counters.
func DailyCustomer(tenant string, key []byte) (ref string, ok bool) {
	return keyString(tenant, key, "sss", 2)
}

// QuotaCount reads the daily quota counter of kind on day: 0 when there is
// none (or its value is not the 8-byte count).
func (db *DB) QuotaCount(tenant, day, kind string) (int64, error) {
	v, err := db.Get(QuotaKey(tenant, day, kind))
	switch {
	case err == nil && len(v) == 8:
		return int64(binary.BigEndian.Uint64(v)), nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return 0, err
	}
	return 0, nil
}

// SetQuotaCount writes the daily quota counter of kind on day in b.
func (b *Batch) SetQuotaCount(tenant, day, kind string, n int64) {
	b.Set(QuotaKey(tenant, day, kind), binary.BigEndian.AppendUint64(nil, uint64(n)))
}
