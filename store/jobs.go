package store

// Jobs: batch job records ('j', by job_id) and the stored chunks of their
// request's customer lists ('J', by job_id, index), JSON written by batch.

import "bytes"

// JobKey is the key of the record of job id.
func JobKey(tenant, id string) []byte {
	return appendStr(tableKey(tenant, tableJob, len(id)+1), id)
}

// JobSpan bounds the tenant's job records.
func JobSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableJob) }

// JobChunkKey is the key of chunk i of job id's customer list.
func JobChunkKey(tenant, id string, i int) []byte {
	b := appendStr(tableKey(tenant, tableJobClients, len(id)+9), id)
	return appendInt(b, int64(i))
}

// isJobChunkKey reports whether k is a key of a job's request chunk
// (JobChunkKey): a tenant key of the chunks' table (tenant ids hold no
// 0x00).
func isJobChunkKey(k []byte) bool {
	if len(k) == 0 || k[0] != spaceTenant {
		return false
	}
	end := bytes.IndexByte(k[1:], 0) // the tenant's terminator, at k[1+end]
	return end >= 0 && len(k) > end+2 && k[end+2] == tableJobClients
}

// JobChunksSpan bounds the chunks of job id.
func JobChunksSpan(tenant, id string) (lower, upper []byte) {
	return tableSpan(tenant, tableJobClients, id)
}

// JobChunkTableSpan bounds every job's chunks of tenant.
func JobChunkTableSpan(tenant string) (lower, upper []byte) {
	return tableSpan(tenant, tableJobClients)
}
