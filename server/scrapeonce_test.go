package server

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestScrapeReadsEachTenantOnce: a scrape reads each tenant once for its
// eight tenant gauges, with or without the tenant label. The learner
// backlog is a scan of up to 100,000 keys per tenant; read once per gauge
// that shows it, a scrape scanned it twice (745 ms against a 100,000-reward
// backlog on a busy 2-core machine, 200 tenants).
func TestScrapeReadsEachTenantOnce(t *testing.T) {
	for _, label := range []bool{false, true} {
		h := newHarnessWith(t, func(d *Deps) { d.MetricsTenantLabel = label })
		h.tenant("acme", true, nil)
		h.tenant("beta", true, nil)
		b := h.srv.metrics.business
		var mu sync.Mutex
		reads := map[string]int{}
		read := b.read
		b.read = func(tenant string) tenantReading {
			mu.Lock()
			reads[tenant]++
			mu.Unlock()
			return read(tenant)
		}
		text := scrape(t, h)
		scrape(t, h)
		if diff := cmp.Diff(map[string]int{"acme": 2, "beta": 2}, reads); diff != "" {
			t.Errorf("tenant label %v: reads per tenant in two scrapes (-want +got):\n%s", label, diff)
		}
		want := map[bool]string{false: "coupond_learner_rewards_pending", true: `coupond_learner_rewards_pending{tenant="beta"}`}[label]
		if got := sample(text, want); got != "0" {
			t.Errorf("tenant label %v: %s = %q, want 0", label, want, got)
		}
	}
}
