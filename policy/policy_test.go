package policy

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

func week(i int) time.Time { return t0.Add(time.Duration(i) * 7 * 24 * time.Hour) }

// TestPriorWrongForRareBuyers: the prior promises a large effect for rare
// buyers, who in truth never respond; the coupon works for frequent ones.
// Within 4 windows the model sends rare buyers coupons under 10 % of the
// time.
func TestPriorWrongForRareBuyers(t *testing.T) {
	act := simAction{id: 1, cat: -1, costCents: 3000,
		prior: func(sc *simCust) float64 {
			if sc.rare {
				return 6000
			}
			return -500
		},
		lift: func(sc *simCust) float64 {
			if sc.rare {
				return 0
			}
			return 0.15
		}}
	w := newWorld(1, 4000, []simAction{act})
	m := New(DefaultConfig())
	for i := 1; i <= 6; i++ {
		st := w.runWindow(m, week(i))
		t.Logf("window %d: rare sent %.3f, all %.3f, value %.0f never %.0f oracle %.0f", i, st.sentRare, st.sent[1], st.value, st.never, st.oracle)
		if i == 4 && st.sentRare >= 0.10 {
			t.Errorf("window 4: coupons to %.1f %% of rare buyers, want under 10 %%", 100*st.sentRare)
		}
	}
}

// emailWorld is the e-mail replay's shape: every customer buys with
// probability 1 % without an e-mail, spend is lognormal, and the two
// treatments add liftA and liftB to the conversion.
func emailWorld(seed uint64, n int, liftA, liftB float64) *world {
	prior := func(*simCust) float64 { return 200 }
	w := newWorld(seed, n, []simAction{
		{id: 1, cat: -1, prior: prior, lift: func(*simCust) float64 { return liftA }},
		{id: 2, cat: -1, prior: prior, lift: func(*simCust) float64 { return liftB }},
	})
	for _, sc := range w.custs {
		sc.conv, sc.spend = 0.01, 60000
		sc.c.Base = sc.conv * sc.spend
	}
	return w
}

// TestEqualTreatmentsStayEven: two equal treatments at 1 % conversion with
// lognormal spend are not told apart: each window the engine splits its
// sends between them within 40–60 %.
func TestEqualTreatmentsStayEven(t *testing.T) {
	w := emailWorld(2, 8000, 0.01, 0.01)
	m := New(DefaultConfig())
	for i := 1; i <= 12; i++ {
		st := w.runWindow(m, week(i))
		share := st.sent[1] / (st.sent[1] + st.sent[2])
		t.Logf("window %d: A %.3f B %.3f none %.3f", i, st.sent[1], st.sent[2], st.sent[0])
		if share < 0.4 || share > 0.6 {
			t.Errorf("window %d: %.1f %% of sends on A, want 40–60 %%", i, 100*share)
		}
	}
}

// TestBetterTreatmentWins: with one treatment 30 % better, the engine ends
// above 70 % of its sends on it.
func TestBetterTreatmentWins(t *testing.T) {
	w := emailWorld(3, 20000, 0.01, 0.013)
	m := New(DefaultConfig())
	var share float64
	for i := 1; i <= 12; i++ {
		st := w.runWindow(m, week(i))
		share = st.sent[2] / (st.sent[1] + st.sent[2])
		t.Logf("window %d: A %.3f B %.3f none %.3f", i, st.sent[1], st.sent[2], st.sent[0])
	}
	if share <= 0.7 {
		t.Errorf("last window: %.1f %% of sends on the better treatment, want above 70 %%", 100*share)
	}
}
