package store

import "time"

// Rewards: the learner's queue ('r', by due time, kind, nonce; empty
// values). Entries come due in key order.

// RewardQueueKey is the queue entry of kind for decision nonce, due at due.
func RewardQueueKey(tenant string, due time.Time, kind, nonce string) []byte {
	b := tableKey(tenant, tableRewardQueue, 8+len(kind)+len(nonce)+2)
	b = appendTime(b, due)
	b = appendStr(b, kind)
	return appendStr(b, nonce)
}

// RewardQueueDueSpan bounds the queue entries due at or before now.
func RewardQueueDueSpan(tenant string, now time.Time) (lower, upper []byte) {
	lower, _ = tableSpan(tenant, tableRewardQueue)
	return lower, appendTime(tableKey(tenant, tableRewardQueue, 8), now.Add(time.Nanosecond))
}

// ParseRewardQueueKey decodes a queue entry key of tenant.
func ParseRewardQueueKey(tenant string, key []byte) (due time.Time, kind, nonce string, ok bool) {
	parts, ok := splitKey(tenant, key, "8ss")
	if !ok {
		return time.Time{}, "", "", false
	}
	return timeAt(parts[0]), string(parts[1]), string(parts[2]), true
}
