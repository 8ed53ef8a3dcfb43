package server

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/internal/storetest"
)

// TestForgetTenantDropsSeriesAndLimits: with the tenant label, a deleted
// tenant's series leave /metrics and its credentials' rate-limit buckets
// and abuse state are dropped; the other tenant's stay.
func TestForgetTenantDropsSeriesAndLimits(t *testing.T) {
	db := storetest.Open(t)
	m := newMetrics(db, true)
	g := newAbuseGuard(DefaultAbuseConfig(), db, zerolog.Nop(), nil)
	l := newLimiter()
	for _, tenant := range []string{"acme", "beta"} {
		m.known(tenant)
		m.with(m.batchLines, tenant).Add(3)
		l.allow("ci-"+tenant, classOther, time.Now(), 1)
		g.use(tenant, "ci-"+tenant)
	}
	s := &Server{limits: l, abuse: g, metrics: m}
	s.ForgetTenant("acme", []string{"ci-acme"})
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var acme, beta int
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "tenant" {
					acme += strings.Count(lp.GetValue(), "acme")
					beta += strings.Count(lp.GetValue(), "beta")
				}
			}
		}
	}
	if acme != 0 || beta == 0 {
		t.Errorf("series labelled acme: %d, beta: %d; want none of acme's, beta's kept", acme, beta)
	}
	if _, ok := l.keys["ci-acme"]; ok || l.keys["ci-beta"] == nil {
		t.Error("rate-limit buckets: want acme's credential's dropped, beta's kept")
	}
	if _, ok := g.creds["ci-acme"]; ok || g.creds["ci-beta"] == nil {
		t.Error("abuse state: want acme's credential's dropped, beta's kept")
	}
}
