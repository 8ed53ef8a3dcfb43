package store

// Abuse: the abuse guard's state of each client ('A', by client_id), JSON
// written by the server.

// AbuseKey is the key of the abuse state of client clientID.
func AbuseKey(tenant, clientID string) []byte {
	return appendStr(tableKey(tenant, tableAbuse, len(clientID)+1), clientID)
}

// AbuseSpan bounds the tenant's abuse states.
func AbuseSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableAbuse) }
