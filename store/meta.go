package store

// Meta: tenant-level records under named sub-prefixes of 'M': each
// customer's decision state ("cust", cliente_ref; binary, the engine owns
// the codec) and the tenant counters of each hour ("hourly", hour; JSON).

const (
	metaCustomer = "cust"
	metaHourly   = "hourly"
)

// CustomerStateKey is the key of customer ref's decision state.
func CustomerStateKey(tenant, ref string) []byte {
	b := appendStr(tableKey(tenant, tableMeta, len(metaCustomer)+len(ref)+2), metaCustomer)
	return appendStr(b, ref)
}

// CustomerStateSpan bounds the tenant's customer states, in cliente_ref
// order.
func CustomerStateSpan(tenant string) (lower, upper []byte) {
	return tableSpan(tenant, tableMeta, metaCustomer)
}

// CustomerStateCursor opens a cursor over the tenant's customer states.
func (db *DB) CustomerStateCursor(tenant string) (*RefCursor, error) {
	lo, hi := CustomerStateSpan(tenant)
	return db.newRefCursor(lo, hi)
}

// HourlyKey is the key of the tenant counters of hour (hours since the
// Unix epoch). Keys of consecutive hours are consecutive: [HourlyKey(from),
// HourlyKey(to+1)) bounds the hours from..to.
func HourlyKey(tenant string, hour int64) []byte {
	b := appendStr(tableKey(tenant, tableMeta, len(metaHourly)+9), metaHourly)
	return appendInt(b, hour)
}

// ParseHourlyKey returns the hour of an hourly counters key of tenant.
func ParseHourlyKey(tenant string, key []byte) (hour int64, ok bool) {
	parts, ok := splitKey(tenant, key, "s8")
	if !ok || string(parts[0]) != metaHourly {
		return 0, false
	}
	return int64At(parts[1]), true
}
