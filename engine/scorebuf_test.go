package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestScoresInALentBuffer: a decision's scores computed in a buffer that
// held a larger decision's scores (scoreBufs) equal those computed in
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
		cust, err := e.customer("acme", ref, t0, 7*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cands, _ := eligible(cat, Request{ClienteRef: ref, Canal: "push"}, cust)
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
		c, err := e.customer("acme", ref, t0, 7*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	fresh := look(pm.score(cust("ana-00000001"), candsOf("ana-00000001", 4), 5000, nil))
	buf := e.scoreBufs.get()
	pm.score(cust("new-00000001"), candsOf("new-00000001", 7), 5000, buf) // a larger decision first
	lent := pm.score(cust("ana-00000001"), candsOf("ana-00000001", 4), 5000, buf)
	if diff := cmp.Diff(fresh, look(lent)); diff != "" {
		t.Errorf("scores in a lent buffer (-fresh +lent):\n%s", diff)
	}
	if len(lent.scores) != 4 || len(buf.arms) != 4 {
		t.Errorf("lent buffer holds %d scores and %d arms, want 4", len(lent.scores), len(buf.arms))
	}
}
