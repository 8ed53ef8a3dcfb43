package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coupond/coupond/engine"
)

// enforceIssue18 makes the scenario tests of issue 18's "Done when" lines
// fail when the engine misses them. The engine before issue 18's policy
// misses several (the measured figures are in each skip message and in
// LAB.md); a failing assertion must not reach main, so until the policy
// that meets them is merged these tests measure, log and skip. Whoever
// merges that policy sets this to true, and from then on the tests fail
// if the mechanism is removed.
const enforceIssue18 = false

// doneWhen records one "Done when" check: met, it logs; missed, it fails
// when enforceIssue18 is set and skips with the figure otherwise.
func doneWhen(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	switch {
	case ok:
		t.Log("met: " + msg)
	case enforceIssue18:
		t.Error(msg)
	default:
		t.Skip("not met by this engine (issue 18 open; see enforceIssue18): " + msg)
	}
}

// scenarioFamily is a hand-built world: everyone responds (unless the
// test says otherwise) to two whole-basket coupons.
func scenarioFamily(customers, weeks int) Family {
	return Family{Seed: 77, Customers: customers, Weeks: weeks, Categories: []string{"abarrotes", "bebidas", "limpieza"},
		Conversion: 0.10, TicketMXN: 400, TicketSigma: 0.8, MarginRate: 0.3, Lift: 1.5, Responders: 1, ResponseTie: "hidden",
		Trend: "flat", RejectShare: 0.03, engineOnly: true,
		Coupons: []CouponSpec{{ID: 1, Name: "10pct_max100", Pct: 0.10, MaxMXN: 100, CostMXN: 1, Boost: 1},
			{ID: 2, Name: "50mxn", MaxMXN: 50, CostMXN: 1, Boost: 1}}}
}

// TestRareBuyersNeverRespond: the prior is wrong for rare buyers (below
// the 40th percentile of the purchase rate, coupons never move them;
// everyone else responds). Done when: coupons to rare buyers < 10 % of
// them by week 6.
func TestRareBuyersNeverRespond(t *testing.T) {
	fam := scenarioFamily(4000, 6)
	if testing.Short() {
		fam.Customers = 1500
	}
	fam.RareNeverRespond = true
	rep, err := RunWorld(context.Background(), fam)
	if err != nil {
		t.Fatal(err)
	}
	var shares []string
	for _, wk := range rep.Weeks {
		shares = append(shares, fmt.Sprintf("%.2f", wk.RareSendShare))
	}
	last := rep.Weeks[len(rep.Weeks)-1]
	doneWhen(t, last.RareSendShare < 0.10, "share of rare buyers sent a coupon, weeks 1–6: %v (want < 0.10 by week 6; all customers: %.2f)",
		shares, last.EngineSendShare)
}

// twoTreatments is a world of 1 % conversion, heavy-tailed spend
// (σ = 1) and two whole-basket coupons that differ only in boost (the
// second's lift is boost times the first's).
func twoTreatments(customers int, boost float64) Family {
	fam := scenarioFamily(customers, 12)
	fam.Conversion, fam.TicketSigma, fam.Lift = 0.01, 1.0, 3
	fam.Coupons = []CouponSpec{{ID: 1, Name: "a_10pct_max100", Pct: 0.10, MaxMXN: 100, CostMXN: 0.5, Boost: 1},
		{ID: 2, Name: "b_10pct_max100", Pct: 0.10, MaxMXN: 100, CostMXN: 0.5, Boost: boost}}
	return fam
}

// meanEffects returns each coupon's true effect against nothing (MXN),
// averaged over the world's customers.
func meanEffects(fam Family) []float64 {
	w := newWorld(&fam, rand.New(rand.NewPCG(fam.Seed, 1)))
	out := make([]float64, len(w.coupons))
	for _, c := range w.custs {
		for k := range out {
			out[k] += (w.trueValue(c, k) - w.trueValue(c, -1)) / float64(len(w.custs))
		}
	}
	return out
}

// boostFor returns the boost of the second coupon that makes its mean
// effect ratio times the first's (bisection).
func boostFor(customers int, ratio float64) float64 {
	lo, hi := 1.0, 3.0
	for range 40 {
		mid := (lo + hi) / 2
		e := meanEffects(twoTreatments(customers, mid))
		if e[1]/e[0] < ratio {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// shareOfSecond is the engine's share of its sends that went to the
// second coupon, per week (NaN for a week without sends).
func shareOfSecond(rep *WorldReport) []float64 {
	var out []float64
	for _, wk := range rep.Weeks {
		a, b := wk.EngineSends[0], wk.EngineSends[1]
		out = append(out, float64(b)/float64(a+b))
	}
	return out
}

func fmtShares(xs []float64) string {
	s := ""
	for _, x := range xs {
		s += fmt.Sprintf(" %.2f", x)
	}
	return s
}

// TestTwoEqualTreatments: 1 % conversion, lognormal spend, two equal
// treatments. Done when: the engine's share between them stays within
// 40–60 % for 12 weeks. The short version has 2,000 customers; the long
// one 20,000 (the issue's replay had 64,000).
func TestTwoEqualTreatments(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	rep, err := RunWorld(context.Background(), twoTreatments(n, 1))
	if err != nil {
		t.Fatal(err)
	}
	shares := shareOfSecond(rep)
	ok := true
	for _, s := range shares {
		ok = ok && s >= 0.4 && s <= 0.6
	}
	doneWhen(t, ok, "%d customers: share of the second of two equal treatments, weeks 1–12:%s (want all within 0.40–0.60)", n, fmtShares(shares))
}

// TestBetterTreatmentWins: the same world with the second treatment's
// effect 30 % larger. Done when: the engine ends above 70 % on it. With
// 1 % conversion and σ = 1 spend a 30 % difference in effect needs tens of
// thousands of customer-weeks per arm to show (LAB.md): 20,000 customers
// give about 60,000 per arm by week 6. Long suite only.
func TestBetterTreatmentWins(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 customers for 12 weeks: long suite")
	}
	const n = 20000
	boost := boostFor(n, 1.3)
	fam := twoTreatments(n, boost)
	e := meanEffects(fam)
	rep, err := RunWorld(context.Background(), fam)
	if err != nil {
		t.Fatal(err)
	}
	shares := shareOfSecond(rep)
	doneWhen(t, shares[len(shares)-1] > 0.7, "effects %.2f and %.2f MXN (ratio %.2f): share of the better, weeks 1–12:%s (want > 0.70 at the end)",
		e[0], e[1], e[1]/e[0], fmtShares(shares))
}

// TestGuard: in a world where coupons only give margin away (no lift,
// frequent redeemers) the learned policy loses to never-send, and the
// engine must switch to never-send within 3 windows (guard state changed
// and at most 10 % of customers sent a coupon from week 4 on); in a world
// where coupons pay for half the customers it must never switch. The
// guard's state is read from engine.Status's Guard field (guardField:
// Active and Baseline): without it (the engine before issue 18) the test
// logs the send shares and skips.
func TestGuard(t *testing.T) {
	n, weeks := 3000, 8
	if testing.Short() {
		n = 1200
	}
	lose := scenarioFamily(n, weeks)
	lose.Lift, lose.Conversion = 0.02, 0.3
	lose.Coupons = []CouponSpec{{ID: 1, Name: "20pct_max200", Pct: 0.2, MaxMXN: 200, CostMXN: 1, Boost: 1},
		{ID: 2, Name: "100mxn", MaxMXN: 100, CostMXN: 1, Boost: 1}}
	win := scenarioFamily(n, weeks)
	win.Lift, win.Conversion, win.ResponseTie = 2.5, 0.05, "rare"
	type result struct {
		rep   *WorldReport
		sends []float64
	}
	run := func(f Family) result {
		rep, err := RunWorld(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		var s []float64
		for _, wk := range rep.Weeks {
			s = append(s, wk.EngineSendShare)
		}
		return result{rep, s}
	}
	l, w := run(lose), run(win)
	if _, ok := guardField(engine.Status{}); !ok {
		t.Skipf("engine.Status has no Guard field on this branch (the guard is issue 18's policy work); send shares by week: losing world%s, winning world%s",
			fmtShares(l.sends), fmtShares(w.sends))
	}
	// Within 3 windows: the decisions of week 4 follow 3 folded windows.
	var states []string
	for _, wk := range l.rep.Weeks {
		states = append(states, wk.Guard)
	}
	switched, low := false, true
	for _, wk := range l.rep.Weeks[:4] {
		switched = switched || wk.Guard == "active baseline=0"
	}
	for _, wk := range l.rep.Weeks[3:] {
		low = low && wk.EngineSendShare <= 0.10
	}
	doneWhen(t, switched && low, "losing world: guard states %q, send shares%s (want \"active baseline=0\" by week 4 and ≤ 0.10 from week 4)",
		states, fmtShares(l.sends))
	steady := true
	for _, wk := range w.rep.Weeks {
		steady = steady && !strings.HasPrefix(wk.Guard, "active")
	}
	doneWhen(t, steady, "winning world: the guard never activates (week 1: %q); send shares%s", w.rep.Weeks[0].Guard, fmtShares(w.sends))
}
