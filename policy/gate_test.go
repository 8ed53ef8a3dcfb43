package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestGateOpensWhereChoicesPay: a coupon that pays for every customer (the
// prior says so too). The gate tests the model's choices against
// never-send and opens within 4 windows; then it sends the coupon to all
// but the never-send share. Fails if the gate never opens (the testing
// share stays at or below one half).
func TestGateOpensWhereChoicesPay(t *testing.T) {
	t.Parallel() // a whole simulated run; the package's tests fit in seconds only side by side
	act := simAction{id: 1, cat: -1, costCents: 1000,
		prior: func(*simCust) float64 { return 2000 },
		lift:  func(*simCust) float64 { return 0.2 }}
	w := newWorld(21, 3000, []simAction{act})
	m := New(DefaultConfig())
	opened := 0
	for i := 1; i <= 6; i++ {
		st := w.runWindow(m, week(i))
		g := m.GateStatus()
		t.Logf("window %d: sent %.3f, gate %+v", i, st.sent[1], *g)
		if g.Open() && opened == 0 {
			opened = i
		}
	}
	if opened == 0 || opened > 4 {
		t.Fatalf("gate opened at window %d, want 1–4", opened)
	}
	st := w.runWindow(m, week(7))
	if st.sent[1] < 0.8 {
		t.Errorf("window 7, gate open: coupon sent to %.1f %%, want ≥ 80 %%", 100*st.sent[1])
	}
}

// TestGateStaysShutWhereChoicesLose: the prior promises 50 MXN, the coupon
// moves no one and costs 30 MXN when redeemed. The gate never opens, and
// by window 8 coupons go to under 5 % of customers. Fails if the gate
// trusts the prior (it would send to half or more).
func TestGateStaysShutWhereChoicesLose(t *testing.T) {
	t.Parallel() // a whole simulated run; the package's tests fit in seconds only side by side
	act := simAction{id: 1, cat: -1, costCents: 3000,
		prior: func(*simCust) float64 { return 5000 },
		lift:  func(*simCust) float64 { return 0 }}
	w := newWorld(22, 3000, []simAction{act})
	m := New(DefaultConfig())
	var st windowStats
	for i := 1; i <= 8; i++ {
		st = w.runWindow(m, week(i))
		g := m.GateStatus()
		t.Logf("window %d: sent %.3f, gate %+v", i, st.sent[1], *g)
		if g.Open() {
			t.Fatalf("window %d: the gate opened on a coupon that loses money: %+v", i, *g)
		}
	}
	if st.sent[1] > 0.05 {
		t.Errorf("window 8: coupon sent to %.1f %%, want under 5 %%", 100*st.sent[1])
	}
}

// TestGateTestingShareFalls: the testing share is GateQ0 for a new model
// and falls with the rewards folded, counted so that they reach GateN0
// between GateAgeMin and GateAgeMax windows of the tenant's age (a large
// tenant keeps testing, a small one stops); in an open band it is 1 −
// NeverShare (the other bands keep testing); in a closed band of a tenant
// past GateLeanAge windows, the testing share over GateClosedLateDiv.
func TestGateTestingShareFalls(t *testing.T) {
	cfg := DefaultConfig()
	late := cfg.GateQ0 / 82 // 1 + 3^4
	for _, c := range []struct {
		name             string
		rewards, windows float64 // in GateN0 and in GateAgeMin
		want             float64
	}{
		{"new", 0, 0, cfg.GateQ0},
		{"GateN0 rewards at an age between the bounds", 1, (cfg.GateAgeMin + cfg.GateAgeMax) / 2 / cfg.GateAgeMin, cfg.GateQ0 / 2},
		{"large: 3·GateN0 rewards in GateAgeMin windows", 3, 1, cfg.GateQ0 / 2},
		{"large, three times as old", 3, 3, late},
		{"small: GateN0/4 rewards in GateAgeMax windows", 0.25, cfg.GateAgeMax / cfg.GateAgeMin, cfg.GateQ0 / 2},
		{"small, three times as old", 0.75, 3 * cfg.GateAgeMax / cfg.GateAgeMin, late},
	} {
		m := New(cfg)
		m.n, m.guard.Windows = c.rewards*cfg.GateN0, c.windows*cfg.GateAgeMin
		if got := m.gateQ(0); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: testing share %v, want %v", c.name, got, c.want)
		}
	}
	m := New(cfg)
	m.n, m.guard.Windows = 3*cfg.GateN0, 3*cfg.GateAgeMin
	m.guard.Bands = make([]gateBand, GateBands)
	m.guard.Bands[0].State = GateOpen
	got := []float64{m.gateQ(0), m.gateQ(1)}
	m.guard.Bands[0].State = GateClosed
	got = append(got, m.gateQ(0))
	want := []float64{1 - cfg.NeverShare, late, late / cfg.GateClosedLateDiv}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 })); d != "" {
		t.Errorf("open and closed bands' shares (-want +got):\n%s", d)
	}
}

// TestClosedShareEndsLate: a closed band, and every band while the guard
// holds never-send, tests at the testing share over GateClosedDiv while the
// tenant is younger than GateLeanAge windows (so an early false alarm can
// still be released) and over GateClosedLateDiv from then on; with
// GateClosedLateDiv 0 or GateLeanAge 0 it stays over GateClosedDiv. Fails if
// the late share is not applied, or applied a window early.
func TestClosedShareEndsLate(t *testing.T) {
	cfg := DefaultConfig()
	noLate, noAge := cfg, cfg
	noLate.GateClosedLateDiv, noAge.GateLeanAge = 0, 0
	for _, c := range []struct {
		name    string
		cfg     Config
		windows float64
		guard   bool
		div     float64
	}{
		{"guard, young tenant", cfg, cfg.GateLeanAge - 1, true, cfg.GateClosedDiv},
		{"guard, at GateLeanAge", cfg, cfg.GateLeanAge, true, cfg.GateClosedLateDiv},
		{"closed band, young tenant", cfg, cfg.GateLeanAge - 1, false, cfg.GateClosedDiv},
		{"closed band, at GateLeanAge", cfg, cfg.GateLeanAge, false, cfg.GateClosedLateDiv},
		{"closed band, old tenant", cfg, 4 * cfg.GateLeanAge, false, cfg.GateClosedLateDiv},
		{"GateClosedLateDiv 0", noLate, 4 * cfg.GateLeanAge, true, cfg.GateClosedDiv},
		{"GateLeanAge 0", noAge, 4 * cfg.GateLeanAge, false, cfg.GateClosedDiv},
	} {
		m := New(c.cfg)
		m.n, m.guard.Windows = 2*cfg.GateN0, c.windows
		m.guard.Bands = make([]gateBand, GateBands)
		m.guard.Bands[2].State = GateClosed
		m.guard.Active = c.guard
		b := 2
		if c.guard {
			b = 1 // a testing band: the guard's share applies to every band
		}
		qt := m.testShare()
		if got, want := m.gateQ(b), qt/c.div; math.Abs(got-want) > 1e-15 {
			t.Errorf("%s: share %v, want %v (testing share %v over %v)", c.name, got, want, qt, c.div)
		}
	}
}

// TestLeanShareAfterTestingWeeks: from GateLeanAge windows of the tenant's
// age, a testing band whose test leans against its choices tests them at
// the testing share times 2Φ(z); a younger tenant, a test that leans for
// them, one with too few decisions to judge, and Config.GateLeanAge 0 keep
// the testing share. Fails if the cut is removed, comes early or reaches
// a band whose evidence does not lean against its choices.
func TestLeanShareAfterTestingWeeks(t *testing.T) {
	cfg := DefaultConfig()
	off := cfg
	off.GateLeanAge = 0
	fill := func(n int, effect float64) guardSum {
		r := rand.New(rand.NewPCG(7, 8))
		var s guardSum
		for i := 0; i < n; i++ {
			if i%2 == 0 {
				s.addArm(effect+300*r.NormFloat64(), 0.5, 1, 0.5)
			} else {
				s.addArm(300*r.NormFloat64(), 0.5, -1, 0.5)
			}
		}
		return s
	}
	phi := func(z float64) float64 { return 0.5 * (1 + math.Erf(z/math.Sqrt2)) }
	for _, c := range []struct {
		name    string
		cfg     Config
		windows float64
		test    guardSum
		lean    bool
	}{
		{"old tenant, test leaning against", cfg, cfg.GateLeanAge, fill(800, -30), true},
		{"young tenant", cfg, cfg.GateLeanAge - 1, fill(800, -30), false},
		{"test leaning for", cfg, cfg.GateLeanAge, fill(800, 30), false},
		{"too few decisions to judge", cfg, cfg.GateLeanAge, fill(int(cfg.GuardMinN)/2, -30), false},
		{"GateLeanAge 0", off, cfg.GateLeanAge, fill(800, -30), false},
	} {
		m := New(c.cfg)
		m.n, m.guard.Windows = 2*cfg.GateN0, c.windows
		m.guard.Bands = make([]gateBand, GateBands)
		m.guard.Bands[1].Test = c.test
		qt := m.testShare()
		want := qt
		if c.lean {
			mean, se, _ := m.testStat(&c.test)
			if z := mean / se; z > -1 {
				t.Fatalf("%s: the test's z is %.2f, want a clear lean against (below −1)", c.name, z)
			}
			want = qt * 2 * phi(mean/se)
		}
		if got := m.gateQ(1); math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: band share %v, want %v (testing share %v)", c.name, got, want, qt)
		}
		if got := m.gateQ(0); got != qt {
			t.Errorf("%s: a band without evidence tests at %v, want the testing share %v", c.name, got, qt)
		}
	}
}

// TestGateSurvivesMarshal: the gate's state and test are part of the
// stored model.
func TestGateSurvivesMarshal(t *testing.T) {
	m := New(DefaultConfig())
	m.guard.Bands = make([]gateBand, GateBands)
	m.guard.Bands[2].State = GateOpen
	m.guard.Bands[2].Test.add(0, 250, 0)
	m.guard.Bands[2].Test.add(0, -50, 0)
	m.guard.Test.add(0, 250, 0)
	m.guard.Test.add(0, -50, 0)
	back := roundTrip(t, m, DefaultConfig())
	a, _ := json.Marshal(m.GateStatus())
	b, _ := json.Marshal(back.GateStatus())
	if d := cmp.Diff(string(a), string(b)); d != "" {
		t.Errorf("gate after a round trip (-before +after):\n%s", d)
	}
}

// TestTenantAgeSurvivesMarshal: the tenant's age in windows starts at 1
// with the first Fade, grows with the time faded through, a stretch
// without passes counting as one window, and is stored; a model stored
// before it was kept gets the age at which its testing share is
// unchanged.
func TestTenantAgeSurvivesMarshal(t *testing.T) {
	cfg := DefaultConfig()
	const window = 7 * 24 * time.Hour
	m := New(cfg)
	for _, at := range []time.Time{week(1), week(2), week(3), week(3).Add(84 * time.Hour)} {
		m.Fade(at, window)
	}
	if m.guard.Windows != 3.5 {
		t.Fatalf("age after 2.5 windows of weekly passes from the first Fade: %v windows, want 3.5", m.guard.Windows)
	}
	m.Fade(week(12).Add(84*time.Hour), window) // nine weeks without a pass: a monthly campaign's tenant
	if m.guard.Windows != 4.5 {
		t.Fatalf("age after an idle stretch: %v windows, want 4.5 (the stretch counts as one)", m.guard.Windows)
	}
	if back := roundTrip(t, m, cfg); back.guard.Windows != 4.5 {
		t.Errorf("age after a round trip: %v windows, want 4.5", back.guard.Windows)
	}
	old := New(cfg)
	old.n = 3 * cfg.GateN0
	old.guard.Decayed = week(9)
	if got, want := roundTrip(t, old, cfg).testShare(), cfg.GateQ0/82; math.Abs(got-want) > 1e-12 {
		t.Errorf("a model stored without its age: testing share %v, want %v (the one its rewards gave it)", got, want)
	}
}

// TestGuardCatchesChoicesThatStopPaying: a coupon pays for every customer
// for 5 windows (conversion +0.4), then moves no one and still costs its
// 80 MXN discount to every buyer. The gate opens while it pays; after the
// change the guard (on the tests' fast copies) switches the tenant to
// never-send within 4 windows, however long the coupon paid before. On the
// slow tests it never switches (the band only goes back to testing in
// window 10): the test fails if harm is judged on them.
func TestGuardCatchesChoicesThatStopPaying(t *testing.T) {
	t.Parallel() // a whole simulated run; the package's tests fit in seconds only side by side
	lift := 0.4
	act := simAction{id: 1, cat: -1, costCents: 8000,
		prior: func(*simCust) float64 { return 2000 },
		lift:  func(*simCust) float64 { return lift }}
	w := newWorld(23, 3000, []simAction{act})
	m := New(DefaultConfig())
	for i := 1; i <= 5; i++ {
		w.runWindow(m, week(i))
	}
	if !m.GateStatus().Open() {
		t.Fatalf("window 5: the gate did not open on a coupon that pays: %+v", *m.GateStatus())
	}
	lift = 0
	switched := 0
	for i := 6; i <= 9; i++ {
		st := w.runWindow(m, week(i))
		fm, fs := m.guard.Fast.diff()
		t.Logf("window %d: sent %.3f, guard active %v, gate %s, recent test %.0f ± %.0f cents", i, st.sent[1], m.GuardStatus().Active, m.GateStatus().State, fm, fs)
		if m.GuardStatus().Active && switched == 0 {
			switched = i
		}
	}
	if switched == 0 || switched > 9 {
		t.Errorf("guard switched at window %d, want 6–9 (within 4 windows of the change)", switched)
	}
}

// fillTest sets s to n differences alternating mean ± spread (standard
// error ≈ spread/√n).
func fillTest(s *guardSum, n int, mean, spread float64) {
	*s = guardSum{}
	for i := range n {
		d := mean + spread
		if i%2 == 1 {
			d = mean - spread
		}
		s.add(0, d, 0)
	}
}

// TestGateOpensBandsOnThePooledTest: the test over all customers clears
// the opening bar while no band's own test does. Every testing band whose
// own evidence does not say its choices lose opens (one with a positive
// mean; one with too little evidence and a mean above 0 only without
// Config.GatePooledOwn); a band whose choices lose on average keeps
// testing, with enough evidence or not. Without Config.GatePooled none
// opens: the test fails if the pooled test is ignored, if it overrides a
// band's own negative evidence, or if it opens a band with no evidence of
// its own under GatePooledOwn.
func TestGateOpensBandsOnThePooledTest(t *testing.T) {
	open, testing := GateOpenState, GateTestingState
	tests := []struct {
		pooled, own bool
		want        []string
	}{
		{true, true, []string{open, testing, testing, testing}},
		{true, false, []string{open, testing, open, testing}},
		{false, false, []string{testing, testing, testing, testing}},
	}
	for _, tc := range tests {
		cfg := DefaultConfig()
		cfg.GatePooled, cfg.GatePooledOwn = tc.pooled, tc.own
		m := New(cfg)
		g := &m.guard
		g.Bands = make([]gateBand, GateBands)
		fillTest(&g.Test, 2000, 300, 5000) // z = 300/(5000/√2000) ≈ 2.7
		fillTest(&g.Fast, 2000, 300, 5000)
		fillTest(&g.Bands[0].Test, 900, 300, 5000) // z ≈ 1.8: not on its own
		fillTest(&g.Bands[0].Fast, 900, 300, 5000)
		fillTest(&g.Bands[1].Test, 500, -100, 5000) // z ≈ −0.4: its choices lose
		fillTest(&g.Bands[1].Fast, 500, -100, 5000)
		fillTest(&g.Bands[2].Test, 50, 300, 5000)  // under GuardMinN, mean above 0
		fillTest(&g.Bands[3].Test, 50, -300, 5000) // under GuardMinN, mean below 0
		m.updateGate(false)
		var got []string
		for _, b := range m.GateStatus().Bands {
			got = append(got, b.State)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("GatePooled %v, GatePooledOwn %v: band states (-want +got):\n%s", tc.pooled, tc.own, d)
		}
	}
}

// TestPooledBandClosesOnItsOwnMean: a band opened on the pooled test goes
// back to testing as soon as its own mean falls below 0 (the condition it
// opened on), while a band that opened on its own test stays open with
// the same mean (only recent evidence of loss sends it back). Fails if a
// pooled opening is kept on the pooled test alone, or if the rule reaches
// bands that proved themselves.
func TestPooledBandClosesOnItsOwnMean(t *testing.T) {
	m := New(DefaultConfig())
	g := &m.guard
	g.Bands = make([]gateBand, GateBands)
	fillTest(&g.Test, 2000, 300, 5000) // z ≈ 2.7 over all customers
	fillTest(&g.Fast, 2000, 300, 5000)
	fillTest(&g.Bands[0].Test, 900, 300, 5000) // z ≈ 1.8: opens on the pooled test
	fillTest(&g.Bands[1].Test, 900, 600, 5000) // z ≈ 3.6: opens on its own
	m.updateGate(false)
	if g.Bands[0].State != GateOpen || !g.Bands[0].Pooled || g.Bands[1].State != GateOpen || g.Bands[1].Pooled {
		t.Fatalf("after opening: bands %+v, want 0 open (pooled) and 1 open (own)", g.Bands[:2])
	}
	// Both bands' means fall a little below 0; their fast tests do not say
	// they lose (GateReleaseZ −0.5: mean + 0.5 SE stays above 0).
	for b := range 2 {
		fillTest(&g.Bands[b].Test, 900, -20, 5000)
		fillTest(&g.Bands[b].Fast, 900, -20, 5000)
	}
	m.updateGate(false)
	got := []int{g.Bands[0].State, g.Bands[1].State}
	if d := cmp.Diff([]int{GateTesting, GateOpen}, got); d != "" {
		t.Errorf("band states after the means fell below 0 (-want +got):\n%s", d)
	}
	if g.Bands[0].Pooled {
		t.Errorf("band 0 back to testing still marked pooled")
	}
}

// TestOpenBandGoesBackAtHalfAStandardError: a band open on its own test
// goes back to testing once its fast test reads half a standard error
// below 0 (GateReleaseZ −0.5, POLICY.md §7.142), and stays open on a
// reading above that, however its slow test reads. Fails if the release
// bar goes back to −1 (the −0.7 SE reading would keep the band open) or
// tightens past −0.25.
func TestOpenBandGoesBackAtHalfAStandardError(t *testing.T) {
	// fillTest(900, mean, 5000): a standard error of about 167.
	tests := []struct {
		name string
		fast float64 // the fast test's mean
		want int
	}{
		{"0.7 SE below 0", -120, GateTesting},
		{"0.3 SE below 0", -50, GateOpen},
		{"above 0", 50, GateOpen},
	}
	for _, tc := range tests {
		m := New(DefaultConfig())
		g := &m.guard
		g.Bands = make([]gateBand, GateBands)
		g.Bands[1].State = GateOpen
		fillTest(&g.Bands[1].Test, 900, 600, 5000) // z ≈ 3.6: the slow test still reads high
		fillTest(&g.Bands[1].Fast, 900, tc.fast, 5000)
		m.updateGate(false)
		if d := cmp.Diff(tc.want, g.Bands[1].State); d != "" {
			t.Errorf("%s: band state (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestPooledBandWithoutOwnEvidenceGoesBackToTesting: a band open on the
// pooled test whose own test cannot be judged (a model stored by a release
// before GatePooledOwn, which opened bands without evidence of their own)
// goes back to testing under GatePooledOwn, and stays open without it.
func TestPooledBandWithoutOwnEvidenceGoesBackToTesting(t *testing.T) {
	for _, own := range []bool{true, false} {
		cfg := DefaultConfig()
		cfg.GatePooledOwn = own
		m := New(cfg)
		g := &m.guard
		g.Bands = make([]gateBand, GateBands)
		fillTest(&g.Test, 2000, 300, 5000) // the pooled test still passes
		fillTest(&g.Fast, 2000, 300, 5000)
		g.Bands[0].State, g.Bands[0].Pooled = GateOpen, true // no evidence of its own
		m.updateGate(false)
		want := GateOpen
		if own {
			want = GateTesting
		}
		if got := g.Bands[0].State; got != want {
			t.Errorf("GatePooledOwn %v: band state %d, want %d", own, got, want)
		}
	}
}

// TestChoiceGroupReadsTheLoggedChoice: the gate's test counts as the
// choice the arms the decision logged as its choice (and the coupons drawn
// with the same probability, its ties), not a coupon exploration drew; a
// decision whose logged choice was never-send has no choice group, even
// when a coupon's μ was above never-send's (with GateSendZ above 0 the
// choice needs more than that). Records without the choice fall back to
// reading it from μ.
func TestChoiceGroupReadsTheLoggedChoice(t *testing.T) {
	m := New(DefaultConfig())
	arms := []Arm{{ID: 0}, {ID: 1}, {ID: 2}, {ID: 3}}
	tests := []struct {
		name  string
		s     GuardSample
		group []int
	}{
		{"never-send chosen, a coupon explored", GuardSample{Probs: []float64{0.94, 0.05, 0.005, 0.005}, QHat: []float64{100, 150, 90, 80}, Choice: 0, ChoiceKnown: true}, nil},
		{"a coupon chosen", GuardSample{Probs: []float64{0.5, 0.45, 0.045, 0.005}, QHat: []float64{100, 150, 160, 80}, Choice: 1, ChoiceKnown: true}, []int{1}},
		{"two tied coupons chosen", GuardSample{Probs: []float64{0.5, 0.245, 0.245, 0.01}, QHat: []float64{100, 150, 140, 80}, Choice: 2, ChoiceKnown: true}, []int{1, 2}},
		{"older record: highest μ", GuardSample{Probs: []float64{0.5, 0.45, 0.045, 0.005}, QHat: []float64{100, 150, 120, 80}, Choice: -1}, []int{1}},
	}
	for _, tc := range tests {
		tc.s.Arms = arms
		in := m.choiceGroup(&tc.s, 0)
		var got []int
		for i := range arms {
			if in(i) {
				got = append(got, i)
			}
		}
		if d := cmp.Diff(tc.group, got); d != "" {
			t.Errorf("%s: choice group (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestExplorationTreatsTiedCouponsAlike: no coupon is worth sending, so
// the choice is never-send and exploration tries the coupons that might
// still beat it. Coupon 1 might (effect −1 MXN, SE 1 MXN); coupon 2 is
// below that bound but the data cannot tell it from coupon 1, so it is
// explored alike; coupon 3, far below both, keeps the floor. Fails if
// exploration follows each coupon's own bound (coupon 2 would get only the
// floor: two equal coupons explored unequally drift apart).
func TestExplorationTreatsTiedCouponsAlike(t *testing.T) {
	m := New(DefaultConfig())
	sc := []Score{{ID: 0}, {ID: 1, Effect: -100, Width: 100, own: 1e4}, {ID: 2, Effect: -200, Width: 100, own: 1e4},
		{ID: 3, Effect: -2000, Width: 100, own: 1e4}}
	probs := make([]float64, len(sc))
	if top := m.Distribution(sc, probs); sc[top].ID != 0 {
		t.Fatalf("choice %d, want never-send", sc[top].ID)
	}
	t.Logf("probabilities %v", probs)
	if math.Abs(probs[1]-probs[2]) > 1e-12 || probs[2] <= 2*probs[3] {
		t.Errorf("probabilities %v: want coupons 1 and 2 explored alike, above coupon 3's floor", probs)
	}
}

// TestGateTestWeighsDecisionsByTheirShare: 2,000 decisions tested at a
// share of 0.5 and 2,000 at 0.02 (the testing share falls), each choice
// worth +1 MXN against a residual of ±10 MXN. Weighted by the share, the
// test's standard error stays within 30 % of the inverse-variance bound
// σ/√Σq(1−q) (0.43 MXN; 0.50 here); with equal weights it is 0.76, the
// rarely tested decisions' 1/q swamping the rest.
func TestGateTestWeighsDecisionsByTheirShare(t *testing.T) {
	mean, se, ok, bound := gateTestOnShares(New(DefaultConfig()), 3, 0.5, 0.02, 2000)
	t.Logf("test %.0f ± %.0f cents; inverse-variance bound %.0f", mean, se, bound)
	if !ok || se > 1.3*bound {
		t.Errorf("test's standard error %.0f cents, want within 1.3 times the bound %.0f", se, bound)
	}
}

// TestGateTestWeighsOpenDecisionsByTheirControl: an open band sends its
// choice to 0.9 of its decisions and keeps 0.1 as control, so each tells
// as little of the difference as one tested at 0.1. Weighed by the
// choice's share (0.9) its first open weeks swamp the weeks it tested
// in, and the test's error grows as evidence is added (POLICY.md §7.62):
// 3,000 decisions tested at 0.3 then 3,000 open, the standard error is 48
// cents against the bound's 33 with the choice's share, 38 with the rule.
// Fails without GateControlWeight.
func TestGateTestWeighsOpenDecisionsByTheirControl(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.GateControlWeight = on
		mean, se, ok, bound := gateTestOnShares(New(cfg), 5, 0.3, 0.9, 3000)
		t.Logf("GateControlWeight %v: test %.0f ± %.0f cents; inverse-variance bound %.0f", on, mean, se, bound)
		if within := ok && se <= 1.25*bound; within != on {
			t.Errorf("GateControlWeight %v: standard error %.0f cents within 1.25 times the bound %.0f: %v, want %v", on, se, bound, within, on)
		}
	}
}

// gateTestOnShares feeds m's gate n decisions whose choice was sent with
// probability q1, then n with q2 (never-send the rest), each choice worth
// +1 MXN against a residual of ±10 MXN (seeded by seed), and returns the
// pooled test and the inverse-variance bound σ/√Σq(1−q) on its standard
// error, in cents.
func gateTestOnShares(m *Model, seed uint64, q1, q2 float64, n int) (mean, se float64, ok bool, bound float64) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	arms := []Arm{{ID: 0}, {ID: 1}}
	var info float64
	for i := range 2 * n {
		q := q1
		if i >= n {
			q = q2
		}
		info += q * (1 - q)
		s := GuardSample{Arms: arms, Probs: []float64{1 - q, q}, QHat: []float64{0, 0}, Choice: 1, ChoiceKnown: true}
		s.Reward = 1000 * rng.NormFloat64()
		if rng.Float64() < q {
			s.Logged, s.Reward = 1, s.Reward+100
		}
		m.observeGate(&s, 0)
	}
	mean, se, ok = m.testStat(&m.guard.Test)
	return mean, se, ok, 1000 / math.Sqrt(info)
}

// TestCloneKeepsItsOwnGate: the engine publishes a model and learns on a
// clone of it while decisions read the published one, so a clone's
// learning must not reach the original's gate (its band tests once shared
// the original's slice). Fails if Guard.clone copies Bands shallowly.
func TestCloneKeepsItsOwnGate(t *testing.T) {
	act := simAction{id: 1, cat: -1, costCents: 1000,
		prior: func(*simCust) float64 { return 2000 },
		lift:  func(*simCust) float64 { return 0.2 }}
	w := newWorld(23, 2000, []simAction{act})
	m := New(DefaultConfig())
	w.runWindow(m, week(1))
	before := *m.GateStatus()
	next := m.Clone()
	for i := 2; i <= 3; i++ {
		w.runWindow(next, week(i))
	}
	if diff := cmp.Diff(before, *m.GateStatus()); diff != "" {
		t.Errorf("the original's gate changed while its clone learned (-before +after):\n%s", diff)
	}
	if cmp.Equal(before, *next.GateStatus()) {
		t.Errorf("the clone's gate did not change in two windows of learning")
	}
}

// TestOpenBandLowersTheSendBar: a coupon whose effect for the customer is
// 0.2 widths is not the choice while the customer's band tests (GateSendZ
// 0.25) and is once the band is open (GateOpenSendZ 0.1); a coupon at
// 0.05 widths is not the choice either way; with the guard active the
// testing bar holds. Fails if the open band keeps the testing bar.
func TestOpenBandLowersTheSendBar(t *testing.T) {
	m := New(DefaultConfig())
	m.guard.Bands = make([]gateBand, GateBands)
	score := func(eff float64) []Score {
		return []Score{{ID: 0, band: 1}, {ID: 7, Effect: eff, Width: 100, band: 1}}
	}
	type row struct {
		State  int
		Active bool
		Effect float64
		Choice int
	}
	var got []row
	for _, st := range []int{GateTesting, GateOpen} {
		for _, active := range []bool{false, true} {
			for _, eff := range []float64{20, 5} {
				m.guard.Bands[1].State, m.guard.Active = st, active
				got = append(got, row{st, active, eff, score(eff)[m.gateChoice(score(eff))].ID})
			}
		}
	}
	want := []row{
		{GateTesting, false, 20, 0}, {GateTesting, false, 5, 0},
		{GateTesting, true, 20, 0}, {GateTesting, true, 5, 0},
		{GateOpen, false, 20, 7}, {GateOpen, false, 5, 0},
		{GateOpen, true, 20, 0}, {GateOpen, true, 5, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("choices by band state, guard and effect (-want +got):\n%s", diff)
	}
}

// TestDuelSettlesATie: decisions whose choice was a top-two tie of coupons
// 1 and 2 (drawn 0.45 each, never-send 0.1) feed the pair's duel. Where
// coupon 2 earns 5 MXN more (rewards' SD 20 MXN) the duel names it within
// 2,000 tied decisions; where the two are equal it names neither. Fails if
// tied decisions do not reach the duel, or a duel decides on noise.
func TestDuelSettlesATie(t *testing.T) {
	arms := []Arm{{ID: 0}, {ID: 1}, {ID: 2}}
	for _, tc := range []struct {
		name   string
		diff   float64 // coupon 2's extra reward, cents
		winner int
		ok     bool
	}{
		{"coupon 2 better by 5 MXN", 500, 2, true},
		{"equal coupons", 0, 0, false},
	} {
		m := New(DefaultConfig())
		rng := rand.New(rand.NewPCG(7, 8))
		for range 2000 {
			s := GuardSample{Arms: arms, Probs: []float64{0.1, 0.45, 0.45}, QHat: []float64{1000, 1000, 1000},
				Choice: 1, ChoiceKnown: true, Options: []int{0, 1, 2}}
			s.Logged = 1 + rng.IntN(2)
			s.Reward = 1000 + 2000*rng.NormFloat64()
			if s.Logged == 2 {
				s.Reward += tc.diff
			}
			m.Observe(&s)
		}
		w, ok := m.duelWinner(1, 2)
		if w != tc.winner || ok != tc.ok {
			t.Errorf("%s: duel winner %d, %v; want %d, %v (duel %+v)", tc.name, w, ok, tc.winner, tc.ok, m.guard.Duels["1-2"])
		}
	}
}

// TestModelPromiseKeepsTesting: late in a tenant's life a testing band
// sends its choice to few customers, but a customer whose chosen coupon's
// effect is z standard errors above 0 still gets it with at least
// GatePromise·Φ(z − bar), bar the band's own opening bar at its twelfth
// look (3.6): while the band tests and its own test is not below 0. Not in
// a closed band, under the guard, where the band's test leans negative, or
// with Config.GateModelPromise off. Fails if the model's promise is
// dropped, reaches those bands or reads GateZ.
func TestModelPromiseKeepsTesting(t *testing.T) {
	cfg := DefaultConfig()
	late := cfg.GateQ0 / 82             // testShare at 3·GateN0 rewards and 3·GateAgeMin windows
	bar := lookZ(cfg.GateLookAlpha, 12) // the band tests since its first window
	promise := func(z float64) float64 {
		return cfg.GatePromise * 0.5 * math.Erfc(-(z-bar)/math.Sqrt2)
	}
	for _, c := range []struct {
		name  string
		z     float64
		state int
		guard bool
		lean  float64 // the band test's sum of differences
		off   bool
		want  float64
	}{
		{"sure choice, testing band", 4, GateTesting, false, 0, false, promise(4)},
		{"sure choice, band test leaning up", 4, GateTesting, false, 50, false, promise(4)},
		{"at the bar", bar, GateTesting, false, 0, false, cfg.GatePromise / 2},
		{"a choice the model doubts", -1, GateTesting, false, 0, false, late},
		{"no better than its error", 0, GateTesting, false, 0, false, max(late, promise(0))},
		{"band test leaning down", 4, GateTesting, false, -50, false, late},
		{"closed band", 4, GateClosed, false, 0, false, late / cfg.GateClosedLateDiv},
		{"guard active", 4, GateTesting, true, 0, false, late / cfg.GateClosedLateDiv},
		{"open band", 4, GateOpen, false, 0, false, 1 - cfg.NeverShare},
		{"switched off", 4, GateTesting, false, 0, true, late},
	} {
		cfg := cfg
		cfg.GateModelPromise = !c.off
		m := New(cfg)
		m.n, m.guard.Windows = 3*cfg.GateN0, 3*cfg.GateAgeMin
		m.guard.Bands = make([]gateBand, GateBands)
		m.guard.Bands[1].State = c.state
		m.guard.Bands[1].Test.D = c.lean
		m.guard.Active = c.guard
		sc := []Score{{ID: 0, band: 1}, {ID: 7, Effect: 100 * c.z, Width: 100, band: 1}}
		if got := m.choiceShare(sc, 1); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: share %v, want %v", c.name, got, c.want)
		}
	}
}

// gateModelAt is a model of cfg at the tenant's age windows with every
// band's gate testing and no evidence yet.
func gateModelAt(cfg Config, windows float64) *Model {
	m := New(cfg)
	m.guard.Windows = windows
	m.guard.Bands = make([]gateBand, GateBands)
	return m
}

// TestModelPromiseReadsTheBandsBar: the model's promise for a customer of
// a testing band (choiceShare) is the chance of clearing the bar the band
// is looked at against now: GateZ at its first look, 3.6 standard errors
// at its twelfth, and GateZ at any look with
// Config.GateModelPromiseAtBar off. The band test's own promise (Promise,
// set by updateGate) reads GateZ at every look. Fails if the model's
// promise reads GateZ under the rising bar or the band's reads the bar
// (POLICY.md §7.158).
func TestModelPromiseReadsTheBandsBar(t *testing.T) {
	phi := func(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
	late := lookZ(DefaultConfig().GateLookAlpha, 12)
	// fillTest(900, 100, 5000): a standard error of about 167, z ≈ 0.6, so
	// the band's own promise stays below the model's.
	for _, tc := range []struct {
		name  string
		since float64 // the tenant's age (12 windows) when the band began testing
		atBar bool
		bar   float64 // the model's promise's
	}{
		{"first look", 12, true, 2},
		{"twelfth look", 0, true, late},
		{"twelfth look, GateModelPromiseAtBar off", 0, false, 2},
	} {
		cfg := DefaultConfig()
		cfg.GateModelPromiseAtBar = tc.atBar
		m := gateModelAt(cfg, 12)
		g := &m.guard
		g.Bands[1].Since = tc.since
		fillTest(&g.Bands[1].Test, 900, 100, 5000)
		mean, se, _ := m.testStat(&g.Bands[1].Test)
		m.updateGate(true) // hold: no look, so the band stays testing
		if got, want := g.Bands[1].Promise, phi(mean/se-cfg.GateZ); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: band promise %.4f, want Φ(%.2f − %.2f) = %.4f", tc.name, got, mean/se, cfg.GateZ, want)
		}
		sc := []Score{{ID: 0, band: 1}, {ID: 7, Effect: 300, Width: 100, band: 1}}
		want := cfg.GatePromise * phi(3-tc.bar)
		if q := m.gateQ(1); q >= want {
			t.Fatalf("%s: the band's share %.4f hides the model's promise %.4f", tc.name, q, want)
		}
		if got := m.choiceShare(sc, 1); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: model's promise %.4f, want %.4f", tc.name, got, want)
		}
	}
}

// TestBandByYearlyRate: a customer's frequency band is their yearly
// purchase rate over the part of the year their history covers, so a young
// history does not climb the bands as it fills up. Fails if the band is
// read from the raw 365-day count (the 100-, 30- and 120-day rows fall a
// band).
func TestBandByYearlyRate(t *testing.T) {
	vec := func(tickets, days float64) []float64 {
		x := make([]float64, VectorLen)
		x[xFreq365] = math.Log1p(tickets) / math.Log1p(365)
		x[xAntiguedad] = math.Log1p(days) / math.Log1p(1096)
		return x
	}
	short := make([]float64, xFreq365+1) // an older record without antiguedad
	short[xFreq365] = math.Log1p(5) / math.Log1p(365)
	cases := []struct {
		name string
		x    []float64
		band int
	}{
		{"none", vec(0, 200), 0},
		{"5 in 400 days: 5 a year", vec(5, 400), 1},
		{"5 in 100 days: 18 a year", vec(5, 100), 2},
		{"5 in 30 days: scaled from 90 days, 20 a year", vec(5, 30), 2},
		{"1 in 300 days: 1.2 a year", vec(1, 300), 0},
		{"12 in 120 days: 37 a year", vec(12, 120), 3},
		{"200 in 100 days: capped at 365", vec(200, 100), 3},
		{"no antiguedad: the count", short, 1},
		{"no vector", nil, 0},
	}
	var got, want []string
	for _, c := range cases {
		got = append(got, c.name+": "+bandTickets(GateBand(c.x)))
		want = append(want, c.name+": "+bandTickets(c.band))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("bands (-want +got):\n%s", d)
	}
}

// TestGateTestSEPoolsArms: an open band's never-send arm (10 % of the
// choices' customers) has not yet met the rare purchases its customers
// make, while the choice arm has. On the arms' own squares the difference
// reads 4.2 standard errors and the band would open on a quiet control
// group; with the variance of all the residuals (pooledSE) it reads 1.5.
// Fails if the test's standard error ignores pooledSE.
func TestGateTestSEPoolsArms(t *testing.T) {
	m := New(DefaultConfig())
	var s guardSum
	for i := 0; i < 450; i++ {
		res := -100.0 // cents: the customer bought nothing; μ₀ said 1 MXN
		if i < 20 {
			res = 3000 // a purchase
		}
		s.addArm(res, 0.9, 1, 0.9)
	}
	for i := 0; i < 50; i++ {
		s.addArm(-100, 0.1, -1, 0.9)
	}
	mean, own := s.diff()
	_, se, ok := m.testStat(&s)
	got := []string{fmt.Sprintf("own z %.1f", mean/own), fmt.Sprintf("test z %.1f", mean/se), fmt.Sprintf("judged %v", ok)}
	want := []string{"own z 4.2", "test z 1.5", "judged true"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gate test (-want +got):\n%s", d)
	}
}

// TestStatusStandardErrorUnknownIsNil: a test or baseline with fewer than
// two decisions has no standard error yet: GateStatus and GuardStatus give
// nil (null in JSON), not a number (they gave −1, and −0.01 for a
// baseline); with two decisions the error is given in MXN.
func TestStatusStandardErrorUnknownIsNil(t *testing.T) {
	m := New(DefaultConfig())
	m.guard.Options = map[int]*guardSum{0: {}}
	m.guard.Options[0].add(500, 100, 0)
	m.guard.Test.add(0, 100, 0)
	g, gate := m.GuardStatus(), m.GateStatus()
	if g.Baselines[0].SE != nil || gate.SE != nil || gate.Bands[0].SE != nil {
		t.Fatalf("one decision: baseline SE %v, gate SE %v, band 0 SE %v; want nil", g.Baselines[0].SE, gate.SE, gate.Bands[0].SE)
	}
	m.guard.Options[0].add(500, 300, 0)
	m.guard.Test.add(0, 300, 0)
	g, gate = m.GuardStatus(), m.GateStatus()
	// d = 100, 300 cents: sample SD 141.42 cents over √2 is 1.00 MXN.
	if g.Baselines[0].SE == nil || math.Abs(*g.Baselines[0].SE-1) > 1e-9 || gate.SE == nil || math.Abs(*gate.SE-1) > 1e-9 {
		t.Fatalf("two decisions: baseline SE %v, gate SE %v; want 1 MXN", g.Baselines[0].SE, gate.SE)
	}
}

// lookAlpha2 is the GateLookAlpha whose first look's bar is GateZ 2:
// Φ(−2)·π²/6.
const lookAlpha2 = 0.0374224670668522

// TestLookZ: the always-valid bar of the k-th look spends alpha·6/(π²k²)
// of the error at look k; the bars are the one-sided normal quantiles of
// those shares (checked against statistics.NormalDist's inv_cdf).
func TestLookZ(t *testing.T) {
	for _, tc := range []struct {
		alpha, k float64
		want     float64
	}{
		{math.Pi * math.Pi / 6 * 0.025, 1, 1.95996}, // share 0.025
		{math.Pi * math.Pi / 6 * 0.025, 2, 2.49771}, // 0.00625
		{math.Pi * math.Pi / 6 * 0.025, 3, 2.77292},
		{math.Pi * math.Pi / 6 * 0.025, 10, 3.48076}, // 0.00025
		{lookAlpha2, 1, 2},
		{lookAlpha2, 2, 2.53096},
		{lookAlpha2, 12, 3.60184},
		{0.1, 1, 1.54815},
		{0.1, 6, 2.93112},
		{2, 1, 0}, // a share above one half is a bar of 0, not below
	} {
		got := math.Round(lookZ(tc.alpha, tc.k)*1e5) / 1e5
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("lookZ(%v, %v) (-want +got):\n%s", tc.alpha, tc.k, d)
		}
	}
}

// TestOpenBarCountsWindows: without GateLookAlpha the opening bar is GateZ
// at every look; with it, the bar of the k-th window since the band went
// back to testing (since the tenant's first window for a band that never
// left testing and for the test over all customers), never below GateZ.
// Learner passes within one window are one look.
func TestOpenBarCountsWindows(t *testing.T) {
	for _, tc := range []struct {
		name           string
		alpha, windows float64
		since          float64
		want           float64
	}{
		{"off, first window", 0, 1, 0, 2},
		{"off, twelfth window", 0, 12, 0, 2},
		{"first window", lookAlpha2, 1, 0, 2},
		{"second window", lookAlpha2, 2, 0, 2.531},
		{"a pass within the second window", lookAlpha2, 2.5, 0, 2.531},
		{"third window", lookAlpha2, 3, 0, 2.803},
		{"twelfth window", lookAlpha2, 12, 0, 3.602},
		{"the window a band went back to testing", lookAlpha2, 7, 7, 2},
		{"the window after", lookAlpha2, 8, 7, 2.531},
		{"a first bar below GateZ is GateZ", 0.1, 1, 0, 2},
		{"a larger alpha, third window", 0.1, 3, 0, 2.470},
	} {
		cfg := DefaultConfig()
		cfg.GateLookAlpha = tc.alpha
		m := New(cfg)
		m.guard.Windows = tc.windows
		got := math.Round(m.openBar(tc.since)*1e3) / 1e3
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: openBar (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestAlwaysValidBarHoldsALuckyBand: a band whose own test reads 2.4
// standard errors above 0 opens at any age under GateZ alone; with
// GateLookAlpha it opens at the tenant's first window but not at its
// second (bar 2.531). The test over all customers keeps GateZ: at 2.4 it
// still opens every band whose own mean is not below 0, as pooled
// openings. A band that goes back to testing restarts its count: the
// window after, its bar is the second look's. Fails if the own bar ignores
// the looks, if the pooled bar takes them, or if GateLookAlpha 0 changes
// the default's bar.
func TestAlwaysValidBarHoldsALuckyBand(t *testing.T) {
	for _, tc := range []struct {
		name        string
		alpha       float64
		windows     float64
		pooledMean  float64
		want        []int
		wantPooled0 bool
	}{
		{"GateZ alone, second window", 0, 2, 200, []int{GateOpen, GateTesting}, false},
		{"always-valid, first window", lookAlpha2, 1, 200, []int{GateOpen, GateTesting}, false},
		{"always-valid, second window", lookAlpha2, 2, 200, []int{GateTesting, GateTesting}, false},
		{"always-valid, second window, pooled test at 2.4", lookAlpha2, 2, 400, []int{GateOpen, GateOpen}, true},
	} {
		cfg := DefaultConfig()
		cfg.GateLookAlpha = tc.alpha
		m := gateModelAt(cfg, tc.windows)
		g := &m.guard
		fillTest(&g.Test, 900, tc.pooledMean, 5000) // z ≈ 1.2 or 2.4 over all customers
		fillTest(&g.Fast, 900, tc.pooledMean, 5000)
		fillTest(&g.Bands[0].Test, 900, 400, 5000) // z ≈ 2.4
		fillTest(&g.Bands[1].Test, 900, 200, 5000) // z ≈ 1.2
		m.updateGate(false)
		got := []int{g.Bands[0].State, g.Bands[1].State}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: band states (-want +got):\n%s", tc.name, d)
		}
		if g.Bands[0].Pooled != tc.wantPooled0 {
			t.Errorf("%s: band 0 opened on the pooled test %v, want %v", tc.name, g.Bands[0].Pooled, tc.wantPooled0)
		}
	}

	cfg := DefaultConfig()
	cfg.GateLookAlpha = lookAlpha2
	m := New(cfg)
	g := &m.guard
	g.Windows = 6
	g.Bands = make([]gateBand, GateBands)
	g.Bands[0].State = GateOpen
	fillTest(&g.Bands[0].Fast, 900, -250, 5000) // z ≈ −1.5: recent evidence of loss, back to testing
	m.updateGate(false)
	if g.Bands[0].State != GateTesting || g.Bands[0].Since != 6 {
		t.Fatalf("a band sent back at window 6: %+v, want testing since 6", g.Bands[0])
	}
	g.Windows = 7
	fillTest(&g.Bands[0].Fast, 900, 0, 5000)
	fillTest(&g.Bands[0].Test, 900, 400, 5000) // z ≈ 2.4 at its second look
	m.updateGate(false)
	if g.Bands[0].State != GateTesting {
		t.Errorf("a band at z 2.4 on its second look since it went back to testing: state %d, want testing", g.Bands[0].State)
	}
	back := roundTrip(t, m, cfg)
	if got := back.guard.Bands[0].Since; got != 6 {
		t.Errorf("the band's count after a round trip starts at window %v, want 6", got)
	}
}

// TestGateStatusShowsOpeningBar: admin tenant show's gate status gives a
// testing band the bar its own test must clear at a look now (GateZ at the
// first, rising with the windows it has tested, counted from its return to
// testing) and none to an open or closed band.
func TestGateStatusShowsOpeningBar(t *testing.T) {
	cfg := DefaultConfig()
	m := New(cfg)
	g := &m.guard
	g.Bands = make([]gateBand, GateBands)
	g.Bands[1].State = GateOpen
	g.Bands[2].State = GateClosed
	g.Bands[3].Since = 3
	bars := func() []*float64 {
		var out []*float64
		for _, b := range m.GateStatus().Bands {
			out = append(out, b.Bar)
		}
		return out
	}
	z := func(k float64) *float64 { v := max(cfg.GateZ, lookZ(cfg.GateLookAlpha, k)); return &v }
	for _, tc := range []struct {
		windows float64
		want    []*float64
	}{
		{1, []*float64{z(1), nil, nil, z(1)}},
		{4, []*float64{z(4), nil, nil, z(2)}},
		{12, []*float64{z(12), nil, nil, z(10)}},
	} {
		g.Windows = tc.windows
		if d := cmp.Diff(tc.want, bars()); d != "" {
			t.Errorf("window %v: opening bars (-want +got):\n%s", tc.windows, d)
		}
	}
	if got := *z(1); got != cfg.GateZ {
		t.Errorf("first look's bar %v, want GateZ %v", got, cfg.GateZ)
	}
}

// lookModel is a model of age 1 window with its gate bands testing and
// no pooled opening, for the tests of a band's look (opensNow).
func lookModel() (*Model, *Guard) {
	cfg := DefaultConfig()
	cfg.GatePooled = false
	m := New(cfg)
	g := &m.guard
	g.Windows = 1
	g.Bands = make([]gateBand, GateBands)
	return m, g
}

// TestGateLooksOncePerWindow: a testing band is looked at, and may open,
// once a window of the tenant's age, however many learner passes update
// the gate in it. A band whose test is below its bar at the window's
// first update stays testing through later updates of the same window
// that find it above (a live tenant's rewards fold a few at a time, a
// pass a second), and opens at the next window's first update. The look
// survives a round trip. Fails if every update is a look.
func TestGateLooksOncePerWindow(t *testing.T) {
	m, g := lookModel()
	fillTest(&g.Bands[0].Test, 900, 100, 5000) // z ≈ 0.6: below the bar
	m.updateGate(false)
	if g.Bands[0].State != GateTesting || g.Bands[0].Looked != 1 {
		t.Fatalf("first look: %+v, want testing, looked at window 1", g.Bands[0])
	}
	for _, w := range []float64{1.2, 1.5, 1.99} {
		g.Windows = w
		fillTest(&g.Bands[0].Test, 900, 600, 5000) // z ≈ 3.6: above any early bar
		m.updateGate(false)
		if g.Bands[0].State != GateTesting {
			t.Fatalf("an update at age %v, within the window of the last look: state %d, want testing", w, g.Bands[0].State)
		}
	}
	m = roundTrip(t, m, m.cfg)
	g = &m.guard
	g.Windows = 2
	m.updateGate(false)
	if g.Bands[0].State != GateOpen || g.Bands[0].Looked != 2 {
		t.Errorf("the next window's first update: %+v, want open, looked at window 2", g.Bands[0])
	}
}

// TestGateLookNeedsATest: an update with no test that could open a band
// (its own with fewer than GuardMinN effective decisions, the pooled one
// not passed) is no look: it spends none, and evidence that clears the
// bar later in the same window opens the band then, not a window later.
// Fails if such an update spends the window's look.
func TestGateLookNeedsATest(t *testing.T) {
	m, g := lookModel()
	fillTest(&g.Bands[0].Test, int(m.cfg.GuardMinN)/2, 600, 5000) // too few to judge
	m.updateGate(false)
	if g.Bands[0].State != GateTesting || g.Bands[0].Looked != 0 {
		t.Fatalf("an update without a test: %+v, want testing, not looked at", g.Bands[0])
	}
	g.Windows = 1.5
	fillTest(&g.Bands[0].Test, 900, 600, 5000) // z ≈ 3.6
	m.updateGate(false)
	if g.Bands[0].State != GateOpen || g.Bands[0].Looked != 1.5 {
		t.Errorf("the first update with a test: %+v, want open, looked at 1.5", g.Bands[0])
	}
}

// TestGateHoldsItsLookThroughABacklog: a learner pass cut short (entries
// due now left for the next pass: a sandbox clock moved a window, a
// backlog after downtime) is no look, so the window's look reads all its
// rewards, not the first pass's share: over HTTP the lab's 2,000 rewards
// of a window fold in passes of 500 while decisions are answered, and the
// look at the first pass opened bands in world 47004 that the whole
// window left testing (and left testing in 47001 bands it opened). Harm
// is still judged. Fails if a held update looks.
func TestGateHoldsItsLookThroughABacklog(t *testing.T) {
	m, g := lookModel()
	fillTest(&g.Bands[0].Test, 900, 600, 5000) // z ≈ 3.6: above the first look's bar
	fillTest(&g.Bands[1].Fast, 900, -600, 5000)
	m.updateGate(true)
	if g.Bands[0].State != GateTesting || g.Bands[0].Looked != 0 {
		t.Fatalf("a pass that leaves a backlog: %+v, want testing, not looked at", g.Bands[0])
	}
	if g.Bands[1].State != GateClosed {
		t.Errorf("harm in a pass that leaves a backlog: band 1 %d, want closed", g.Bands[1].State)
	}
	m.updateGate(false)
	if g.Bands[0].State != GateOpen || g.Bands[0].Looked != 1 {
		t.Errorf("the pass that folds the rest: %+v, want open, looked at window 1", g.Bands[0])
	}
}

// TestGatePooledLookNeedsOwnEvidence: under Config.GatePooledOwn the
// pooled test alone cannot open a band, so an update where the band's own
// test has too few decisions to be judged is no look (as in
// TestGateLookNeedsATest), even while the pooled test passes: once the
// band's own evidence can be judged later in the same window, the pooled
// test opens it then, not a window later. Fails if the pooled test spends
// the window's look of a band it could not open.
func TestGatePooledLookNeedsOwnEvidence(t *testing.T) {
	m, g := lookModel()
	m.cfg.GatePooled, m.cfg.GatePooledOwn = true, true
	fillTest(&g.Test, 2000, 300, 5000) // z ≈ 2.7: the pooled test passes
	fillTest(&g.Fast, 2000, 300, 5000)
	fillTest(&g.Bands[0].Test, int(m.cfg.GuardMinN)/2, 300, 5000) // too few to judge
	m.updateGate(false)
	if g.Bands[0].State != GateTesting || g.Bands[0].Looked != 0 {
		t.Fatalf("an update without the band's own test: %+v, want testing, not looked at", g.Bands[0])
	}
	g.Windows = 1.5
	fillTest(&g.Bands[0].Test, 900, 300, 5000) // z ≈ 1.8: judged, not on its own
	m.updateGate(false)
	if g.Bands[0].State != GateOpen || !g.Bands[0].Pooled || g.Bands[0].Looked != 1.5 {
		t.Errorf("the first update with the band's own test: %+v, want open on the pooled test, looked at 1.5", g.Bands[0])
	}
}

// TestFloorBoundedByMargin: with FloorCost the floor a decision spreads
// over its actions is at most FloorCost times the customer's never-send μ
// over the coupons' mean downside, never below Floor/10 nor above Floor;
// without a known downside or μ, without never-send among the candidates
// or with FloorCost 0 it is Floor. Every coupon the choice leaves out then
// carries exactly floor/k. Fails if the floor ignores the customer's
// margin (a customer who brings 0.60 MXN a window, offered coupons that
// lose 3.50 MXN a send, would keep the full floor).
func TestFloorBoundedByMargin(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Floor, cfg.FloorCost = 0.0005, 0.0005
	off := cfg
	off.FloorCost = 0
	never := func(mu float64) Score { return Score{ID: 0, Mu: mu} }
	coupon := func(id int, down float64) Score { return Score{ID: id, Effect: -5000, Width: 10, own: 100, down: down} }
	for _, tc := range []struct {
		name string
		cfg  Config
		sc   []Score
		want float64
	}{
		{"off", off, []Score{never(60), coupon(1, 350), coupon(2, 350)}, 0.0005},
		{"small margin", cfg, []Score{never(60), coupon(1, 350), coupon(2, 350)}, 0.0005 * 60 / 350},
		{"mean downside", cfg, []Score{never(60), coupon(1, 200), coupon(2, 500)}, 0.0005 * 60 / 350},
		{"large margin", cfg, []Score{never(5000), coupon(1, 350)}, 0.0005},
		{"no margin", cfg, []Score{never(-30), coupon(1, 350)}, 0.00005},
		{"downside unknown", cfg, []Score{never(60), coupon(1, 0)}, 0.0005},
		{"μ not a number", cfg, []Score{never(math.NaN()), coupon(1, 350)}, 0.0005},
		{"downside infinite", cfg, []Score{never(60), coupon(1, math.Inf(1))}, 0.00005},
		{"no never-send", cfg, []Score{coupon(1, 350), coupon(2, 350)}, 0.0005},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(tc.cfg)
			zero := indexOf(tc.sc, 0)
			if got := m.floor(tc.sc, zero); math.Abs(got-tc.want) > 1e-15 {
				t.Errorf("floor %.8f, want %.8f", got, tc.want)
			}
			if zero < 0 {
				return
			}
			probs := make([]float64, len(tc.sc))
			m.Distribution(tc.sc, probs)
			var sum float64
			for _, p := range probs {
				sum += p
			}
			if math.Abs(sum-1) > 1e-12 {
				t.Errorf("probabilities %v sum to %v", probs, sum)
			}
			if k := float64(len(tc.sc)); math.Abs(probs[len(probs)-1]-tc.want/k) > 1e-15 {
				t.Errorf("a coupon left out drawn with %.10f, want the floor's share %.10f", probs[len(probs)-1], tc.want/k)
			}
		})
	}
}

// TestExplorationFallsLateWhenClosed: exploration tries a coupon that might
// beat never-send at GateExplore·(q/GateQ0)², q the testing share. From
// GateLeanAge windows of the tenant's age, with the guard holding
// never-send or the customer's band closed, q is the closed share (the
// testing share over GateClosedLateDiv), as for that band's tests: only
// the floor is left. Younger, or in a band still testing, exploration is
// as before; GateExploreClosedLate false keeps it everywhere. Fails if late
// exploration ignores the closed state.
func TestExplorationFallsLateWhenClosed(t *testing.T) {
	explored := func(cfg Config, windows float64, active bool, band int) float64 {
		m := New(cfg)
		m.guard.Windows, m.guard.Active = windows, active
		m.guard.Bands = make([]gateBand, GateBands)
		m.guard.Bands[0].State = band
		sc := []Score{{ID: 0}, {ID: 1, Effect: -100, Width: 100, own: 1e4}} // might still pay: −1 + 1.5·1 MXN > 0
		probs := make([]float64, len(sc))
		if top := m.Distribution(sc, probs); sc[top].ID != 0 {
			t.Fatalf("choice %d, want never-send", sc[top].ID)
		}
		return probs[1]
	}
	cfg := DefaultConfig()
	off := cfg
	off.GateExploreClosedLate = false
	floorShare := cfg.Floor / 2
	for _, tc := range []struct {
		name      string
		cfg       Config
		windows   float64
		active    bool
		band      int
		onlyFloor bool
	}{
		{"late, guard holding never-send", cfg, 6, true, GateTesting, true},
		{"late, band closed", cfg, 8, false, GateClosed, true},
		{"late, band testing", cfg, 6, false, GateTesting, false},
		{"young, guard holding never-send", cfg, 5, true, GateTesting, false},
		{"late, guard holding never-send, off", off, 6, true, GateTesting, false},
	} {
		p := explored(tc.cfg, tc.windows, tc.active, tc.band)
		if got := p-floorShare < 1e-6; got != tc.onlyFloor {
			t.Errorf("%s: the coupon drawn with %.6f (the floor's share %.6f); want only the floor: %v", tc.name, p, floorShare, tc.onlyFloor)
		}
	}
}
