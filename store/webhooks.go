package store

import "time"

// Webhooks: the tenant's registration ('w', one record) and the delivery
// queue ('W', by due time, delivery id), JSON written by batch.

// WebhookKey is the key of the tenant's webhook registration.
func WebhookKey(tenant string) []byte { return tableKey(tenant, tableWebhook, 0) }

// WebhookDeliveryKey is the queue key of delivery id, due at due.
func WebhookDeliveryKey(tenant string, due time.Time, id string) []byte {
	b := appendTime(tableKey(tenant, tableWebhookQueue, len(id)+9), due)
	return appendStr(b, id)
}

// WebhookQueueSpan bounds the tenant's whole delivery queue.
func WebhookQueueSpan(tenant string) (lower, upper []byte) {
	return tableSpan(tenant, tableWebhookQueue)
}

// WebhookDueSpan bounds the deliveries due at or before now.
func WebhookDueSpan(tenant string, now time.Time) (lower, upper []byte) {
	lower, _ = tableSpan(tenant, tableWebhookQueue)
	return lower, appendTime(tableKey(tenant, tableWebhookQueue, 8), now.Add(time.Nanosecond))
}

// ParseWebhookDeliveryKey decodes a delivery queue key of tenant.
func ParseWebhookDeliveryKey(tenant string, key []byte) (due time.Time, id string, ok bool) {
	parts, ok := splitKey(tenant, key, "8s")
	if !ok {
		return time.Time{}, "", false
	}
	return timeAt(parts[0]), string(parts[1]), true
}
