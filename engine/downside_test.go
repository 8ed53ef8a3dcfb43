package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestDownside: a send's downside is the discount redeemed on purchases
// the customer makes anyway, the sending cost and the tenant's opt-out
// penalty at the model's opt-out rate (1 in 50 before any send); the
// decision record keeps it per candidate (never-send 0) and the learner
// and the evaluation read it back.
func TestDownside(t *testing.T) {
	a := &Action{ID: 1, CostoEnvioCents: 50, DescuentoMaxCents: 1000, DescuentoPct: 10}
	c := &customer{buyRate: 0.5, redeemRate: 0.2, avgTicketCents: 20000, optoutCents: 100}
	if got, want := c.downside(a), 0.5*0.2*1000+50+100.0; got != want {
		t.Errorf("downside %v, want %v", got, want)
	}
	free := &Action{ID: 2}
	if got := (&customer{}).downside(free); got != 1 {
		t.Errorf("an action that can lose nothing: downside %v, want the least, 1 cent", got)
	}

	for _, penalty := range []int64{5000, 0} {
		e, _ := newTestEngine(t, 2, func(s *store.Settings) { s.OptoutPenaltyCents = penalty })
		ts, _ := e.state("acme")
		tn, _ := e.db.Tenant("acme")
		b := e.db.NewBatch()
		rec, _, err := e.decideNew(ts, tn, t0, Request{ClienteRef: "nuevo", Canal: "push"}, b, new(decideScratch))
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		// A customer without history buys nothing anyway: cost 50 plus
		// the penalty at 2 %.
		d := 50 + 0.02*float64(penalty)
		if diff := cmp.Diff([]float64{0, d, d}, rec.Downs); diff != "" {
			t.Errorf("penalty %d: record's downsides (-want +got):\n%s", penalty, diff)
		}
		_, cands := rec.policyInputs()
		var got []float64
		for _, c := range cands {
			got = append(got, c.arm.Downside)
		}
		if diff := cmp.Diff(rec.Downs, got); diff != "" {
			t.Errorf("penalty %d: downsides read back from the record (-want +got):\n%s", penalty, diff)
		}
	}
}
