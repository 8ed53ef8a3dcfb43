package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestScoresInALentBuffer: a decision's scores computed in a buffer that
// held a larger decision's scores (scratchPool) equal those computed in
// fresh memory, and the lent buffer fits the candidates exactly. Fails if
// the buffer's earlier contents or length leak into a decision.
func TestScoresInALentBuffer(t *testing.T) {
	e, _ := newTestEngine(t, 6, nil)
	ingestFor(t, e, "ana-00000001", "a", 3)
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	pm, cat := ts.model.Load(), ts.catalog.Load()
	candsOf := func(ref string, n int) []candidate {
		cust, err := e.customer(new(customer), "acme", ref, t0, 7*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cands, _ := eligible(cat, Request{ClienteRef: ref, Canal: "push"}, cust, nil)
		for i := range cands {
			c := &cands[i]
			c.arm = cust.arm(c.action)
			c.prior = c.arm.Prior
		}
		if len(cands) < n {
			t.Fatalf("%s: %d candidates, want at least %d", ref, len(cands), n)
		}
		return cands[:n]
	}
	type view struct{ ID, Mu, Effect, Width []float64 }
	look := func(sc *scored) view {
		var v view
		for _, s := range sc.scores {
			v.ID, v.Mu, v.Effect, v.Width = append(v.ID, float64(s.ID)), append(v.Mu, s.Mu), append(v.Effect, s.Effect), append(v.Width, s.Width)
		}
		return v
	}
	cust := func(ref string) *customer {
		c, err := e.customer(new(customer), "acme", ref, t0, 7*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	fresh := look(pm.score(cust("ana-00000001"), candsOf("ana-00000001", 4), 5000, nil))
	buf := &e.scratch.get().scores
	pm.score(cust("new-00000001"), candsOf("new-00000001", 7), 5000, buf) // a larger decision first
	lent := pm.score(cust("ana-00000001"), candsOf("ana-00000001", 4), 5000, buf)
	if diff := cmp.Diff(fresh, look(lent)); diff != "" {
		t.Errorf("scores in a lent buffer (-fresh +lent):\n%s", diff)
	}
	if len(lent.scores) != 4 || len(buf.arms) != 4 {
		t.Errorf("lent buffer holds %d scores and %d arms, want 4", len(lent.scores), len(buf.arms))
	}
}

// TestCustomerInLentMemory: a customer read into the memory of one read
// before (a decision's scratch, whose features are decoded into the
// buckets of the earlier customer's) equals the customer read into fresh
// memory, whether the earlier customer had more history, less or none.
// Fails if buckets, categories or derived values of the earlier customer
// leak into the next.
func TestCustomerInLentMemory(t *testing.T) {
	e, _ := newTestEngine(t, 3, nil)
	ingestFor(t, e, "rico-0000001", "r", 40)
	ingestFor(t, e, "ana-00000001", "a", 3)
	type view struct {
		Features                                 []byte
		X                                        []float64
		Closed                                   bool
		Baseline, AvgTicket, Margin, Redeem, Buy float64
		Spend, Tickets                           [3]int64
		CatTotal                                 int64
	}
	look := func(c *customer) view {
		return view{Features: c.f.AppendEncode(nil), X: c.x, Closed: c.closed,
			Baseline: c.baselineCents, AvgTicket: c.avgTicketCents, Margin: c.ticketMargin, Redeem: c.redeemRate, Buy: c.buyRate,
			Spend: c.sum.spend, Tickets: c.sum.tickets, CatTotal: c.sum.catTotal}
	}
	read := func(c *customer, ref string) view {
		got, err := e.customer(c, "acme", ref, t0, 7*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return look(got)
	}
	lent := new(customer)
	for _, ref := range []string{"rico-0000001", "ana-00000001", "nuevo-000001", "ana-00000001", "rico-0000001"} {
		if diff := cmp.Diff(read(new(customer), ref), read(lent, ref)); diff != "" {
			t.Errorf("%s in lent memory (-fresh +lent):\n%s", ref, diff)
		}
	}
}
