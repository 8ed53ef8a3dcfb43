package store

// Abuse: the abuse guard's state of each client ('A', by client_id), JSON
// written by the server.

// AbuseKey is the key of the abuse state of client clientID.
func AbuseKey(tenant, clientID string) []byte {
	return appendStr(tableKey(tenant, tableAbuse, len(clientID)+1), clientID)
}

// AbuseSpan bounds the tenant's abuse states.
func AbuseSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableAbuse) }

// PutAbuseState writes the abuse state of client clientID, committed with
// Sync.
func (db *DB) PutAbuseState(tenant, clientID string, state []byte) error {
	b := db.NewBatch()
	defer b.Close()
	b.Set(AbuseKey(tenant, clientID), state)
	return b.Commit()
}

// AbuseStateWrite is one client's abuse state for PutAbuseStates.
type AbuseStateWrite struct {
	Tenant, ClientID string
	State            []byte
}

// PutAbuseStates writes the abuse states ws in one batch committed with
// Sync: all of them or none; a client named twice keeps its later state.
func (db *DB) PutAbuseStates(ws []AbuseStateWrite) error {
	b := db.NewBatch()
	defer b.Close()
	for _, w := range ws {
		b.Set(AbuseKey(w.Tenant, w.ClientID), w.State)
	}
	return b.Commit()
}

// ScanAbuseStates calls fn with the key and value of each abuse state of
// tenant, both valid only during the call.
func (db *DB) ScanAbuseStates(tenant string, fn func(key, state []byte) error) error {
	lo, hi := AbuseSpan(tenant)
	return db.Scan(lo, hi, fn)
}
