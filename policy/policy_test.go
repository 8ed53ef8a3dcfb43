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
