package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
	"github.com/google/go-cmp/cmp"
)

// lostSend decides customers "lost-NNNN" for campaign "c1" (put with 10
// sends), each request under Idempotency-Key "k-NNNN", until one gets a
// coupon: the decision whose answer, in the tests below, never reached its
// caller. It returns the customer, the key and the decision.
func lostSend(t *testing.T, e *Engine) (ref, key string, d *Decision) {
	t.Helper()
	maxEnvios := int64(10)
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &maxEnvios}, t0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		ref, key = fmt.Sprintf("lost-%04d", i), fmt.Sprintf("k-%04d", i)
		d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CampanaID: "c1",
			Idempotency: Idempotency{Key: key, BodyHash: HashBody([]byte(ref))}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Accion != 0 {
			return ref, key, d
		}
	}
	t.Fatal("no send in 500 decisions: change the refs")
	return "", "", nil
}

// TestFallbackReplacesLostDecision: a fallback record naming the
// Idempotency-Key of the decision request whose answer was lost voids that
// decision (rechazada, anulada, its send given back, its reward window
// closed, not learned), and only that one: not without the header, not a
// decision confirmed since, not another campaign's record, not the open
// window's decision a later request was answered with. Without the
// mechanism the customer's next request got the lost decision back for
// the whole reward window and its budget stayed spent until it expired.
func TestFallbackReplacesLostDecision(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(e *Engine, ref, key string, d *Decision) (replaces string)
		campai string
		voided bool
	}{
		{"replaces the lost decision", func(_ *Engine, _, key string, _ *Decision) string { return key }, "c1", true},
		{"no header", func(*Engine, string, string, *Decision) string { return "" }, "c1", false},
		{"unknown key", func(*Engine, string, string, *Decision) string { return "k-unknown" }, "c1", false},
		{"another campaign", func(_ *Engine, _, key string, _ *Decision) string { return key }, "", false},
		{"confirmed since", func(e *Engine, _, key string, d *Decision) string {
			if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
				t.Fatal(err)
			}
			return key
		}, "c1", false},
		{"a later request answered with the open window", func(e *Engine, ref, _ string, d *Decision) string {
			again, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CampanaID: "c1",
				Idempotency: Idempotency{Key: "k-again", BodyHash: HashBody([]byte("again"))}})
			if err != nil || again.DecisionID != d.DecisionID {
				t.Fatalf("second request: %v %v, want the open window's decision", again, err)
			}
			return "k-again"
		}, "c1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 1, nil)
			ref, key, d := lostSend(t, e)
			in := FallbackInput{Accion: 0, Canal: "push", ClienteRef: ref, CampanaID: tc.campai, Replaces: tc.before(e, ref, key, d)}
			if err := e.Fallback("acme", in); err != nil {
				t.Fatal(err)
			}
			nonce, _ := e.ids.parse("acme", d.DecisionID)
			r, err := e.loadDecision("acme", nonce)
			if err != nil {
				t.Fatal(err)
			}
			if got := replacedByFallback(r); got != tc.voided {
				t.Errorf("voided %v (estado %s, motivo %q), want %v", got, r.Estado, r.MotivoRechazo, tc.voided)
			}
			if want := map[bool]int64{true: 0, false: 1}[tc.voided && tc.campai != ""]; storedBudget(t, db).Envios != want {
				t.Errorf("campaign sends %d after the fallback, want %d", storedBudget(t, db).Envios, want)
			}
			next, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CampanaID: "c1"})
			if err != nil {
				t.Fatal(err)
			}
			if windowHeld := next.DecisionID == d.DecisionID; windowHeld == tc.voided {
				t.Errorf("next request answered with the lost decision: %v, want %v", windowHeld, !tc.voided)
			}
			if !tc.voided {
				return
			}
			if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); !errors.Is(err, ErrAlreadyConfirmed) {
				t.Errorf("confirming the replaced decision: %v, want ErrAlreadyConfirmed", err)
			}
			advance(t, db, 40*24*time.Hour)
			st, err := e.Learner.Learn("acme")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(1, st.Replaced); diff != "" {
				t.Errorf("rewards left out as replaced (-want +got):\n%s", diff)
			}
		})
	}
}

// fallbackBehindAttempt holds in.Replaces as an attempt of the lost request
// still being answered would, then sends the fallback record in on its own
// goroutine: release ends the attempt, done gives Fallback's error.
func fallbackBehindAttempt(t *testing.T, e *Engine, in FallbackInput) (release func(), done <-chan error) {
	t.Helper()
	release, err := e.flights.claimKey("acme", in.Replaces)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- e.Fallback("acme", in) }()
	return release, ch
}

// TestFallbackWaitsForTheRequestItReplaces: a fallback record that
// arrives while an attempt of the request it replaces still holds the key
// (the request still being answered) waits for it, then voids the
// decision; without the wait the record found the key busy and voided
// nothing.
func TestFallbackWaitsForTheRequestItReplaces(t *testing.T) {
	e, _ := newTestEngine(t, 1, nil)
	ref, key, d := lostSend(t, e)
	release, done := fallbackBehindAttempt(t, e, FallbackInput{Canal: "push", ClienteRef: ref, CampanaID: "c1", Replaces: key})
	time.Sleep(50 * time.Millisecond)
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	nonce, _ := e.ids.parse("acme", d.DecisionID)
	if r, err := e.loadDecision("acme", nonce); err != nil || !replacedByFallback(r) {
		t.Errorf("after the attempt ended: %+v %v, want the decision replaced", r, err)
	}
}

// TestFallbackJudgesTheReplacedDecisionByTheClockUnderTheLock: a fallback
// record that waits for the attempt of the request it replaces read the
// tenant clock before the wait; a learner pass that meanwhile found the
// decision's reward due closed it as unconfirmed. The record must judge
// the decision by the clock it reads under the customer's lock, as a
// confirmation does, and leave a reward made final alone; by the clock
// read before the wait it voided a decision the learner had closed.
func TestFallbackJudgesTheReplacedDecisionByTheClockUnderTheLock(t *testing.T) {
	e, db := newTestEngine(t, 1, func(s *store.Settings) { s.RewardWindow, s.RewardGrace = time.Hour, 0 })
	ref, key, d := lostSend(t, e)
	release, done := fallbackBehindAttempt(t, e, FallbackInput{Canal: "push", ClienteRef: ref, CampanaID: "c1", Replaces: key,
		Idempotency: Idempotency{Key: "fb-1", BodyHash: HashFallbackBody([]byte(ref))}})
	// The record holds its own key once it has read the clock.
	for held := false; !held; {
		e.flights.mu.Lock()
		_, held = e.flights.m["acme\x00fb-1"]
		e.flights.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	advance(t, db, 2*time.Hour)
	st, err := e.Learner.Learn("acme")
	if err != nil {
		t.Fatal(err)
	}
	if st.Unconfirmed == 0 {
		t.Fatalf("learner pass %+v: want the lost decision closed unconfirmed", st)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	nonce, _ := e.ids.parse("acme", d.DecisionID)
	r, err := e.loadDecision("acme", nonce)
	if err != nil {
		t.Fatal(err)
	}
	if replacedByFallback(r) || r.Estado != EstadoPendiente || r.Recompensa == nil {
		t.Errorf("decision after the pass and the record: estado %s, motivo %q, recompensa %v; want pendiente, not replaced, its reward final",
			r.Estado, r.MotivoRechazo, r.Recompensa)
	}
}

// TestEvaluateNamesReplacedDecisions: admin evaluate counts a decision a
// fallback record replaced among those left out as "replaced"; it was
// counted as "voided_batch", a batch job's void, for an online decision.
func TestEvaluateNamesReplacedDecisions(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	ref, key, _ := lostSend(t, e)
	if err := e.Fallback("acme", FallbackInput{Canal: "push", ClienteRef: ref, CampanaID: "c1", Replaces: key}); err != nil {
		t.Fatal(err)
	}
	advance(t, db, 40*24*time.Hour)
	learnAll(t, e)
	ev, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Replicates: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{"replaced": ev.Excluded["replaced"], "voided_batch": ev.Excluded["voided_batch"]}
	if diff := cmp.Diff(map[string]int{"replaced": 1, "voided_batch": 0}, got); diff != "" {
		t.Errorf("left out (-want +got):\n%s\nall: %v", diff, ev.Excluded)
	}
}

// TestFallbackSpendsTheReplacedKey: once a fallback record names the key
// of the request whose answer was lost, an attempt of that request that
// reaches the engine afterwards (its body was still on the way) decides
// nothing: ErrIdempotencyConflict, whether the record voided the decision
// (the attempt replayed the voided decision's coupon) or the key had
// answered nothing yet (the attempt made a new decision that held the
// customer's window for weeks, the very thing the record is for). A key
// whose decision the record leaves alone (confirmed since) keeps its
// answer.
func TestFallbackSpendsTheReplacedKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		confirm bool // the lost decision is confirmed before the record
		unknown bool // the record names a key the engine has not answered yet
		wantErr error
		voided  bool // the lost decision ends replaced
		open    bool // the customer's reward window stays open
	}{
		{name: "voided", wantErr: ErrIdempotencyConflict, voided: true},
		{name: "answered nothing yet", unknown: true, wantErr: ErrIdempotencyConflict},
		{name: "confirmed since", confirm: true, open: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newTestEngine(t, 1, nil)
			ref, key, d := lostSend(t, e)
			if tc.confirm {
				if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.unknown {
				ref, key = "late-0001", "k-late"
			}
			if err := e.Fallback("acme", FallbackInput{Canal: "push", ClienteRef: ref, CampanaID: "c1", Replaces: key}); err != nil {
				t.Fatal(err)
			}
			late, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CampanaID: "c1",
				Idempotency: Idempotency{Key: key, BodyHash: HashBody([]byte(ref))}})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("late attempt: %+v, %v; want %v", late, err, tc.wantErr)
			}
			if err == nil && late.DecisionID != d.DecisionID {
				t.Errorf("late attempt answered %s, want the replay of %s", late.DecisionID, d.DecisionID)
			}
			nonce, _ := e.ids.parse("acme", d.DecisionID)
			if r, err := e.loadDecision("acme", nonce); err != nil || replacedByFallback(r) != tc.voided {
				t.Errorf("lost decision: %+v, %v; want replaced %v", r, err, tc.voided)
			}
			cs, err := e.loadCustomerState("acme", ref, false)
			if err != nil || (cs.OpenNonce != "") != tc.open {
				t.Errorf("customer %s: open window %q, %v; want one: %v", ref, cs.OpenNonce, err, tc.open)
			}
		})
	}
}
