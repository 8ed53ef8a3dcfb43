package policy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestEvenTiesTopTwo: coupons the data cannot tell apart from the lead
// share its mass; with TieTopTwo (the default) only the lead and its
// strongest challenger do, so two tied coupons stay even and four tied
// coupons do not dilute the lead's mass over the two it ranks lowest.
func TestEvenTiesTopTwo(t *testing.T) {
	// Never-send first, then coupons with these effects (cents), each with
	// an own variance large enough that every pair is tied (σ 100 MXN).
	scores := func(effects ...float64) []Score {
		sc := []Score{{ID: 0}}
		for i, e := range effects {
			sc = append(sc, Score{ID: i + 1, Effect: e, own: 1e8})
		}
		return sc
	}
	cases := []struct {
		name    string
		topTwo  bool
		effects []float64
		lead    int      // index in sc of the coupon holding the choice's mass
		apart   [][2]int // coupon pairs told apart on average (not tied)
		duel12  *guardSum
		want    []float64
	}{
		{"two tied, top-two", true, []float64{500, 900}, 2, nil, nil, []float64{0.1, 0.45, 0.45}},
		{"two tied, all", false, []float64{500, 900}, 2, nil, nil, []float64{0.1, 0.45, 0.45}},
		{"four tied, top-two", true, []float64{1000, 900, 500, 100}, 1, nil, nil, []float64{0.1, 0.45, 0.45, 0, 0}},
		{"four tied, all", false, []float64{1000, 900, 500, 100}, 1, nil, nil, []float64{0.1, 0.225, 0.225, 0.225, 0.225}},
		{"challenger second in order", true, []float64{100, 1000, 500, 900}, 2, nil, nil, []float64{0.1, 0, 0.45, 0, 0.45}},
		{"the second best told apart: the third challenges", true, []float64{1000, 900, 500, 100}, 1, [][2]int{{1, 2}}, nil,
			[]float64{0.1, 0.45, 0, 0.45, 0}},
		{"two told apart: the lead alone", true, []float64{500, 900}, 2, [][2]int{{1, 2}}, nil, []float64{0.1, 0, 0.9}},
		// coupon 1 beat coupon 2 by 5 MXN ± 1 over 400 tied decisions
		{"two tied, their duel won by the one the estimate ranks second", true, []float64{500, 900}, 2, nil, duelSum(-500, 2000, 400),
			[]float64{0.1, 0.9, 0}},
	}
	for _, tc := range cases {
		cfg := DefaultConfig()
		cfg.TieTopTwo = tc.topTwo
		m := New(cfg)
		for _, p := range tc.apart {
			m.popApart[p] = true
		}
		if tc.duel12 != nil {
			m.guard.Duels = map[string]*guardSum{"1-2": tc.duel12}
		}
		sc := scores(tc.effects...)
		probs := make([]float64, len(sc))
		probs[0], probs[tc.lead] = 0.1, 0.9
		got := m.evenTies(sc, probs)
		if d := cmp.Diff(tc.want, probs, cmpopts.EquateApprox(0, 1e-12)); d != "" {
			t.Errorf("%s: probabilities (-want +got):\n%s", tc.name, d)
		}
		// A settled duel names its winner, the new choice (the record
		// logged the loser, with probability 0: explorado on the winner's
		// sends, and the decisions out of the gate's test); else -1.
		winner := -1
		if tc.duel12 != nil {
			winner = 1
		}
		if got != winner {
			t.Errorf("%s: evenTies returned %d, want %d", tc.name, got, winner)
		}
	}
	if !DefaultConfig().TieTopTwo || ZRuleConfig().TieTopTwo {
		t.Error("top-two must be on by default and off in the configuration before the gate")
	}
}

// duelSum is a duel's sums for n decisions of mean d and SD sd (cents).
func duelSum(d, sd float64, n int) *guardSum {
	var g guardSum
	for i := range n {
		x := d + sd
		if i%2 == 1 {
			x = d - sd
		}
		g.addWeighted(x, 1)
	}
	return &g
}

// TestDownsideBar: while the tenant is younger than GateDownAge windows,
// and at any age in an open band (GateDownOpen), a coupon whose effect
// leans above never-send by less than the bar's share of its width is
// still the choice where a send can lose little (its downside); an unknown
// downside, an older tenant in a band not open, the guard holding
// never-send or the switches off keep the width's bar, and a downside the
// effect does not clear keeps never-send.
func TestDownsideBar(t *testing.T) {
	cfg := DefaultConfig()
	off := cfg
	off.GateDownAge = 0
	shut := cfg
	shut.GateDownOpen = false
	x := make([]float64, VectorLen)
	x[0], x[xFreq90], x[xTicket] = 1, 0.3, 0.5
	c := &Customer{X: x, Base: 1000}
	for _, tc := range []struct {
		name     string
		cfg      Config
		windows  float64
		band     int // the customer's band's gate state
		guard    bool
		downside float64
		want     int // ID of the choice
	}{
		{"young tenant, small downside", cfg, 0, GateTesting, false, 10, 1},
		{"second window", cfg, cfg.GateDownAge - 1, GateTesting, false, 10, 1},
		{"downside unknown", cfg, 0, GateTesting, false, 0, 0},
		{"downside above the effect's bar", cfg, 0, GateTesting, false, 1000, 0},
		{"after the first windows", cfg, cfg.GateDownAge, GateTesting, false, 10, 0},
		{"GateDownAge 0", off, 0, GateTesting, false, 10, 0},
		{"open band, any age", cfg, 10, GateOpen, false, 10, 1},
		{"open band, downside above the bar", cfg, 10, GateOpen, false, 1000, 0},
		{"open band, the guard holding never-send", cfg, 10, GateOpen, true, 10, 0},
		{"closed band", cfg, 10, GateClosed, false, 10, 0},
		{"open band, GateDownOpen off", shut, 10, GateOpen, false, 10, 0},
	} {
		m := New(tc.cfg)
		m.guard.Windows = tc.windows
		m.guard.Active = tc.guard
		m.guard.Bands = make([]gateBand, GateBands)
		m.guard.Bands[bandOf(c)].State = tc.band
		arms := []Arm{{ID: 0, Prior: 1000}, {ID: 1, Prior: 1100, Downside: tc.downside}}
		sc := make([]Score, len(arms))
		m.Score(c, arms, sc)
		if bar := cfg.GateOpenSendZ * sc[1].Width; !(sc[1].Effect > 0 && sc[1].Effect < bar) {
			t.Fatalf("%s: effect %.0f cents must lean above 0 but under an open band's bar on the width %.0f", tc.name, sc[1].Effect, bar)
		}
		if got := sc[m.Greedy(sc)].ID; got != tc.want {
			t.Errorf("%s: choice %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestDistributionNamesTheDuelWinner: when the duel of two tied coupons
// has settled, the distribution's choice is its winner, which holds the
// pair's mass, not the coupon the estimate ranks first (now drawn only at
// the floor): the record logs the winner as the choice, so its sends are
// not marked explorado and stay in the gate's test.
func TestDistributionNamesTheDuelWinner(t *testing.T) {
	for _, tc := range []struct {
		name string
		duel *guardSum
		want int // ID of the choice
	}{
		{"no duel yet", nil, 2},
		{"duel won by the one ranked second", duelSum(-500, 2000, 400), 1},
	} {
		m := New(DefaultConfig())
		if tc.duel != nil {
			m.guard.Duels = map[string]*guardSum{"1-2": tc.duel}
		}
		sc := []Score{{ID: 0}, {ID: 1, Effect: 5000, own: 1e6}, {ID: 2, Effect: 5400, own: 1e6}}
		probs := make([]float64, len(sc))
		top := m.Distribution(sc, probs)
		if got := sc[top].ID; got != tc.want {
			t.Errorf("%s: choice %d, want %d (probabilities %v)", tc.name, got, tc.want, probs)
		}
		for i := range sc {
			if i != top && i != 0 && probs[i] > probs[top] {
				t.Errorf("%s: coupon %d drawn with %v, above the choice's %v", tc.name, sc[i].ID, probs[i], probs[top])
			}
		}
	}
}
