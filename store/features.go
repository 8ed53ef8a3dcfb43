package store

// Features: one record per customer ('f', by cliente_ref). The engine owns
// the binary codec. Event ingestion keeps the records it committed in
// memory and reads them there: any other writer of this table must hold
// the tenant's ingestion lock (engine Records.LockCustomer, as erasure
// does) or delete through the engine's quarantine, or ingestion will fold
// on a record that is no longer stored.

// FeaturesKey is the key of the feature record of customer ref.
func FeaturesKey(tenant, ref string) []byte {
	return appendStr(tableKey(tenant, tableFeatures, len(ref)+1), ref)
}

// FeaturesSpan bounds the tenant's feature records, in cliente_ref order.
func FeaturesSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableFeatures) }

// FeaturesRef returns the cliente_ref of a feature record key of tenant
// (sharing key's bytes: valid while key is).
func FeaturesRef(tenant string, key []byte) (ref []byte, ok bool) {
	parts, ok := splitKey(tenant, key, "s")
	if !ok {
		return nil, false
	}
	return parts[0], true
}

// FeaturesCursor opens a cursor over the tenant's feature records.
func (db *DB) FeaturesCursor(tenant string) (*RefCursor, error) {
	lo, hi := FeaturesSpan(tenant)
	return db.newRefCursor(lo, hi)
}
