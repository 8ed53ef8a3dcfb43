package policy

import (
	"math"
	"slices"
	"testing"
)

// TestResidualClipBoundsOneAbsurdReward: one reward of minus a billion
// pesos (a margin typed wrong into one ticket line) among 600 ordinary
// ones moves every customer's expected reward by a few pesos with the
// default ResidualClip, and by over a million without it: the model's
// baseline is a mean, and one absurd amount took it over. A stream of
// twenty moves it by under 2,000 pesos (954 here): a bounded residual
// leaves the noise v, and so the bound, where it was; counted in v as its
// bounded square, each multiplied v by about eight and the same stream
// moved μ by 36 million pesos.
func TestResidualClipBoundsOneAbsurdReward(t *testing.T) {
	w := newWorld(5, 600, []simAction{
		{id: 1, cat: 0, costCents: 1000, prior: func(*simCust) float64 { return 500 }, lift: func(*simCust) float64 { return 0.05 }},
	})
	// shift is how far (pesos) k absurd rewards, every tenth from the
	// 300th, move customer 0's μ, with ResidualClip clip.
	shift := func(clip float64, k int) float64 {
		mus := [2]float64{}
		for run, absurd := range []int{0, k} {
			cfg := DefaultConfig()
			cfg.ResidualClip = clip
			m := New(cfg)
			for i, sc := range w.custs {
				arms := w.arms(sc)
				a := &arms[i%len(arms)]
				r := w.draw(sc, a.ID)
				if i >= 300 && i < 300+10*absurd && i%10 == 0 {
					r = -1e11 // cents
				}
				m.Fold(&sc.c, a, r, 1)
				if i%100 == 99 {
					m.Refit()
				}
			}
			m.Refit()
			sc := w.custs[0]
			arms := w.arms(sc)
			out := make([]Score, len(arms))
			m.Score(&sc.c, arms, out)
			mus[run] = out[0].Mu
		}
		return math.Abs(mus[1]-mus[0]) / 100
	}
	clip := DefaultConfig().ResidualClip
	for _, tc := range []struct {
		clip float64
		k    int
		max  float64 // pesos
	}{
		{clip, 1, 20},
		{clip, 20, 2000},
	} {
		if got := shift(tc.clip, tc.k); got > tc.max {
			t.Errorf("ResidualClip %v: %d absurd rewards moved a customer's μ by %.1f pesos, want under %.0f", tc.clip, tc.k, got, tc.max)
		}
	}
	if got := shift(0, 1); got < 1000 {
		t.Errorf("without ResidualClip: one absurd reward moved μ by %.0f pesos; the test no longer shows the harm", got)
	}
}

// TestResidualClipBoundsTicketMean: with ResidualClip, one window whose
// gross margin is absurd, a gain or a loss, counts towards the tenant's
// margin per ticket (TicketMean, which every customer's target leans on)
// as at most ResidualClip times the mean so far; without it, it sets the
// mean, or (a loss) leaves the tenant without one.
func TestResidualClipBoundsTicketMean(t *testing.T) {
	for _, tc := range []struct {
		clip, margin float64 // margin: the absurd window's (cents)
		want         float64 // TicketMean after it (cents); 0: none
	}{
		{50, 1e11, (100*1000 + 50*1000) / 101.0},
		{0, 1e11, (100*1000 + 1e11) / 101.0},
		{50, -1e11, (100*1000 - 50*1000) / 101.0},
		{0, -1e11, 0},
	} {
		cfg := DefaultConfig()
		cfg.ResidualClip = tc.clip
		m := New(cfg)
		for i := 0; i < 100; i++ {
			m.TallyTickets(Outcome{Full: true, Tickets: 1, MarginCents: 1000})
		}
		m.TallyTickets(Outcome{Full: true, Tickets: 1, MarginCents: tc.margin})
		got, ok := m.TicketMean()
		if !ok {
			got = 0
		}
		if math.Abs(got-tc.want) > 1e-6*tc.want {
			t.Errorf("ResidualClip %v, margin %g: TicketMean %.2f, want %.2f", tc.clip, tc.margin, got, tc.want)
		}
	}
}

// TestResidualClipBoundsGuardEvidence: in a world where the coupon pays
// and the gate is open, one logged decision with a reward of minus a
// billion pesos moves the gate's test and the guard's value of the policy
// by a few pesos with the default ResidualClip. Observe did not bound it:
// the test's difference fell from about +70 MXN to about −200,000 MXN,
// one standard error below zero, and the gate sent to half the customers
// instead of nine in ten for over a dozen windows.
func TestResidualClipBoundsGuardEvidence(t *testing.T) {
	act := simAction{id: 1, cat: -1, costCents: 1000,
		prior: func(*simCust) float64 { return 2000 },
		lift:  func(*simCust) float64 { return 0.2 }}
	w := newWorld(21, 3000, []simAction{act})
	m := New(DefaultConfig())
	for i := 1; i <= 2; i++ {
		w.runWindow(m, week(i))
	}
	before := m.GuardStatus()
	if !before.Gate.Open() {
		t.Fatalf("gate %+v, want it open before the absurd reward", *before.Gate)
	}
	sc := w.custs[0]
	arms, scores, probs := w.decide(m, sc)
	q := make([]float64, len(arms))
	for i := range scores {
		q[i] = scores[i].Mu
	}
	logged := slices.IndexFunc(arms, func(a Arm) bool { return a.ID == act.id })
	m.Observe(&GuardSample{Customer: sc.c, Arms: arms, Probs: probs, QHat: q, Logged: logged, Reward: -1e11, Options: []int{0, act.id}})
	after := m.GuardStatus()
	if d := math.Abs(after.Gate.Diff - before.Gate.Diff); d > 20 {
		t.Errorf("one absurd reward moved the gate's test by %.0f MXN (%.1f → %.1f), want under 20", d, before.Gate.Diff, after.Gate.Diff)
	}
	if d := math.Abs(after.Policy - before.Policy); d > 20 {
		t.Errorf("one absurd reward moved the guard's policy value by %.0f MXN (%.1f → %.1f), want under 20", d, before.Policy, after.Policy)
	}
}
