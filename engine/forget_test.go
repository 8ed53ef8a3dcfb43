package engine

import (
	"testing"

	"github.com/coupond/coupond/store"
)

// TestForgetTenantWritesNothingBack: once a deleted tenant's records are
// erased, ForgetTenant leaves nothing in memory that writes one back (the
// console counters' flush) and gives its features back to the cache's
// budget.
func TestForgetTenantWritesNothingBack(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	for n := 0; n < 5; n++ {
		ingestAll(t, e, cachePurchase(cacheRef, n))
	}
	e.counters.Add("acme", t0, "eventos", 5)
	if e.featBudget.used.Load() == 0 {
		t.Fatal("the ingestion kept no features: the test shows nothing")
	}
	if _, err := db.MarkTenantDeleting("acme", "test", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EraseTenant("acme", t0); err != nil {
		t.Fatal(err)
	}
	e.Records().ForgetTenant("acme")
	if err := e.counters.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, err := db.Count(store.TenantSpan("acme")); err != nil || n != 0 {
		t.Errorf("records of acme after ForgetTenant and a counters flush: %d %v", n, err)
	}
	if used := e.featBudget.used.Load(); used != 0 {
		t.Errorf("features cache still counts %d bytes of acme", used)
	}
	e.mu.Lock()
	_, kept := e.tenants["acme"]
	e.mu.Unlock()
	if kept {
		t.Error("the engine still holds acme's state")
	}
}
