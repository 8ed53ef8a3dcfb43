package privacy

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

var t0 = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

// newTest returns an engine and its privacy Service over an in-memory store
// with one sandbox tenant "acme" (no control group) and a catalog of n
// coupons; both run on the returned fake clock.
func newTest(tb testing.TB, n int) (*engine.Engine, *Service, *store.DB, *clock.Fake) {
	tb.Helper()
	db := storetest.Open(tb)
	s := store.DefaultSettings()
	s.ControlShare = 0
	s.RateLimits = false
	storetest.Sandbox(tb, db, "acme", t0, s)
	clk := clock.NewFake(t0)
	e := engine.New(engine.Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clk.Now, Seed: 1})
	var acts []engine.Action
	for i := 1; i <= n; i++ {
		acts = append(acts, engine.Action{ID: i, Nombre: fmt.Sprintf("cupon%d", i), TipoCupon: fmt.Sprintf("T%d", i),
			CostoEnvioCents: 50, DescuentoMaxCents: int64(1000 * i), DescuentoPct: 10, Activa: true})
	}
	if _, err := e.Campaigns.ReplaceCatalog("acme", acts, t0); err != nil {
		tb.Fatal(err)
	}
	return e, newService(e, db, clk.Now), db, clk
}

func newService(e *engine.Engine, db *store.DB, now func() time.Time) *Service {
	return New(Config{DB: db, Engine: e, Secrets: store.TestSecrets(), Now: now, Log: zerolog.Nop()})
}

// ingestFor ingests n purchases of ref (ids prefix-0..n-1) before t0.
func ingestFor(tb testing.TB, e *engine.Engine, ref, prefix string, n int) {
	tb.Helper()
	evs := make([]engine.IngestEvent, n)
	for i := range evs {
		ev := engine.Event{ID: fmt.Sprintf("%s-%d", prefix, i), ClienteRef: ref, TS: t0.Add(-time.Duration(n-i) * time.Hour),
			Tipo: engine.CompraCat, Clave: "abarrotes", ValorCents: 10000, TicketID: fmt.Sprintf("t%s%d", prefix, i), MargenCents: 2500}
		evs[i] = engine.IngestEvent{Index: i, Event: ev, Canonical: []byte(ev.ID)}
	}
	res, err := e.Ingester.Ingest("acme", evs)
	if err != nil || res.Aceptados != n {
		tb.Fatalf("ingest: %+v %v", res, err)
	}
}

// holds reports whether any key or value of the store contains b.
func holds(tb testing.TB, db *store.DB, b []byte) bool {
	tb.Helper()
	found := false
	if err := db.Scan(nil, nil, func(k, v []byte) error {
		if bytes.Contains(k, b) || bytes.Contains(v, b) {
			found = true
			return store.ErrStop
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return found
}

// eraseWithLedger requests and processes the deletion of ref through
// ledger, fails the test unless it completes and the live store no longer
// holds ref (why names the case), and returns ref's keyed hash.
func eraseWithLedger(tb testing.TB, p *Service, db *store.DB, ledger func(LedgerEntry) error, ref, why string) string {
	tb.Helper()
	if _, err := p.RequestDeletion("acme", ref, "ci_1"); err != nil {
		tb.Fatal(err)
	}
	st, err := p.ProcessDeletions(tb.Context(), DeletionHooks{Ledger: ledger})
	if err != nil || st.Completed != 1 {
		tb.Fatalf("deletion %s: %+v %v; want it completed", why, st, err)
	}
	if holds(tb, db, []byte(ref)) {
		tb.Errorf("deletion %s: the customer's data is still in the live store", why)
	}
	return p.CustomerHash("acme", ref)
}

// reopenService opens the store in fs (a crash's clone) as a start
// does, with a new engine and service at t0; the store closes with the
// test.
func reopenService(t *testing.T, fs *storefs.MemFS) (*store.DB, *Service) {
	t.Helper()
	db, err := store.Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	now := func() time.Time { return t0 }
	e := engine.New(engine.Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: now, Seed: 1})
	return db, newService(e, db, now)
}
