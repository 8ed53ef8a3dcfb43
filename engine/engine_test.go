package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine/ope"
	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
)

var t0 = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

// newTestEngine returns an engine over an in-memory store with one sandbox
// tenant "acme" (no control group) and a catalog of n coupons.
func newTestEngine(tb testing.TB, n int, fn func(*store.Settings)) (*Engine, *store.DB) {
	tb.Helper()
	db := storetest.Open(tb)
	return newTestEngineOn(tb, db, n, fn), db
}

// newBenchEngine is newTestEngine for a benchmark: its store's new
// write-ahead logs come with their blocks in place (storetest.OpenBench),
// so that synced commits cost what they would on a disk.
func newBenchEngine(b *testing.B, n int, fn func(*store.Settings)) (*Engine, *store.DB) {
	b.Helper()
	db := storetest.OpenBench(b)
	return newTestEngineOn(b, db, n, fn), db
}

// newTestEngineOn is newTestEngine over the store db, which the caller
// opened (on a file system of its own, say).
func newTestEngineOn(tb testing.TB, db *store.DB, n int, fn func(*store.Settings)) *Engine {
	tb.Helper()
	s := store.DefaultSettings()
	s.ControlShare = 0
	s.RateLimits = false
	if fn != nil {
		fn(&s)
	}
	storetest.Sandbox(tb, db, "acme", t0, s)
	clk := clock.NewFake(t0)
	e := New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clk.Now, Seed: 1})
	var acts []Action
	for i := 1; i <= n; i++ {
		acts = append(acts, Action{ID: i, Nombre: fmt.Sprintf("cupon%d", i), TipoCupon: fmt.Sprintf("T%d", i),
			CostoEnvioCents: 50, DescuentoMaxCents: int64(1000 * i), DescuentoPct: 10, Activa: true})
	}
	if _, err := e.Campaigns.ReplaceCatalog("acme", acts, t0); err != nil {
		tb.Fatal(err)
	}
	return e
}

func advance(tb testing.TB, db *store.DB, d time.Duration) {
	tb.Helper()
	if _, err := db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(d); return nil }); err != nil {
		tb.Fatal(err)
	}
}

// TestLoggedPropensitiesMatchFrequencies draws many decisions for one
// context with a fixed seed and checks with a chi-square test that the
// logged propensities are the frequencies with which actions come out.
func TestLoggedPropensitiesMatchFrequencies(t *testing.T) {
	e, _ := newTestEngine(t, 4, nil)
	ts, _ := e.state("acme")
	tn, _ := e.db.Tenant("acme")
	req := Request{ClienteRef: "chi-square", Canal: "push"}
	const draws = 20000
	counts := map[int]int{}
	var probs map[int]float64
	for i := 0; i < draws; i++ {
		b := e.db.NewBatch()
		rec, _, err := e.decideNew(ts, tn, t0, req, b, new(decideScratch))
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		counts[rec.Accion]++
		if probs == nil {
			probs = map[int]float64{}
			for j, id := range rec.Candidates {
				probs[id] = rec.Probs[j]
			}
		}
		if got := probs[rec.Accion]; math.Abs(got-rec.Propension) > 1e-12 {
			t.Fatalf("logged propensity %v differs from the distribution's %v", rec.Propension, got)
		}
	}
	var chi2 float64
	sum := 0.0
	for id, p := range probs {
		if p <= 0 {
			t.Fatalf("action %d has probability %v: the floor must keep it > 0", id, p)
		}
		sum += p
		exp := p * draws
		d := float64(counts[id]) - exp
		chi2 += d * d / exp
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("probabilities sum to %v", sum)
	}
	// 4 degrees of freedom: P(chi2 > 18.47) = 0.001.
	if chi2 > 18.47 {
		t.Errorf("chi-square %.2f over %v draws: counts %v, probabilities %v", chi2, draws, counts, probs)
	}
}

// TestPolicyConvergesToBestAction runs a small world where action 2 earns
// the most for everyone and checks that, after learning, the policy puts
// most probability on it.
func TestPolicyConvergesToBestAction(t *testing.T) {
	e, db := newTestEngine(t, 3, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	effect := map[int]int64{0: 0, 1: 500, 2: 3000, 3: -1000} // cents of margin in the window
	seq := 0
	share := func() float64 {
		n := 0
		for i := 0; i < 200; i++ {
			ts, _ := e.state("acme")
			tn, now, _ := e.tenantNow("acme")
			b := e.db.NewBatch()
			rec, _, err := e.decideNew(ts, tn, now, Request{ClienteRef: fmt.Sprintf("probe-%d", i), Canal: "push"}, b, new(decideScratch))
			b.Close()
			if err != nil {
				t.Fatal(err)
			}
			if rec.Accion == 2 {
				n++
			}
		}
		return float64(n) / 200
	}
	before := share()
	for round := 0; round < 6; round++ {
		for i := 0; i < 300; i++ {
			ref := fmt.Sprintf("world-%d-%d", round, i)
			d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CapExempt: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
				t.Fatal(err)
			}
			_, now, _ := e.tenantNow("acme")
			margin := 2000 + effect[d.Accion] + int64((seq%7)-3)*300
			seq++
			ev := IngestEvent{Event: Event{ID: fmt.Sprintf("ev-%s", ref), ClienteRef: ref, TS: now.Add(time.Hour), Tipo: CompraCat,
				Clave: "x", ValorCents: 10000, TicketID: "t" + ref, MargenCents: margin}, Canonical: []byte(ref)}
			if _, err := e.Ingester.Ingest("acme", []IngestEvent{ev}); err != nil {
				t.Fatal(err)
			}
		}
		advance(t, db, 25*time.Hour)
		st, err := e.Learner.Learn("acme")
		if err != nil {
			t.Fatal(err)
		}
		if st.Folded == 0 {
			t.Fatalf("round %d: nothing folded: %+v", round, st)
		}
	}
	after := share()
	t.Logf("share of the best action: before %.2f, after %.2f", before, after)
	if after < 0.6 || after <= before {
		t.Errorf("share of the best action: before %.2f, after %.2f; want a clear majority after learning", before, after)
	}
	ts, _ := e.state("acme")
	if v := ts.model.Load().version; v == "v0-prior" {
		t.Errorf("politica_version not updated: %s", v)
	}
	// The model survives a restart: a new engine over the same store reads it.
	e2 := New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: time.Now, Seed: 2})
	ts2, err := e2.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	if ts2.model.Load().version != ts.model.Load().version || ts2.model.Load().n() != ts.model.Load().n() {
		t.Errorf("model after restart: %s n=%d, want %s n=%d", ts2.model.Load().version, ts2.model.Load().n(), ts.model.Load().version, ts.model.Load().n())
	}
}

// BenchmarkDecide measures one online decision in process (features read,
// scoring 20 actions, exploration, durable record) over 100,000 customers
// with history.
func BenchmarkDecide(b *testing.B) { benchDecide(b, decideBenchEngine(b)) }

// BenchmarkDecideCatalog1000 is BenchmarkDecide with a catalog of 1,000
// actions, every one eligible (the most a request's acciones_permitidas
// names); record-B is the stored size of its last decision's record.
func BenchmarkDecideCatalog1000(b *testing.B) { benchDecide(b, decideBenchEngineWith(b, 1000)) }

// benchDecide times b.N online decisions of e for the benchmark customers
// and reports the stored size of the last one's record (record-B).
func benchDecide(b *testing.B, e *Engine) {
	var last string
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := e.Decide("acme", Request{ClienteRef: decideBenchRef(i), Canal: "push", CapExempt: true})
		if err != nil {
			b.Fatal(err)
		}
		last = d.DecisionID
	}
	b.StopTimer()
	nonce, _ := e.ids.parse("acme", last)
	rec, err := e.db.Get(decisionKey("acme", nonce))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(rec)), "record-B")
}

// BenchmarkDecideFloor is the least a durable decision costs in the
// store BenchmarkDecide uses, measured beside it: for the same customers,
// the two point reads a decision needs (features, customer state) and one
// synced commit of the four keys a decision writes (record, customer
// index, reward-queue entry, customer state; values of the same sizes),
// with no policy, no encoding and no locks. BenchmarkDecide over this is
// what the engine adds.
func BenchmarkDecideFloor(b *testing.B) {
	e := decideBenchEngine(b)
	// A decision for a customer with history, for a stored record of the
	// size the timed decisions write (a customer without one writes less).
	d, err := e.Decide("acme", Request{ClienteRef: decideBenchRef(decideBenchCustomers - 1), Canal: "push", CapExempt: true})
	if err != nil {
		b.Fatal(err)
	}
	nonce, _ := e.ids.parse("acme", d.DecisionID)
	rec, err := e.db.Get(decisionKey("acme", nonce))
	if err != nil {
		b.Fatal(err)
	}
	rec = bytes.Clone(rec)
	rnd := rand.New(rand.NewPCG(1, 2)) // nonces at one frozen microsecond differ in their random part, as Decide's do
	state := marshalCustomerState(&customerState{OpenNonce: nonce, OpenAt: t0, Day: "2026-01-01", Count: 1})
	settle(b, e)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ref := decideBenchRef(i)
		for _, k := range [][]byte{store.FeaturesKey("acme", ref), customerStateKey("acme", ref)} {
			if _, err := e.db.Get(k); err != nil && !errors.Is(err, store.ErrNotFound) {
				b.Fatal(err)
			}
		}
		var r [9]byte
		binary.LittleEndian.PutUint64(r[:], rnd.Uint64())
		n := newNonce(t0, r)
		batch := e.db.NewBatch()
		batch.Set(decisionKey("acme", n), rec)
		batch.Set(customerDecisionKey("acme", ref, t0, n), nil)
		batch.Set(queueKey("acme", t0.Add(7*24*time.Hour), queueReward_, n), nil)
		batch.Set(customerStateKey("acme", ref), state)
		if err := batch.Commit(); err != nil {
			b.Fatal(err)
		}
		batch.Close()
	}
}

// BenchmarkDecideParallel is BenchmarkDecide with concurrent callers, as
// the HTTP server calls it: ns/op is the time per decision when both cores
// decide (commits of concurrent decisions share WAL syncs).
func BenchmarkDecideParallel(b *testing.B) {
	e := decideBenchEngine(b)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1) - 1)
			if _, err := e.Decide("acme", Request{ClienteRef: decideBenchRef(i), Canal: "push", CapExempt: true}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

const decideBenchCustomers = 100_000

// decideBenchRef is the customer of the benchmarks' i-th decision: the
// population in turn (cust-0000000 on), then, beyond it, new customers
// (no history, no window open).
func decideBenchRef(i int) string {
	if i >= decideBenchCustomers {
		return fmt.Sprintf("new-%09d", i)
	}
	return fmt.Sprintf("cust-%07d", i)
}

// decideBenchEngine is an engine with 20 actions and 100,000 customers
// with three purchases each.
func decideBenchEngine(b *testing.B) *Engine { return decideBenchEngineWith(b, 20) }

// decideBenchEngineWith is decideBenchEngine with a catalog of n actions.
func decideBenchEngineWith(b *testing.B, n int) *Engine {
	e, _ := newBenchEngine(b, n, nil)
	const customers = decideBenchCustomers
	var evs []IngestEvent
	for i := 0; i < customers; i++ {
		ref := fmt.Sprintf("cust-%07d", i)
		for k := 0; k < 3; k++ {
			evs = append(evs, IngestEvent{Event: Event{ID: fmt.Sprintf("%s-%d", ref, k), ClienteRef: ref, TS: t0.Add(-time.Duration(k*20+1) * 24 * time.Hour),
				Tipo: CompraCat, Clave: "cat", ValorCents: 50000, TicketID: fmt.Sprintf("t%d", k), MargenCents: 12000}, Canonical: []byte{byte(k)}})
		}
		if len(evs) >= 3000 {
			if _, err := e.Ingester.Ingest("acme", evs); err != nil {
				b.Fatal(err)
			}
			evs = evs[:0]
		}
	}
	settle(b, e) // the timed decisions should not pay for flushing and compacting the 300,000 events
	return e
}

// settle brings the store to the steady state of a running server before
// a benchmark's timed work: it flushes and compacts the tenant's data, so
// the timed work does not share the cores with the background work its
// setup left behind, and it collects garbage.
func settle(tb testing.TB, e *Engine) {
	tb.Helper()
	lo, hi := store.TenantSpan("acme")
	if err := e.db.Compact(context.Background(), lo, hi); err != nil {
		tb.Fatal(err)
	}
	if err := e.db.Flush(); err != nil {
		tb.Fatal(err)
	}
	runtime.GC()
}

// BenchmarkIngest1000 measures applying one request of 1000 purchase
// events (idempotency reads, feature updates, one synced commit) spread over
// 100,000 customers.
func BenchmarkIngest1000(b *testing.B) {
	e, _ := newTestEngine(b, 1, nil)
	seq := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		evs := make([]IngestEvent, 1000)
		for k := range evs {
			seq++
			ref := fmt.Sprintf("cust-%07d", (seq*7919)%100_000)
			evs[k] = IngestEvent{Index: k, Event: Event{ID: fmt.Sprintf("ev-%09d", seq), ClienteRef: ref, TS: t0.Add(-time.Duration(seq%2000) * time.Hour),
				Tipo: CompraCat, Clave: "cat", ValorCents: 50000, TicketID: fmt.Sprintf("t%d", seq), MargenCents: 12000}, Canonical: []byte(fmt.Sprint(seq))}
		}
		if _, err := e.Ingester.Ingest("acme", evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkLearn measures folding final rewards: b.N decisions with
// purchases in their window are made, the clock passes the window, and
// one learner pass (repeated until the queue is empty) folds them.
func BenchmarkLearn(b *testing.B) {
	e, db := newBenchEngine(b, 5, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	rewardBacklog(b, e, db, b.N)
	// The backlog's decisions were made on the test's frozen clock, where
	// they would count as online traffic for ever (onlineSince 0): the
	// learner would fold in online-sized passes. Measure the learner alone.
	e.onlineAt.Store(0)
	settle(b, e)
	b.ResetTimer()
	folded := 0
	for {
		st, err := e.Learner.Learn("acme")
		if err != nil {
			b.Fatal(err)
		}
		folded += st.Folded
		if st.Folded+st.Unconfirmed == 0 {
			break
		}
	}
	b.ReportMetric(float64(folded)/b.Elapsed().Seconds(), "rewards/s")
}

// BenchmarkEvaluate1M measures admin evaluate over 1,000,000 closed
// decisions (written directly as records).
func BenchmarkEvaluate1M(b *testing.B) {
	if testing.Short() {
		b.Skip("1M records: run without -short")
	}
	e, _ := newTestEngine(b, 5, nil)
	const n = 1_000_000
	x := make([]float64, VectorDim)
	for i := range x {
		x[i] = float64(i%5) / 5
	}
	batch := e.db.NewBatch()
	for i := 0; i < n; i++ {
		reward := int64(1000 + i%777)
		r := &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i), At: t0, Accion: i % 6, Propension: 1.0 / 6,
			X: x, Candidates: []int{0, 1, 2, 3, 4, 5}, Probs: []float64{1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6},
			Priors: []float64{100, 90, 80, 70, 60, 50}, Estado: EstadoEjecutada, Recompensa: &reward}
		putDecision(batch, "acme", r, nil)
		if batch.Len() > 32<<20 {
			batch.Commit()
			batch.Close()
			batch = e.db.NewBatch()
		}
	}
	batch.Commit()
	batch.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		if ev.Records != n {
			b.Fatalf("evaluated %d records, want %d", ev.Records, n)
		}
	}
}

// TestEvaluateRecoversSingleActionValues logs uniformly random decisions
// with known mean rewards per action and checks that the estimates of
// "always a" and "never send" recover them within their intervals, and that
// excluded records are counted.
func TestEvaluateRecoversSingleActionValues(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	means := []int64{5000, 8000, 3000} // cents, for actions 0, 1, 2
	x := make([]float64, VectorDim)
	x[0] = 1
	b := e.db.NewBatch()
	for i := 0; i < 6000; i++ {
		a := i % 3
		reward := means[a] + int64((i*7919)%2001) - 1000
		r := &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i), At: t0, Accion: a, Propension: 1.0 / 3,
			X: x, Candidates: []int{0, 1, 2}, Probs: []float64{1. / 3, 1. / 3, 1. / 3}, Priors: []float64{0, 0, 0},
			Estado: EstadoEjecutada, Recompensa: &reward}
		if i%100 == 99 {
			r.Estado = EstadoModificada
		}
		putDecision(b, "acme", r, nil)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	ev, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Excluded["modificada"] != 60 || ev.Records != 5940 {
		t.Errorf("records %d, excluded %v", ev.Records, ev.Excluded)
	}
	want := map[string]float64{"never_send": 50, "always_1_cupon1": 80, "always_2_cupon2": 30}
	for _, p := range ev.Policies {
		w, ok := want[p.Policy]
		if !ok {
			continue
		}
		for name, est := range map[string]ope.Estimate{"IPS": p.IPS, "SNIPS": p.SNIPS, "DR": p.DR} {
			if !(est.Lo <= w && w <= est.Hi) || math.Abs(est.Value-w) > 2 {
				t.Errorf("%s %s = %.2f [%.2f, %.2f], want about %.0f", p.Policy, name, est.Value, est.Lo, est.Hi, w)
			}
		}
	}
}

// TestDecisionIDsDistinctOnFrozenClock makes many decisions on a sandbox
// tenant whose clock does not move: every decision gets its own id and
// record (a nonce collision would overwrite another decision).
func TestDecisionIDsDistinctOnFrozenClock(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	seen := map[string]bool{}
	const n = 6000
	for i := 0; i < n; i++ {
		d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("frozen-%06d", i), Canal: "push", CapExempt: true})
		if err != nil {
			t.Fatal(err)
		}
		if seen[d.DecisionID] {
			t.Fatalf("decision %d reused id %s", i, d.DecisionID)
		}
		seen[d.DecisionID] = true
		if i%1000 == 0 {
			r, err := e.DecisionByID("acme", d.DecisionID)
			if err != nil || r.ClienteRef != fmt.Sprintf("frozen-%06d", i) {
				t.Fatalf("record of decision %d: %v %v", i, r, err)
			}
		}
	}
}

// TestDecisionIDsDistinctAfterRestart restarts an engine with the same
// fixed seed on a sandbox store: the new engine draws the nonces its
// predecessor drew, so where the predecessor decided at the same
// microsecond each draw must be checked against the store (and redrawn),
// also when the clock comes back to that microsecond later; elsewhere no
// check is needed. No decision may overwrite another's record.
func TestDecisionIDsDistinctAfterRestart(t *testing.T) {
	type phase struct {
		restarted bool          // decide with the restarted engine
		offset    time.Duration // sandbox clock: t0 + offset
		n         int
	}
	tests := []struct {
		name   string
		phases []phase
	}{
		{"same microsecond", []phase{{false, 0, 300}, {true, 0, 300}}},
		{"another microsecond first, then back", []phase{{false, 0, 300}, {true, time.Microsecond, 50}, {true, 0, 300}}},
		{"a later microsecond", []phase{{false, 0, 100}, {true, time.Hour, 100}}},
		{"back to a microsecond of its own", []phase{{true, 0, 100}, {true, time.Microsecond, 10}, {true, 0, 100}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			first, db := newTestEngine(t, 2, nil)
			restarted := New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clock.NewFake(t0).Now, Seed: 1})
			refOf := map[string]string{} // decision id → cliente_ref
			total := 0
			for p, ph := range tc.phases {
				if _, err := db.UpdateTenant("acme", func(tn *store.Tenant) error { tn.ClockNow = t0.Add(ph.offset); return nil }); err != nil {
					t.Fatal(err)
				}
				e := first
				if ph.restarted {
					e = restarted
				}
				for i := 0; i < ph.n; i++ {
					ref := fmt.Sprintf("r%d-%04d", p, i)
					d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CapExempt: true})
					if err != nil {
						t.Fatal(err)
					}
					if prev, ok := refOf[d.DecisionID]; ok {
						t.Fatalf("phase %d: %s got the id of %s's decision", p, ref, prev)
					}
					refOf[d.DecisionID] = ref
					total++
				}
			}
			lo, hi := store.DecisionSpan("acme")
			stored := 0
			if err := db.Scan(lo, hi, func(_, _ []byte) error { stored++; return nil }); err != nil {
				t.Fatal(err)
			}
			if stored != total {
				t.Errorf("%d decision records for %d decisions", stored, total)
			}
			for id, ref := range refOf {
				if r, err := first.DecisionByID("acme", id); err != nil || r.ClienteRef != ref {
					t.Fatalf("record of %s's decision: %v %v", ref, r, err)
				}
			}
		})
	}
}

// rewardBacklog makes n confirmed decisions with a purchase in their
// 24-hour window and moves the clock past it: n rewards ready to fold.
func rewardBacklog(tb testing.TB, e *Engine, db *store.DB, n int) {
	tb.Helper()
	var evs []IngestEvent
	for i := 0; i < n; i++ {
		ref := fmt.Sprintf("learn-%07d", i)
		d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CapExempt: true})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
			tb.Fatal(err)
		}
		evs = append(evs, IngestEvent{Event: Event{ID: "ev-" + ref, ClienteRef: ref, TS: t0.Add(time.Hour), Tipo: CompraCat,
			Clave: "c", ValorCents: 10000, TicketID: "t" + ref, MargenCents: int64(1000 + i%500)}, Canonical: []byte(ref)})
		if len(evs) == 1000 {
			if _, err := e.Ingester.Ingest("acme", evs); err != nil {
				tb.Fatal(err)
			}
			evs = evs[:0]
		}
	}
	if _, err := e.Ingester.Ingest("acme", evs); err != nil {
		tb.Fatal(err)
	}
	advance(tb, db, 25*time.Hour)
}

// BenchmarkDecideWhileLearning measures online decisions while a learner
// pass folds a backlog of 50,000 final rewards: decisions read the
// published model through an atomic pointer, so the learner must not
// slow them beyond sharing the CPU. It reports decision latency
// percentiles over the decisions made while the learner was busy.
func BenchmarkDecideWhileLearning(b *testing.B) {
	e, db := newBenchEngine(b, 20, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	const backlog = 50_000
	rewardBacklog(b, e, db, backlog)
	var busy atomic.Bool
	busy.Store(true)
	done := make(chan error, 1)
	go func() {
		defer busy.Store(false)
		for {
			st, err := e.Learner.Learn("acme")
			if err != nil || st.Folded+st.Unconfirmed == 0 {
				done <- err
				return
			}
		}
	}()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("online-%09d", i), Canal: "push", CapExempt: true}); err != nil {
			b.Fatal(err)
		}
		if busy.Load() {
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if len(lat) == 0 {
		b.Fatal("the learner finished before any decision: raise -benchtime")
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(float64(len(lat)), "decisions-during-learning")
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// TestPruneIdempotency: records past the 24-hour TTL by the tenant clock
// are deleted, younger ones stay and still replay.
func TestPruneIdempotency(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	decide := func(ref, key string) *Decision {
		d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CapExempt: true, Idempotency: Idempotency{Key: key, BodyHash: HashBody([]byte(ref))}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	count := func() int {
		n := 0
		lo, hi := store.IdempotencySpan("acme")
		db.Scan(lo, hi, func(_, _ []byte) error { n++; return nil })
		return n
	}
	decide("cliente-viejo-1", "k-viejo-1")
	decide("cliente-viejo-2", "k-viejo-2")
	advance(t, db, 20*time.Hour)
	young := decide("cliente-joven", "k-joven")
	advance(t, db, 5*time.Hour) // the first two are 25 h old, the last 5 h
	n, err := e.PruneIdempotency("acme")
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || count() != 1 {
		t.Errorf("pruned %d, %d left; want 2 pruned and 1 left", n, count())
	}
	if again := decide("cliente-joven", "k-joven"); again.DecisionID != young.DecisionID {
		t.Errorf("a key younger than 24 h no longer replays: %s, want %s", again.DecisionID, young.DecisionID)
	}
	if n, _ := e.PruneIdempotency("acme"); n != 0 {
		t.Errorf("second pass pruned %d, want 0", n)
	}
}
