package store

import "time"

// Quarantine: event batches held by the abuse guard ('z', by time, trace
// id), JSON written by the server. (Damaged records are damaged.go.)

// QuarantineKey is the key of the event batch of trace held at at.
func QuarantineKey(tenant string, at time.Time, trace string) []byte {
	b := appendTime(tableKey(tenant, tableQuarantine, len(trace)+9), at)
	return appendStr(b, trace)
}

// QuarantineSpan bounds the tenant's quarantined event batches.
func QuarantineSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableQuarantine) }
