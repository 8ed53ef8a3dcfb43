package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
)

// TestRewardWindowWidened: when the operator widens the reward window
// after a decision, its reward is made final at the end of the window in
// force (decision time + new window + grace), not at the due time queued
// under the old one: closed then, it would count only the days seen so
// far, and a purchase later in the window the decision still blocks would
// never reach it.
func TestRewardWindowWidened(t *testing.T) {
	const day = 24 * time.Hour
	e, db := newTestEngine(t, 1, func(s *store.Settings) { s.RewardWindow = 2 * day; s.RewardGrace = 0 })
	const ref = "widen-00000001"
	d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateTenant("acme", func(tn *store.Tenant) error { tn.Settings.RewardWindow = 10 * day; return nil }); err != nil {
		t.Fatal(err)
	}
	reward := func() *int64 {
		t.Helper()
		r, err := e.DecisionByID("acme", d.DecisionID)
		if err != nil {
			t.Fatal(err)
		}
		return r.Recompensa
	}
	learnAll := func() {
		t.Helper()
		for {
			st, err := e.Learner.Learn("acme")
			if err != nil {
				t.Fatal(err)
			}
			if !st.Worked() {
				return
			}
		}
	}

	advance(t, db, 3*day) // past the old window, inside the new one
	learnAll()
	if r := reward(); r != nil {
		t.Fatalf("reward final at day 3 of a 10-day window: %d cents", *r)
	}
	advance(t, db, 3*day)
	ev := Event{ID: "widen-ev-1", ClienteRef: ref, TS: t0.Add(6 * day), Tipo: CompraCat, Clave: "c",
		ValorCents: 10000, TicketID: "widen-t1", MargenCents: 2500}
	ingestAll(t, e, IngestEvent{Event: ev, Canonical: []byte(ev.ID)})
	advance(t, db, 5*day) // day 11: the new window has closed
	learnAll()
	r := reward()
	want := int64(2500)
	if d.Accion != 0 {
		want -= 50 // the sending cost
	}
	if r == nil || *r != want {
		t.Fatalf("reward after the widened window: %v, want %d cents (the day-6 margin, less any sending cost)", r, want)
	}
}

// TestShadowDecisionsAreNoGuardEvidence: in shadow mode the caller applies
// its own rule, so a decision confirmed ejecutada was not applied as drawn
// (only where the rule agreed): its reward is folded into the model but is
// no sample of the guard's and gate's randomized test, which a tenant
// leaving shadow mode would otherwise open bands on.
func TestShadowDecisionsAreNoGuardEvidence(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		e, db := newTestEngine(t, 1, func(s *store.Settings) {
			s.Shadow = shadow
			s.RewardWindow = 24 * time.Hour
			s.RewardGrace = 0
			s.ControlShare = 0
		})
		for i := range 40 {
			d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("shadow-%04d", i), Canal: "push"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
				t.Fatal(err)
			}
		}
		advance(t, db, 2*24*time.Hour)
		st, err := e.Learner.Learn("acme")
		if err != nil || st.Folded == 0 {
			t.Fatalf("shadow %v: learner pass %+v %v, want rewards folded", shadow, st, err)
		}
		g, err := e.Learner.Guard("acme")
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Rewards > 0; got == shadow {
			t.Errorf("shadow %v: guard evidence %.1f effective rewards; want some only outside shadow mode", shadow, g.Rewards)
		}
	}
}
