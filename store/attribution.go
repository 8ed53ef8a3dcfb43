package store

// Attribution: the link of a coupon sent to its decision and its fate ('a',
// by cupon_emitido_id), JSON written by the engine.

// AttributionKey is the key of the attribution record of coupon cupon.
func AttributionKey(tenant, cupon string) []byte {
	return appendStr(tableKey(tenant, tableAttribution, len(cupon)+1), cupon)
}

// AttributionSpan bounds the tenant's attribution records.
func AttributionSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableAttribution) }
