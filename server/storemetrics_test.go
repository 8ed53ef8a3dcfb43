package server

import "testing"

// TestStoreMetricsExported: /metrics carries the store's health series,
// read from store.Metrics.
func TestStoreMetricsExported(t *testing.T) {
	h := newHarness(t)
	text := scrape(t, h)
	for _, series := range []string{
		"coupond_store_disk_bytes", "coupond_store_read_amplification", "coupond_store_compaction_debt_bytes",
		"coupond_store_compactions_total", "coupond_store_compactions_in_progress", "coupond_store_memtable_bytes",
		"coupond_store_wal_bytes", "coupond_store_write_stalls_total", "coupond_store_write_stall_seconds_total",
	} {
		if sample(text, series) == "" {
			t.Errorf("/metrics: no %s", series)
		}
	}
	if sample(text, "coupond_store_disk_bytes") == "0" {
		t.Errorf("/metrics: coupond_store_disk_bytes is 0 for an open store")
	}
}
