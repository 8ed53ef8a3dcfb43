package engine

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

const cacheRef = "ana-00000001"

// cachePurchase is purchase n of ref: the same content every time.
func cachePurchase(ref string, n int) IngestEvent {
	ev := Event{ID: fmt.Sprintf("%s-ev%d", ref, n), ClienteRef: ref, TS: t0.Add(-time.Duration(100-n) * time.Hour),
		Tipo: CompraCat, Clave: fmt.Sprintf("cat%d", n%3), ValorCents: int64(1000 * n), TicketID: fmt.Sprintf("%s-t%d", ref, n), MargenCents: int64(100 * n)}
	return IngestEvent{Event: ev, Canonical: []byte(ev.ID)}
}

func ingestAll(tb testing.TB, e *Engine, evs ...IngestEvent) {
	tb.Helper()
	res, err := e.Ingester.Ingest("acme", evs)
	if err != nil || res.Aceptados != len(evs) {
		tb.Fatalf("ingest: %+v %v", res, err)
	}
}

// storedFeatures is ref's stored feature record, exported at t0.
func storedFeatures(tb testing.TB, e *Engine, ref string) map[string]any {
	tb.Helper()
	f, err := e.loadFeatures("acme", ref)
	if err != nil {
		tb.Fatal(err)
	}
	return f.Export(t0)
}

// checkFeatCache fails unless every committed feature record ingestion
// keeps in memory is, when the next request would begin its fold, byte for
// byte the stored one.
func checkFeatCache(tb testing.TB, e *Engine) {
	tb.Helper()
	ts, err := e.state("acme")
	if err != nil {
		tb.Fatal(err)
	}
	t := &ts.ingestMu
	t.mu.Lock()
	defer t.mu.Unlock()
	t.beginFold()
	done := t.doneGen.Load()
	for ref, p := range t.feats {
		if p.gen > done {
			continue
		}
		v, err := e.db.Get(store.FeaturesKey("acme", ref))
		if errors.Is(err, store.ErrNotFound) {
			v = nil
		} else if err != nil {
			tb.Fatal(err)
		}
		if !bytes.Equal(v, p.enc) {
			tb.Errorf("kept features of %s (generation %d) differ from the stored record (%d bytes kept, %d stored)", ref, p.gen, len(p.enc), len(v))
		}
	}
}

// deleteFeatures deletes ref's feature record with a plain synced batch.
func deleteFeatures(e *Engine, ref string) error {
	b := e.db.NewBatch()
	defer b.Close()
	b.Delete(store.FeaturesKey("acme", ref))
	return b.Commit()
}

// TestFeaturesCacheFollowsOtherWriters: ingestion keeps the feature
// records it committed in memory, and reads them there instead of the
// store; every other way a record leaves the store (erasure, quarantine,
// also while a request is folded or applied) must leave the next request
// folding on what is stored, never on a kept copy.
func TestFeaturesCacheFollowsOtherWriters(t *testing.T) {
	// quarantine moves what ref's feature record holds, as a reader that
	// could not decode it does.
	quarantineRef := func(t *testing.T, e *Engine, ref string) {
		key := store.FeaturesKey("acme", ref)
		v, err := e.db.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.quarantine("acme", key, v, errors.New("test")); err != nil {
			t.Fatal(err)
		}
	}
	quarantine := func(t *testing.T, e *Engine) { quarantineRef(t, e, cacheRef) }
	cases := []struct {
		name  string
		cache int // Config.FeaturesCache
		// between runs after purchase 1 is ingested, before purchase 2.
		between func(t *testing.T, e *Engine)
		want    []int // purchases the final record holds
		stale   bool  // the kept copy is expected to differ from the store
	}{
		{name: "nothing else", want: []int{1, 2}},
		{name: "cache off", cache: -1, want: []int{1, 2}},
		{name: "erasure under LockCustomer", want: []int{2}, between: func(t *testing.T, e *Engine) {
			unlock, err := e.Records().LockCustomer("acme", cacheRef)
			if err != nil {
				t.Fatal(err)
			}
			defer unlock()
			if err := deleteFeatures(e, cacheRef); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "quarantine", want: []int{2}, between: quarantine},
		{name: "quarantine of another customer", want: []int{1, 2}, between: func(t *testing.T, e *Engine) {
			damage(t, e.db, store.FeaturesKey("acme", "otro-00000001"), "damaged")
			quarantineRef(t, e, "otro-00000001")
		}},
		{name: "a request folded and committed inside the quarantine's commit", want: []int{2}, between: func(t *testing.T, e *Engine) {
			key := store.FeaturesKey("acme", cacheRef)
			err := e.removing("acme", key, func() error {
				ingestAll(t, e, cachePurchase(cacheRef, 3)) // read the record before it goes
				return deleteFeatures(e, cacheRef)
			})
			if err != nil {
				t.Fatal(err)
			}
			checkFeatCache(t, e)
		}},
		{name: "requests folded inside the quarantine's commit, before and after its deletion", want: []int{4, 2}, between: func(t *testing.T, e *Engine) {
			key := store.FeaturesKey("acme", cacheRef)
			err := e.removing("acme", key, func() error {
				ingestAll(t, e, cachePurchase(cacheRef, 3))
				if err := deleteFeatures(e, cacheRef); err != nil {
					return err
				}
				ingestAll(t, e, cachePurchase(cacheRef, 4)) // must not fold on purchase 3's record
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			checkFeatCache(t, e)
		}},
		{name: "quarantine after a request's commit, seen by a fold before the request counts as applied", want: []int{2}, between: func(t *testing.T, e *Engine) {
			ts, _ := e.state("acme")
			turn := &ts.ingestMu
			turn.afterCommit = func() {
				turn.afterCommit = nil
				quarantine(t, e)
				turn.mu.Lock()
				turn.beginFold() // the next request's, on the overlay
				turn.mu.Unlock()
			}
			ingestAll(t, e, cachePurchase(cacheRef, 3))
			checkFeatCache(t, e)
		}},
		{name: "quarantine between a request's fold and its commit", want: []int{1, 2, 3, 4}, between: func(t *testing.T, e *Engine) {
			ts, _ := e.state("acme")
			ts.ingestMu.beforeApply = func() {
				ts.ingestMu.beforeApply = nil
				quarantine(t, e)
			}
			ingestAll(t, e, cachePurchase(cacheRef, 3), cachePurchase(cacheRef, 4))
			checkFeatCache(t, e)
		}},
		{name: "a record deleted behind ingestion's back is not seen (the cache serves)", want: []int{1, 2}, stale: true, between: func(t *testing.T, e *Engine) {
			if err := deleteFeatures(e, cacheRef); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newTestEngine(t, 1, nil)
			ts, _ := e.state("acme")
			if c.cache != 0 {
				ts.ingestMu.budget = newFeatBudget(c.cache)
			}
			ingestAll(t, e, cachePurchase(cacheRef, 1))
			if c.between != nil {
				c.between(t, e)
			}
			ingestAll(t, e, cachePurchase(cacheRef, 2))
			if !c.stale {
				checkFeatCache(t, e)
			}
			ref, _ := newTestEngine(t, 1, nil)
			for _, n := range c.want {
				ingestAll(t, ref, cachePurchase(cacheRef, n))
			}
			if diff := cmp.Diff(storedFeatures(t, ref, cacheRef), storedFeatures(t, e, cacheRef)); diff != "" {
				t.Errorf("features after purchase 2 (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFeaturesCacheBound: beyond its limit the kept features are evicted
// (the limit holds once nothing is pending, and the byte count is exact),
// and customers folded with and without kept copies end alike.
func TestFeaturesCacheBound(t *testing.T) {
	for _, limit := range []int{-1, 1500, 1 << 20} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			e, _ := newTestEngine(t, 1, nil)
			ref, _ := newTestEngine(t, 1, nil)
			ts, _ := e.state("acme")
			turn := &ts.ingestMu
			turn.budget = newFeatBudget(limit)
			rts, _ := ref.state("acme")
			rts.ingestMu.budget = newFeatBudget(0)
			const customers = 40
			for round := range 6 {
				var evs []IngestEvent
				for c := range customers {
					if (c+round)%3 != 0 {
						evs = append(evs, cachePurchase(fmt.Sprintf("cust-%08d", c), round*customers+c))
					}
				}
				ingestAll(t, e, evs...)
				for _, ev := range evs {
					ingestAll(t, ref, ev) // one request each, nothing kept
				}
				checkFeatCache(t, e)
				turn.mu.Lock()
				held := 0
				for r, p := range turn.feats {
					held += featEntrySize(r, p.enc)
				}
				if held != turn.featBytes || int64(held) != turn.budget.used.Load() || int64(held) > turn.budget.limit {
					t.Errorf("round %d: %d bytes kept, counted %d (budget %d), limit %d", round, held, turn.featBytes, turn.budget.used.Load(), turn.budget.limit)
				}
				turn.mu.Unlock()
			}
			for c := range customers {
				name := fmt.Sprintf("cust-%08d", c)
				if diff := cmp.Diff(storedFeatures(t, ref, name), storedFeatures(t, e, name)); diff != "" {
					t.Errorf("features of %s (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}

// TestFeaturesCacheConcurrentRemovals runs requests of a few customers
// from several goroutines while others quarantine and erase their feature
// records; afterwards every kept copy is the stored record. Run it with
// -race.
func TestFeaturesCacheConcurrentRemovals(t *testing.T) {
	e, _ := newTestEngine(t, 1, nil)
	ts, _ := e.state("acme")
	ts.ingestMu.beforeApply = func() { time.Sleep(50 * time.Microsecond) }
	const customers = 5
	name := func(c int) string { return fmt.Sprintf("cust-%08d", c) }
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 40 {
				n := (w*40 + r) * customers
				var evs []IngestEvent
				for c := range customers {
					evs = append(evs, cachePurchase(name(c), n+c))
				}
				if _, err := e.Ingester.Ingest("acme", evs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := range 60 {
			ref := name(r % customers)
			if r%2 == 0 {
				e.quarantine("acme", store.FeaturesKey("acme", ref), []byte("damaged"), errors.New("test"))
				continue
			}
			unlock, err := e.Records().LockCustomer("acme", ref)
			if err != nil {
				t.Error(err)
				return
			}
			if err := deleteFeatures(e, ref); err != nil {
				t.Error(err)
			}
			unlock()
		}
	}()
	wg.Wait()
	checkFeatCache(t, e)
}
