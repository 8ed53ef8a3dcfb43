package store

import "time"

// Access log: who read or changed a customer's data ('l', by time, trace
// id), JSON written by privacy.

// AccessLogKey is the key of the access-log entry of trace at at.
func AccessLogKey(tenant string, at time.Time, trace string) []byte {
	b := appendTime(tableKey(tenant, tableAccessLog, len(trace)+9), at)
	return appendStr(b, trace)
}

// AccessLogSpan bounds the tenant's access log, oldest first.
func AccessLogSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableAccessLog) }
