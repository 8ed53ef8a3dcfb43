package policy

import (
	"math"
	"testing"
)

// TestEffectSumSE: the standard error of one effect is its Sigma (Width
// for an action without data); of the same effect added for n customers it
// is n times that, not √n: the customers share the model's error, which
// no number of them averages out.
func TestEffectSumSE(t *testing.T) {
	w := newWorld(7, 400, []simAction{
		{id: 1, cat: 0, costCents: 1000, prior: func(*simCust) float64 { return 500 }, lift: func(*simCust) float64 { return 0.05 }},
		{id: 2, cat: 1, costCents: 3000, prior: func(*simCust) float64 { return -800 }, lift: func(*simCust) float64 { return 0.02 }},
	})
	fitted := New(DefaultConfig())
	for i, sc := range w.custs {
		arms := w.arms(sc)
		a := &arms[i%2] // never-send and action 1 only: action 2 keeps its prior
		fitted.Fold(&sc.c, a, w.draw(sc, a.ID), 1)
	}
	fitted.Refit()
	for _, tc := range []struct {
		name string
		m    *Model
	}{{"no data", New(DefaultConfig())}, {"fitted", fitted}} {
		sc := w.custs[0]
		arms := w.arms(sc)
		scores := make([]Score, len(arms))
		tc.m.Score(&sc.c, arms, scores)
		for i := range scores {
			s := &scores[i]
			if s.ID == 0 {
				continue
			}
			var one, many EffectSum
			one.Add(s, 1)
			for range 100 {
				many.Add(s, 1)
			}
			want := tc.m.Sigma(s)
			if got := tc.m.SE(&one); math.Abs(got-want) > 1e-9*want || !(want > 0) {
				t.Errorf("%s, action %d: SE of one effect %g, Sigma %g", tc.name, s.ID, got, want)
			}
			if got := tc.m.SE(&many); math.Abs(got-100*want) > 1e-7*want {
				t.Errorf("%s, action %d: SE of 100 times the effect %g, want %g", tc.name, s.ID, got, 100*want)
			}
		}
	}
}
