package store

// Quality: the tenant's data-quality counters ('Q', one JSON record).

// QualityKey is the key of the tenant's data-quality counters.
func QualityKey(tenant string) []byte { return tableKey(tenant, tableQuality, 0) }
