package lab

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/engine"
)

// TestWorldValueMatchesSamples checks the truth every policy is scored
// by: the mean of many sampled rewards (what learners and the engine see)
// must match trueValue, the expectation the figures use, within four
// standard errors, for every coupon and nothing, over several families.
func TestWorldValueMatchesSamples(t *testing.T) {
	const draws = 20000
	for _, seed := range []uint64{3, 7, 1004} {
		fam := DrawFamily(seed)
		fam.Customers = 40
		w := newWorld(&fam, rand.New(rand.NewPCG(seed, 1)))
		rng := rand.New(rand.NewPCG(seed, 9))
		for _, i := range []int{0, 1, 2, 3} {
			c := w.custs[i]
			for k := -1; k < len(w.coupons); k++ {
				var sum, sq float64
				for range draws {
					r := w.reward(w.sample(rng, c, k, true, true), k)
					sum, sq = sum+r, sq+r*r
				}
				mean := sum / draws
				se := math.Sqrt(math.Max(sq/draws-mean*mean, 0) / draws)
				if want := w.trueValue(c, k); math.Abs(mean-want) > 4*se+0.02*math.Abs(want)+1e-9 {
					t.Errorf("seed %d customer %d coupon %d: sampled mean %.3f ± %.3f, trueValue %.3f", seed, i, k, mean, se, want)
				}
			}
		}
	}
}

// TestObservableValueAveragesHidden checks that the observable oracle's
// value is the hidden types' average: over the customers of one profile
// kind in a hidden-response world, the mean of observableValue equals the
// mean of trueValue up to sampling of the types.
func TestObservableValueAveragesHidden(t *testing.T) {
	fam := DrawFamily(5)
	fam.Customers, fam.ResponseTie, fam.Responders, fam.RareNeverRespond = 6000, "hidden", 0.4, false
	w := newWorld(&fam, rand.New(rand.NewPCG(5, 1)))
	for _, c := range w.custs {
		c.redeemSeen = true // the test is about the response and opt-out types
	}
	for k := range w.coupons {
		var obs, tru float64
		for _, c := range w.custs {
			obs += w.observableValue(c, k, 0) - w.observableValue(c, -1, 0)
			tru += w.trueValue(c, k) - w.trueValue(c, -1)
		}
		n := float64(len(w.custs))
		if math.Abs(obs-tru)/n > 0.08*math.Abs(tru/n)+0.05 {
			t.Errorf("coupon %d: mean observable effect %.3f, mean true effect %.3f", k, obs/n, tru/n)
		}
	}
}

// smallFamily is world seed's family shrunk for quick tests.
func smallFamily(seed uint64, customers, weeks int) Family {
	f := DrawFamily(seed)
	f.Resize(customers, weeks)
	return f
}

// TestRunWorldOrdersAndRepeats runs small worlds and checks what must
// hold whatever the engine does: the oracle is at least every policy;
// the observable oracle is not below never-send beyond the sampling of
// hidden types; and a world's report does not depend on how many worlds ran at
// once (each has its own store, engine and streams).
func TestRunWorldOrdersAndRepeats(t *testing.T) {
	fams := []Family{smallFamily(1002, 400, 6), smallFamily(1003, 400, 6)}
	for _, f := range fams {
		rep, err := RunWorld(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, wk := range rep.Weeks {
			const eps = 1e-9
			for name, v := range map[string]float64{"engine": wk.Engine, "reference": wk.Reference, "greedy": wk.Greedy,
				"random": wk.Random, "observable oracle": wk.ObsOracle, "best single": wk.BestSingle, "never": wk.Never} {
				if v > wk.Oracle+eps {
					t.Errorf("seed %d week %d: %s %.4f above the oracle %.4f", f.Seed, wk.Week, name, v, wk.Oracle)
				}
			}
			// The observable oracle chooses by the expectation over hidden
			// types; the realised types of a small world can leave it a
			// little below never-send, never far.
			if wk.ObsOracle < wk.Never-0.02*math.Abs(wk.Never) {
				t.Errorf("seed %d week %d: observable oracle %.4f below never-send %.4f", f.Seed, wk.Week, wk.ObsOracle, wk.Never)
			}
			checkModelView(t, f.Seed, &wk)
		}
	}
	cfg := WorldsConfig{Base: 1002, N: 2, Parallel: 2, Customers: 400, Weeks: 6}
	if testing.Short() {
		cfg.Customers, cfg.Weeks = 150, 3
	}
	reps, err := RunWorlds(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Parallel = 1
	again, err := RunWorlds(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(again, reps, cmpopts.EquateNaNs(), cmpopts.IgnoreUnexported(Family{})); d != "" {
		t.Errorf("two worlds at once differ from one at a time (-one +two):\n%s", d)
	}
}

// TestOutcomesRedrawLuck: WorldsConfig.Outcomes draws the same world
// with other luck. Never-send's and the oracle's weekly values are
// expectations over the same customers, so they do not move; the
// engine's from the second week do, since it learns from other outcomes;
// each report names the stream it drew; and Redraw's stream 0 is the world
// as RunWorlds runs it.
func TestOutcomesRedrawLuck(t *testing.T) {
	cfg := WorldsConfig{Base: 1002, N: 1, Parallel: 2, Customers: 150, Weeks: 3}
	own, err := RunWorlds(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	redrawn, err := Redraw(context.Background(), cfg, 1002, []uint64{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(own[0], redrawn[0], cmpopts.EquateNaNs(), cmpopts.IgnoreUnexported(Family{})); d != "" {
		t.Errorf("Redraw's stream 0 differs from the run's world (-run +redraw):\n%s", d)
	}
	a, b := own[0], redrawn[1]
	if a.Family.Outcomes != 0 || b.Family.Outcomes != 1 {
		t.Errorf("reports name outcome streams %d and %d, want 0 and 1", a.Family.Outcomes, b.Family.Outcomes)
	}
	moved := false
	for i := range a.Weeks {
		wa, wb := a.Weeks[i], b.Weeks[i]
		if wa.Never != wb.Never || wa.Oracle != wb.Oracle {
			t.Errorf("week %d: never-send %.4f / %.4f, oracle %.4f / %.4f: the world itself moved", wa.Week, wa.Never, wb.Never, wa.Oracle, wb.Oracle)
		}
		if i > 0 && (wa.Engine != wb.Engine || wa.Reference != wb.Reference) {
			moved = true
		}
	}
	if !moved {
		t.Error("another outcome stream left the engine's and the reference's weekly values as they were")
	}
}

// checkModelView checks a week's view of the engine's model in a whole
// run: one entry per coupon; choice shares that sum to at most 1; the
// choice's true value never-send's when the model chose no coupon, and at
// most the oracle's. TestModelView checks the arithmetic itself.
func checkModelView(t *testing.T, seed uint64, wk *WorldWeek) {
	t.Helper()
	if len(wk.Coupons) != len(wk.EngineSends) {
		t.Errorf("seed %d week %d: %d coupons in the model's view, %d in the sends", seed, wk.Week, len(wk.Coupons), len(wk.EngineSends))
	}
	var chosen float64
	for _, c := range wk.Coupons {
		chosen += c.Choice
		if c.Candidates == 0 && (c.TrueEffect != 0 || c.ModelEffect != 0 || c.Choice != 0) {
			t.Errorf("seed %d week %d: a coupon with no candidate decision has figures: %+v", seed, wk.Week, c)
		}
	}
	if chosen > 1+1e-9 {
		t.Errorf("seed %d week %d: choice shares sum to %.4f", seed, wk.Week, chosen)
	}
	if chosen == 0 && math.Abs(wk.EngineChoice-wk.Never) > 1e-9 {
		t.Errorf("seed %d week %d: no coupon chosen, but the choice is worth %.4f against never-send's %.4f", seed, wk.Week, wk.EngineChoice, wk.Never)
	}
	if wk.EngineChoice > wk.Oracle+1e-9 {
		t.Errorf("seed %d week %d: the model's choice %.4f above the oracle %.4f", seed, wk.Week, wk.EngineChoice, wk.Oracle)
	}
}

// TestModelView: two decisions' detalle become a week's view of the model.
// The effects are μ minus never-send's μ, the choice is the coupon of
// highest μ (none when no coupon's μ is above never-send's), the true
// values are the world's; effects average over the decisions where the
// coupon was a candidate, choice shares and the choice's value over all.
func TestModelView(t *testing.T) {
	fam := DrawFamily(3)
	fam.Customers = 4
	w := newWorld(&fam, rand.New(rand.NewPCG(3, 1)))
	if len(w.coupons) < 2 {
		t.Fatalf("world 3 has %d coupons, want 2 or more", len(w.coupons))
	}
	r := &run{w: w, acts: []engine.Action{{ID: 11}, {ID: 12}}}
	row := WorldWeek{Coupons: make([]CouponWeek, 2)}
	c0, c1 := w.custs[0], w.custs[1]
	r.modelView(c0, &engine.Detalle{Acciones: []api.DetalleAccion{{Accion: 0, MuMXN: 10}, {Accion: 11, MuMXN: 12}, {Accion: 12, MuMXN: 9}}}, &row)
	r.modelView(c1, &engine.Detalle{Acciones: []api.DetalleAccion{{Accion: 0, MuMXN: 5}, {Accion: 12, MuMXN: 4}}}, &row)
	row.perDecision(2)
	never0, never1 := w.trueValue(c0, -1), w.trueValue(c1, -1)
	want := WorldWeek{
		EngineChoice: (w.trueValue(c0, 0) + never1) / 2,
		Coupons: []CouponWeek{
			{TrueEffect: w.trueValue(c0, 0) - never0, ModelEffect: 2, Choice: 0.5, Candidates: 1},
			{TrueEffect: (w.trueValue(c0, 1) - never0 + w.trueValue(c1, 1) - never1) / 2, ModelEffect: -1, Candidates: 2},
		},
	}
	if d := cmp.Diff(want, row, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("model view (-want +got):\n%s", d)
	}
}

// TestReferenceFindsEffect feeds the reference learner synthetic rewards
// with a known effect per coupon (one helps, one hurts, one does
// nothing) and checks that it sends the helpful one once exploration has
// faded, never the harmful one, and that its standard errors cover the
// truth.
func TestReferenceFindsEffect(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ref := newReference([]string{"a", "b"}, rand.New(rand.NewPCG(3, 4)))
	acts := []engine.Action{{ID: 1}, {ID: 2}, {ID: 3}}
	effects := []float64{8, -6, 0}
	feats := make([]engine.Features, 300)
	for week := 1; week <= 8; week++ {
		for i := range feats {
			v := &custView{f: &feats[i]}
			k := ref.choose(v, acts)
			if week > 2 {
				k = rng.IntN(4) - 1 // a logging policy that explores everything
			}
			y := 20 * rng.ExpFloat64() * b2f(rng.Float64() < 0.3)
			if k >= 0 {
				y += effects[k]
			}
			ref.observe(v, acts, k, sampled{reward: y})
		}
		ref.fold()
	}
	v := &custView{f: &feats[0]}
	_, z := ref.vectors(v)
	for k, want := range effects {
		e, se := ref.effect(ref.blocks[acts[k].ID], z)
		if math.Abs(e-want) > 3*se || se <= 0 || se > 3 {
			t.Errorf("coupon %d: effect %.2f ± %.2f, want %.2f", k, e, se, want)
		}
	}
	ref.week = 1000 // no exploration
	if k := ref.choose(&custView{f: &feats[1]}, acts); k != 0 {
		t.Errorf("reference sends %d, want coupon 0 (the only positive effect)", k)
	}
}

// TestEffectBias checks the summary of the model's coupon effects: the
// last week only, coupons without candidates left out, paying above 1 MXN.
func TestEffectBias(t *testing.T) {
	week := func(cs ...CouponWeek) WorldWeek { return WorldWeek{Coupons: cs} }
	reps := []*WorldReport{
		{Weeks: []WorldWeek{week(CouponWeek{TrueEffect: 9, ModelEffect: -9, Candidates: 5}),
			week(CouponWeek{TrueEffect: 3, ModelEffect: 1, Candidates: 5}, CouponWeek{TrueEffect: -2, ModelEffect: -3, Candidates: 5})}},
		{Weeks: []WorldWeek{week(CouponWeek{TrueEffect: 2, ModelEffect: 2, Candidates: 1}, CouponWeek{TrueEffect: 50, ModelEffect: 0})}},
		{},
	}
	want := EffectBias{Coupons: 3, Bias: -1, Paying: 2, PayingTrue: 2.5, PayingModel: 1.5}
	if diff := cmp.Diff(want, effectBias(reps)); diff != "" {
		t.Errorf("effectBias (-want +got):\n%s", diff)
	}
}

// TestSummarize checks the summary's medians, worst values and counts on
// hand-made reports.
func TestSummarize(t *testing.T) {
	nan := math.NaN()
	mk := func(engine, ref, never float64, flat bool) *WorldReport {
		wk := WorldWeek{Engine: engine, Reference: ref, Never: never, Oracle: 10, ObsOracle: 9}
		return &WorldReport{Weeks: []WorldWeek{wk, wk, wk}, Flat: flat, Pass: !flat,
			Capture:    Captures{Engine: (engine - never) / (10 - never), Reference: (ref - never) / (10 - never)},
			ObsCapture: Captures{nan, nan, nan, nan, nan, nan}}
	}
	s := Summarize([]*WorldReport{mk(6, 4, 5, false), mk(4, 6, 5, true), mk(8, 7, 5, false)})
	want := WorldsSummary{Worlds: 3, EngineAboveNever: 2, ReferenceAboveNever: 2, EngineAboveReference: 2, EngineAboveBestSingle: 3,
		EngineAboveGreedy: 3, Flat: 1, Pass: 2,
		// Gains over never-send +20 %, -20 % (flat), +60 %; all together 18/15.
		MeanCapture: 0.4, WorstGain: -0.2, BelowHalfPercent: 1, TotalGain: 0.2,
		// No gate checks in these reports.
		GateWithin2SE: nan, GateMeanZ: nan,
		// No coupon rows either.
		Effects: EffectBias{Bias: nan, PayingTrue: nan, PayingModel: nan},
		// Every week alike: the whole run's gains are the last third's,
		// flat world included; the reference's -20 %, +20 %, +40 %.
		Whole: WholeRun{EngineMedian: 0.2, EngineWorst: -0.2, EngineTotal: 0.2, ReferenceMedian: 0.2, ReferenceWorst: -0.2, ReferenceTotal: 2.0 / 15}}
	// The flat world's captures stay out of the median and the worst.
	want.Median = Captures{Engine: 0.4, Reference: 0.1}
	want.Worst = Captures{Engine: 0.2, Reference: -0.2}
	want.MedianObs = Captures{nan, nan, nan, nan, nan, nan}
	if d := cmp.Diff(want, s, cmpopts.EquateNaNs(), cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("summary (-want +got):\n%s", d)
	}
	// Weeks of testing that cost count in the whole run only: a world that
	// earns 3 then 6, 6 against never-send's 5 gains 20 % over the last
	// third and nothing over the whole run.
	costly := mk(6, 5, 5, false)
	costly.Weeks[0].Engine, costly.Weeks[0].Reference = 3, 2
	s = Summarize([]*WorldReport{costly})
	if math.Abs(s.TotalGain-0.2) > 1e-9 || math.Abs(s.Whole.EngineTotal) > 1e-9 || math.Abs(s.Whole.ReferenceWorst+0.2) > 1e-9 {
		t.Errorf("last third %v, whole run %+v: want 0.2, engine 0 and reference -0.2", s.TotalGain, s.Whole)
	}
	// Where every world gains, the worst gain is the smallest gain, not 0.
	if g := Summarize([]*WorldReport{mk(6, 4, 5, false), mk(8, 7, 5, false)}).WorstGain; math.Abs(g-0.2) > 1e-9 {
		t.Errorf("worst gain of worlds gaining 20 %% and 60 %%: %v, want 0.2", g)
	}
}

// TestGuardFieldReadsShapes checks guardField's reading of guard values
// through the same reflection it uses on engine.Status.
func TestGuardFieldReadsShapes(t *testing.T) {
	type guard struct {
		Active   bool
		Baseline int
		Policy   float64
	}
	for _, tc := range []struct {
		v    any
		want string
	}{
		{guard{Active: true, Baseline: 0, Policy: 3}, "active baseline=0"},
		{guard{Active: true, Baseline: 2}, "active baseline=2"},
		{guard{Policy: 5}, "inactive"},
		{&guard{Active: true}, "active baseline=0"},
		{(*guard)(nil), "inactive"},
		{"nunca", "nunca"},
	} {
		if got := readGuard(reflect.ValueOf(tc.v)); got != tc.want {
			t.Errorf("%#v: %q, want %q", tc.v, got, tc.want)
		}
	}
	if _, ok := guardField(engine.Status{}); ok != reflect.ValueOf(engine.Status{}).FieldByName("Guard").IsValid() {
		t.Errorf("guardField's ok does not say whether engine.Status has Guard")
	}
}

// TestPastBuyersHistory: with Family.PastBuyers every customer reaches
// week 1 with a purchase in the history the engine ingested (its
// frecuencia_365d above 0); without it, at 1 % conversion, most have none.
func TestPastBuyersHistory(t *testing.T) {
	for _, past := range []bool{true, false} {
		fam := twoEmails(300)
		fam.PastBuyers = past
		b, err := InProcess(context.Background(), BenchSetup{Tenant: labTenantSetup(fam.ControlShare), Seed: fam.Seed + 1})
		if err != nil {
			t.Fatal(err)
		}
		r, err := newRun(context.Background(), &fam, b)
		if err != nil {
			t.Fatal(err)
		}
		_, now, err := tenantNow(r.db)
		if err != nil {
			t.Fatal(err)
		}
		none := 0
		for _, c := range r.w.custs {
			f, err := r.eng.CustomerFeatures(labTenant, c.ref)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := f.Get("frecuencia_365d", now)
			if (n > 0) != (c.histTickets > 0) {
				t.Errorf("past buyers %v, %s: engine sees %v tickets in 365 days, the world drew %d", past, c.ref, n, c.histTickets)
			}
			if n == 0 {
				none++
			}
		}
		b.Close()
		if past && none > 0 || !past && none < len(r.w.custs)/2 {
			t.Errorf("past buyers %v: %d of %d customers without a purchase in the history", past, none, len(r.w.custs))
		}
	}
}

// TestOutcomesCommonRandomNumbers: a customer's window is drawn from a
// source keyed by the world, its outcome stream, the customer and the
// week (run.outcomes), so every policy meets the same luck there and a
// policy that decides one customer otherwise leaves the other windows'
// draws alone; and under equal sources a coupon changes a window only
// where the coupon acts: a customer it does not move buys or not, and
// spends, as under nothing, and one it lifts buys wherever nothing would.
func TestOutcomesCommonRandomNumbers(t *testing.T) {
	fam := DrawFamily(3)
	fam.Customers = 60
	r := &run{fam: &fam, weekNo: 2}
	draws := func(rng *rand.Rand, first float64) []float64 {
		return []float64{first, rng.Float64(), rng.Float64(), rng.NormFloat64()}
	}
	a := draws(r.outcomes(3))
	if b := draws(r.outcomes(3)); !cmp.Equal(a, b) {
		t.Errorf("customer 3 in week 2 drawn twice: %v, then %v", a, b)
	}
	other := fam
	other.Outcomes = 1
	for _, tc := range []struct {
		name string
		r    *run
		i    int
	}{
		{"another customer", r, 4},
		{"another week", &run{fam: &fam, weekNo: 3}, 3},
		{"another stream", &run{fam: &other, weekNo: 2}, 3},
	} {
		if b := draws(tc.r.outcomes(tc.i)); cmp.Equal(a, b) {
			t.Errorf("%s draws what customer 3 in week 2 does: %v", tc.name, b)
		}
	}
	fam.SleepingDogs, fam.OptoutProb = 0.3, 0.5 // the opt-out's draw must not shift the purchase's
	w := newWorld(&fam, rand.New(rand.NewPCG(3, 1)))
	for i, c := range w.custs {
		for k := range w.coupons {
			for j := range 20 {
				none := w.sample(rand.New(rand.NewPCG(uint64(i), uint64(j))), c, -1, true, true)
				sent := w.sample(rand.New(rand.NewPCG(uint64(i), uint64(j))), c, k, true, true)
				switch {
				case !c.responder && (none.bought != sent.bought || none.amount != sent.amount):
					t.Fatalf("customer %d, not moved by coupons: %+v under nothing, %+v under coupon %d", i, none, sent, k)
				case none.bought && !sent.bought:
					t.Fatalf("customer %d buys under nothing and not under coupon %d", i, k)
				}
			}
		}
	}
}
