package server

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// TestRewardAtLastSandboxClock: a decision made at any time a sandbox
// clock may show (up to store.LastSandboxClock), with the longest reward
// window and grace, earns the purchase in its window as at an ordinary
// date, and the learner has nothing to do before its window and grace
// close. When the limit was 9990, a clock could reach 2261, whose window
// ends past store.LastKeyTime: the window read no purchase (reward 0) and
// every pass requeued the reward, so "admin clock advance", which runs
// passes until one does nothing, never returned.
func TestRewardAtLastSandboxClock(t *testing.T) {
	const span = 365 * 24 * time.Hour
	type outcome struct {
		Early      engine.LearnStats // a pass the day after the decision
		Folded     int
		Recompensa any
	}
	run := func(start time.Time) outcome {
		h, tok := newCatalogHarness(t, 2, func(s *store.Settings) {
			s.ControlShare, s.RateLimits, s.RewardWindow, s.RewardGrace = 0, false, span, span
		})
		clockTo := func(at time.Time) {
			if _, err := h.db.UpdateTenant("acme", func(tn *store.Tenant) error { tn.ClockNow = at; return nil }); err != nil {
				t.Fatal(err)
			}
		}
		clockTo(start)
		const ana = "ana-00000001"
		st, d := h.do("POST", "/v1/decisiones", tok, decideBody(ana, map[string]any{"canal": "push", "acciones_permitidas": []int{0}}))
		if st != 200 {
			t.Fatalf("decide at %v: %d %v", start, st, d)
		}
		if st, b := h.do("POST", "/v1/decisiones/"+d["decision_id"].(string)+"/ejecucion", tok, map[string]any{"ejecutada": true}); st != 200 {
			t.Fatalf("confirm at %v: %d %v", start, st, b)
		}
		h.acceptEvents(tok, purchaseAt("p1", ana, start.Add(time.Minute)))
		var o outcome
		clockTo(start.Add(24 * time.Hour))
		var err error
		if o.Early, err = h.engine.Learner.Learn("acme"); err != nil {
			t.Fatal(err)
		}
		clockTo(start.Add(2 * span))
		for pass := 0; pass < 10; pass++ {
			ls, err := h.engine.Learner.Learn("acme")
			if err != nil {
				t.Fatal(err)
			}
			if !ls.Worked() {
				break
			}
			o.Folded += ls.Folded
		}
		_, x := h.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil)
		o.Recompensa = x["decisiones"].([]any)[0].(map[string]any)["recompensa_mxn"]
		return o
	}
	want := outcome{Folded: 1, Recompensa: 30.25} // the purchase's margin; nothing sent
	// A window and grace ending past store.LastKeyTime, if the clock may
	// show its start.
	crossing := store.LastKeyTime().Add(-span)
	if crossing.After(store.LastSandboxClock()) {
		crossing = store.LastSandboxClock()
	}
	for _, start := range []time.Time{testStart, store.LastSandboxClock(), crossing} {
		if diff := cmp.Diff(want, run(start)); diff != "" {
			t.Errorf("decision at %v (-want +got):\n%s", start, diff)
		}
	}
}

// TestLastSandboxClockKeysInOrder: every time derived from the latest
// sandbox clock (a year's window and grace, caduca_en) is before
// store.LastKeyTime, so its keys sort as the times do.
func TestLastSandboxClockKeysInOrder(t *testing.T) {
	last := store.LastSandboxClock().Add(2*365*24*time.Hour + engine.DecisionTTL)
	if !last.Before(store.LastKeyTime()) {
		t.Errorf("the latest derived time %v is not before %v", last, store.LastKeyTime())
	}
}
