package store

import "time"

// Events: the event table ('e', by event_id) and the customer event index
// ('E', by cliente_ref, ts, event_id). The engine owns the codecs (the
// event's binary encoding and the index's small summary).

// EventKey is the key of the event id of tenant.
func EventKey(tenant, id string) []byte {
	return appendStr(tableKey(tenant, tableEvent, len(id)+1), id)
}

// EventSpan bounds the tenant's event table.
func EventSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableEvent) }

// CustomerEventKey is the customer event index entry of event id, of
// customer ref at ts. With id "" it is the bound before every entry of the
// customer at ts (the engine's window scans).
func CustomerEventKey(tenant, ref string, ts time.Time, id string) []byte {
	return customerIndexKey(tenant, tableCustomerEvent, ref, ts, id)
}

// CustomerEventSpan bounds the customer event index entries of ref.
func CustomerEventSpan(tenant, ref string) (lower, upper []byte) {
	return tableSpan(tenant, tableCustomerEvent, ref)
}

// CustomerEventIndexSpan bounds the whole customer event index of tenant
// (every customer's entries, in cliente_ref order).
func CustomerEventIndexSpan(tenant string) (lower, upper []byte) {
	return tableSpan(tenant, tableCustomerEvent)
}

// ParseCustomerEventKey decodes a customer event index key of tenant.
func ParseCustomerEventKey(tenant string, key []byte) (ref string, ts time.Time, id string, ok bool) {
	return parseCustomerIndex(tenant, key)
}

// customerIndexKey is the key of the two customer indexes (events and
// decisions) in table: cliente_ref, time, id; parseCustomerIndex reads it.
func customerIndexKey(tenant string, table byte, ref string, at time.Time, id string) []byte {
	b := tableKey(tenant, table, len(ref)+len(id)+10)
	b = appendStr(b, ref)
	b = appendTime(b, at)
	return appendStr(b, id)
}

// parseCustomerIndex decodes the keys of the two customer indexes (events
// and decisions): cliente_ref, time, id.
func parseCustomerIndex(tenant string, key []byte) (ref string, at time.Time, id string, ok bool) {
	parts, ok := splitKey(tenant, key, "s8s")
	if !ok {
		return "", time.Time{}, "", false
	}
	return string(parts[0]), timeAt(parts[1]), string(parts[2]), true
}
