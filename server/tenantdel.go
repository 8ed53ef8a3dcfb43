package server

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// ForgetTenant drops what the server keeps in memory of tenant, whose
// deletion has begun (its tenant and credential records are hidden: its
// tokens already answer 401), and of its credentials clientIDs: their
// rate-limit buckets, their abuse guard's state, its changes not yet
// stored and the decisions it waits to see confirmed, and, with the
// tenant label (serve --metrics-tenant-label), the tenant's series in
// /metrics. Its gauges leave /metrics with it: they are read for the
// tenants the store lists.
func (s *Server) ForgetTenant(tenant string, clientIDs []string) {
	for _, id := range clientIDs {
		s.limits.forget(id)
	}
	s.abuse.forget(tenant, clientIDs)
	s.metrics.business.forget(tenant)
}

// forget drops the buckets of id.
func (l *limiter) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.keys[id]; e != nil {
		e.unlink()
		delete(l.keys, id)
	}
}

// forget drops the state of tenant's credentials clientIDs.
func (g *abuseGuard) forget(tenant string, clientIDs []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range clientIDs {
		delete(g.creds, id)
	}
	for k := range g.sent {
		if strings.HasPrefix(k, tenant+"\x00") {
			delete(g.sent, k)
		}
	}
	kept := g.writes[:0]
	for _, w := range g.writes {
		if w.tenant != tenant {
			kept = append(kept, w)
		}
	}
	g.writes = kept
}

// forget deletes tenant's series (with the tenant label; without it, the
// counters are every tenant's sums and keep what it added).
func (b *business) forget(tenant string) {
	if !b.tenantLabel {
		return
	}
	for _, v := range []*prometheus.CounterVec{b.decisions, b.folded, b.notLearned, b.batchJobs, b.batchLines, b.webhooks, b.escalations} {
		v.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
	}
	b.decided.Range(func(k, _ any) bool {
		if l, ok := k.(decisionLabels); ok && l.tenant == tenant {
			b.decided.Delete(k)
		}
		return true
	})
	b.actionsMu.Lock()
	delete(b.actions, tenant)
	b.actionsMu.Unlock()
}
