package store

// Model: the tenant's policy model ('m', one record; the engine owns the
// codec).

// ModelKey is the key of the tenant's policy model.
func ModelKey(tenant string) []byte { return tableKey(tenant, tableModel, 0) }
