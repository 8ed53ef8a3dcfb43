package engine

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
)

// keptFeatBytes is, per tenant, what its ingestion keeps in feats, counted
// entry by entry with its fold stage held.
func keptFeatBytes(tb testing.TB, e *Engine, tenants []string) []int {
	tb.Helper()
	held := make([]int, len(tenants))
	for i, id := range tenants {
		ts, err := e.state(id)
		if err != nil {
			tb.Fatal(err)
		}
		t := &ts.ingestMu
		t.mu.Lock()
		for r, p := range t.feats {
			held[i] += featEntrySize(r, p.enc)
		}
		t.mu.Unlock()
	}
	return held
}

// TestFeaturesCacheBoundAcrossTenants: the kept features of every tenant
// together stay within the one bound once a fold begins (a bound per tenant let each of many
// tenants keep its own, beyond serve's heap limit), the byte count is
// exact, and the tenant that ingested least recently gives its entries
// first: the one ingesting keeps its newest.
func TestFeaturesCacheBoundAcrossTenants(t *testing.T) {
	const limit, customers = 6000, 40 // one request's features are about 4,000 bytes
	e, db := newTestEngine(t, 1, nil)
	e.featBudget = newFeatBudget(limit) // before the tenants below are loaded
	tenants := []string{"t1", "t2", "t3", "t4", "t5"}
	s := store.DefaultSettings()
	s.RateLimits = false
	for _, id := range tenants {
		storetest.Sandbox(t, db, id, t0, s)
	}
	for round := range 2 {
		for i, id := range tenants {
			var evs []IngestEvent
			for c := range customers {
				evs = append(evs, cachePurchase(fmt.Sprintf("%s-%08d", id, c), round*customers+c))
			}
			if res, err := e.Ingester.Ingest(id, evs); err != nil || res.Aceptados != len(evs) {
				t.Fatalf("ingest %s: %+v %v", id, res, err)
			}
			ts, _ := e.state(id)
			ts.ingestMu.mu.Lock()
			ts.ingestMu.beginFold() // where the bound is kept, as the next request would
			ts.ingestMu.mu.Unlock()
			held := keptFeatBytes(t, e, tenants)
			total := 0
			for _, n := range held {
				total += n
			}
			if total > limit || int64(total) != e.featBudget.used.Load() {
				t.Errorf("round %d, after %s: %d bytes kept by the tenants together %v, counted %d, bound %d",
					round, id, total, held, e.featBudget.used.Load(), limit)
			}
			if held[i] == 0 {
				t.Errorf("round %d: %s, which just ingested, keeps nothing (%v)", round, id, held)
			}
			for _, other := range tenants {
				ots, _ := e.state(other)
				ot := &ots.ingestMu
				ot.mu.Lock()
				if n := len(ot.feats); n < ot.featsPeak/4 || ot.feats == nil && ot.featsPeak != 0 {
					// A Go map keeps the memory of the most it held.
					t.Errorf("round %d, after %s: %s's map holds %d entries, made for %d", round, id, other, n, ot.featsPeak)
				}
				ot.mu.Unlock()
			}
		}
	}
	// Every tenant's records are the stored ones.
	for _, id := range tenants {
		name := id + "-00000000"
		f, err := e.loadFeatures(id, name)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := newTestEngine(t, 1, nil)
		ingestAll(t, ref, cachePurchase(name, 0))
		ingestAll(t, ref, cachePurchase(name, customers))
		if diff := cmp.Diff(storedFeatures(t, ref, name), f.Export(t0)); diff != "" {
			t.Errorf("features of %s (-want +got):\n%s", name, diff)
		}
	}
}

// TestFeaturesCacheBudgetConcurrent has tenants ingest at once over one
// small budget, so that each evicts the others' entries while they fold
// and commit; afterwards the count is exact and every kept copy is the
// stored record. Run it with -race.
func TestFeaturesCacheBudgetConcurrent(t *testing.T) {
	const limit = 3000
	e, db := newTestEngine(t, 1, nil)
	e.featBudget = newFeatBudget(limit)
	tenants := []string{"t1", "t2", "t3", "t4"}
	s := store.DefaultSettings()
	s.RateLimits = false
	for _, id := range tenants {
		storetest.Sandbox(t, db, id, t0, s)
	}
	var wg sync.WaitGroup
	for _, id := range tenants {
		for w := range 2 {
			wg.Go(func() {
				for n := range 20 {
					evs := []IngestEvent{cachePurchase(fmt.Sprintf("%s-%d-%02d", id, w, n%5), n), cachePurchase(fmt.Sprintf("%s-%d-x", id, w), n)}
					if _, err := e.Ingester.Ingest(id, evs); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	held := keptFeatBytes(t, e, tenants)
	total := 0
	for _, n := range held {
		total += n
	}
	if int64(total) != e.featBudget.used.Load() {
		t.Errorf("%d bytes kept %v, counted %d", total, held, e.featBudget.used.Load())
	}
	for _, id := range tenants {
		ts, _ := e.state(id)
		tu := &ts.ingestMu
		tu.mu.Lock()
		for ref, p := range tu.feats {
			v, err := db.Get(store.FeaturesKey(id, ref))
			if err != nil || !bytes.Equal(v, p.enc) {
				t.Errorf("%s: kept features of %s differ from the stored record (%v)", id, ref, err)
			}
		}
		tu.mu.Unlock()
	}
}

// TestFeatureSparesBoundAcrossTenants: the Features folds are done with
// are kept for reuse up to maxSpareFeatures in the process, not per tenant
// (which kept that many for every tenant that had ever ingested).
func TestFeatureSparesBoundAcrossTenants(t *testing.T) {
	const customers = 600
	e, db := newTestEngine(t, 1, nil)
	tenants := []string{"t1", "t2", "t3", "t4", "t5"}
	s := store.DefaultSettings()
	s.RateLimits = false
	for _, id := range tenants {
		storetest.Sandbox(t, db, id, t0, s)
	}
	for _, id := range tenants {
		var evs []IngestEvent
		for c := range customers {
			evs = append(evs, cachePurchase(fmt.Sprintf("%s-%08d", id, c), c))
		}
		if res, err := e.Ingester.Ingest(id, evs); err != nil || res.Aceptados != len(evs) {
			t.Fatalf("ingest %s: %+v %v", id, res, err)
		}
	}
	lists := map[*featSpares]bool{}
	for _, id := range tenants {
		ts, _ := e.state(id)
		lists[ts.ingestMu.spares] = true
	}
	kept := 0
	for l := range lists {
		kept += l.len()
	}
	if kept > maxSpareFeatures || kept < customers {
		t.Errorf("%d spare Features kept by %d tenants together, want %d to %d", kept, len(tenants), customers, maxSpareFeatures)
	}
}

// TestFeatBudgetOverOnlyWhenKept: with none kept (--features-cache-mib 0)
// the pending entries a budget counts are never "over": no eviction can
// take them, and every fold of every tenant walked every tenant for them.
func TestFeatBudgetOverOnlyWhenKept(t *testing.T) {
	for _, tc := range []struct {
		limit, used int
		want        bool
	}{{0, 100, false}, {-1, 100, false}, {10, 100, true}, {100, 100, false}} {
		b := newFeatBudget(tc.limit)
		b.used.Store(int64(tc.used))
		if got := b.over(); got != tc.want {
			t.Errorf("limit %d, used %d: over %v, want %v", tc.limit, tc.used, got, tc.want)
		}
	}
}
