package engine

import (
	"errors"
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

// TestIngestAfterForgetKeepsNothing: an ingestion that took the tenant's
// state before its deletion and folds after ForgetTenant (its request
// authenticated before the tombstone) keeps none of its customers'
// features in the cache's budget: it answers ErrNoTenant. It folded and
// joined the budget again, the deleted customers' features kept in memory
// until evicted.
func TestIngestAfterForgetKeepsNothing(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	ingestAll(t, e, cachePurchase(cacheRef, 0))
	e.mu.Lock()
	ts := e.tenants["acme"] // the state a request in flight holds
	e.mu.Unlock()
	if _, err := db.MarkTenantDeleting("acme", "test", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EraseTenant("acme", t0); err != nil {
		t.Fatal(err)
	}
	e.Records().ForgetTenant("acme")
	e.mu.Lock()
	e.tenants["acme"] = ts // the request goes on with the state it took
	e.mu.Unlock()
	_, err := e.Ingester.Ingest("acme", []IngestEvent{cachePurchase(cacheRef, 1)})
	if !errors.Is(err, ErrNoTenant) {
		t.Errorf("ingest after ForgetTenant: %v, want ErrNoTenant", err)
	}
	if used := e.featBudget.used.Load(); used != 0 {
		t.Errorf("features cache counts %d bytes of the deleted tenant", used)
	}
}

// TestCountsAfterForgetDropped: counts added for a tenant after its
// deletion began (an error answer of a request that passed authentication
// before, counted by the server) are not written back by the counters'
// flush: they left an hourly record of the deleted tenant after its sweep.
func TestCountsAfterForgetDropped(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	if _, err := db.MarkTenantDeleting("acme", "test", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EraseTenant("acme", t0); err != nil {
		t.Fatal(err)
	}
	e.Records().ForgetTenant("acme")
	e.counters.Add("acme", t0, CountErrorPfx+"no_autenticado", 1) // the late request's 401
	if err := e.counters.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, err := db.Count(store.TenantSpan("acme")); err != nil || n != 0 {
		t.Errorf("records of acme after a late count and a flush: %d %v, want 0", n, err)
	}
}
