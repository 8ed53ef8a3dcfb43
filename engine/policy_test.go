package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// rewardRound decides n customers, confirms every decision and gives each
// a purchase whose margin is base plus effect[action] (cents), then moves
// the clock past the reward window and learns. It returns the share of
// decisions that sent a coupon.
func rewardRound(t *testing.T, e *Engine, db *store.DB, round, n int, base int64, effect map[int]int64) float64 {
	t.Helper()
	share := decideRound(t, e, round, n, base, effect)
	advance(t, db, 25*time.Hour)
	learnAll(t, e)
	return share
}

// decideRound decides, confirms and ingests the purchases of one round of
// n customers (margin base plus the action's effect, cents) and returns
// the share of them sent a coupon.
func decideRound(t *testing.T, e *Engine, round, n int, base int64, effect map[int]int64) float64 {
	t.Helper()
	sent := 0
	var evs []IngestEvent
	for i := 0; i < n; i++ {
		ref := fmt.Sprintf("r%d-%d", round, i)
		d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CapExempt: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Accion != 0 {
			sent++
		}
		if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
			t.Fatal(err)
		}
		_, now, _ := e.tenantNow("acme")
		margin := base + effect[d.Accion] + int64((i%7)-3)*400
		evs = append(evs, IngestEvent{Event: Event{ID: "ev-" + ref, ClienteRef: ref, TS: now.Add(time.Hour), Tipo: CompraCat,
			Clave: "x", ValorCents: 10000, TicketID: "t" + ref, MargenCents: margin}, Canonical: []byte(ref)})
	}
	if _, err := e.Ingester.Ingest("acme", evs); err != nil {
		t.Fatal(err)
	}
	return float64(sent) / float64(n)
}

// learnAll runs learner passes until one does no work.
func learnAll(t *testing.T, e *Engine) {
	t.Helper()
	for {
		st, err := e.Learner.Learn("acme")
		if err != nil {
			t.Fatal(err)
		}
		if !st.Worked() {
			break
		}
	}
}

// TestDecisionsWhileTheLearnerPublishes: decisions read the published
// model while a learner pass folds rewards into its clone and publishes
// the next one. Under the race detector (make test) it fails if the clone
// shares state the pass writes (the gate's bands did until Guard.clone
// copied them); without it, it checks that decisions keep answering.
func TestDecisionsWhileTheLearnerPublishes(t *testing.T) {
	cfg := policy.DefaultConfig()
	cfg.GateSendZ = -50 // every choice a coupon, so every decision reads its band's gate
	e, db := newTestEngine(t, 2, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	e = New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: e.now, Seed: 1, Policy: &cfg})
	effect := map[int]int64{0: 0, 1: 800, 2: 800}
	rewardRound(t, e, db, 1, 300, 3000, effect) // the model has gate bands now
	decideRound(t, e, 2, 1000, 3000, effect)
	advance(t, db, 25*time.Hour)
	stop, done, started := make(chan struct{}), make(chan error, 1), make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			if i == 20 {
				close(started)
			}
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("w-%d", i), Canal: "push", CapExempt: true}); err != nil {
				done <- err
				return
			}
		}
	}()
	<-started
	learnAll(t, e)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("a decision during the learner pass: %v", err)
	}
}

// TestGuardSwitchesEngineToNeverSend: a policy model that cannot stop
// sending (its choice is made optimistic: GateSendZ = −50, a coupon
// whenever its effect is above −50 standard errors) in a world where
// every coupon costs 20 MXN of margin. The guard switches the tenant to
// never-send within 3 reward windows, Status and Guard (read by the
// /metrics gauge coupond_policy_guard_active) show it, and later decisions send coupons only to
// explore. Without the guard the engine keeps sending.
func TestGuardSwitchesEngineToNeverSend(t *testing.T) {
	cfg := policy.DefaultConfig()
	cfg.Z, cfg.GateSendZ = -50, -50
	e, db := newTestEngine(t, 2, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	e2 := New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: e.now, Seed: 1, Policy: &cfg})
	e = e2
	effect := map[int]int64{0: 0, 1: -2000, 2: -2000}
	switched := 0
	for round := 1; round <= 5; round++ {
		share := rewardRound(t, e, db, round, 400, 3000, effect)
		st, err := e.Learner.Status("acme")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: sent %.2f, guard %+v", round, share, st.Guard)
		if st.Guard.Active && switched == 0 {
			switched = round
		}
		if switched > 0 && round > switched && share > 0.3 {
			t.Errorf("round %d: guard active but %.0f %% of decisions sent a coupon", round, 100*share)
		}
	}
	st, _ := e.Learner.Status("acme")
	if switched == 0 || switched > 3 || !st.Guard.Active || st.Guard.Baseline != 0 {
		t.Fatalf("guard switched in round %d (want 1–3); now %+v", switched, st.Guard)
	}
	if g, err := e.Learner.Guard("acme"); err != nil || !g.Active || g.Switches < 1 {
		t.Errorf("Guard = %+v, %v; want active after at least one switch", g, err)
	}
}

// TestGuardStaysOffWhenPolicyWins: with the default model in a world where
// both coupons lose margin, as the economic prior says for customers
// without history, the learned policy (never-send but for exploration)
// beats every baseline: the guard never switches, and coupons go out at
// the exploration rate only.
func TestGuardStaysOffWhenPolicyWins(t *testing.T) {
	e, db := newTestEngine(t, 2, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	effect := map[int]int64{0: 0, 1: -2000, 2: -1000}
	var share float64
	for round := 1; round <= 6; round++ {
		share = rewardRound(t, e, db, round, 400, 3000, effect)
		if st, _ := e.Learner.Status("acme"); st.Guard.Active || st.Guard.Switches > 0 {
			t.Fatalf("round %d: guard switched: %+v", round, st.Guard)
		}
	}
	if share > 0.15 {
		t.Errorf("last round sent a coupon to %.0f %%, want exploration only", 100*share)
	}
}

// TestOlderModelStartsFromPrior: a tenant whose stored model is of the
// earlier format (the engine's own model class) loads without error and
// decides from the prior; damage is still an error.
func TestOlderModelStartsFromPrior(t *testing.T) {
	_, db := newTestEngine(t, 2, nil)
	old := `{"format":3,"politica_version":"v900-20261120T000000","n":900,"shared":{"n":900,"ainv":[1],"b":[1],"theta":[1]},"arms":{},"effect_ridge":30}`
	b := db.NewBatch()
	b.Set(store.ModelKey("acme", 0), []byte(old)) // where releases before generations stored it
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	e := New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: func() time.Time { return t0 }, Seed: 3})
	st, err := e.Learner.Status("acme")
	if err != nil {
		t.Fatalf("older model: %v", err)
	}
	if st.PoliticaVersion != "v0-prior" || st.RewardsLearned != 0 || st.ModelRestarted != "its stored model is of an earlier format" {
		t.Errorf("older model: version %s, %d rewards, restarted %q; want a fresh v0-prior that says why", st.PoliticaVersion, st.RewardsLearned, st.ModelRestarted)
	}
	restarted := newPublishedModel(policy.DefaultConfig())
	restarted.restarted = "why"
	if restarted.clone().restarted != "" {
		t.Error("the learner's next model (a clone) keeps the restart note")
	}
	if _, err := e.Decide("acme", Request{ClienteRef: "c1", Canal: "push"}); err != nil {
		t.Errorf("decide after an older model: %v", err)
	}
	for _, bad := range []string{`{"format":5,"phi":[1]}`, `{}`, `null`} {
		if _, _, err := unmarshalModel([]byte(bad), policy.DefaultConfig()); err == nil {
			t.Errorf("damaged model %s loaded", bad)
		}
	}
}

// TestGateOpensEngine: a policy model whose choice is always a coupon
// (GateSendZ = −50) in a world where every coupon adds 20 MXN of margin.
// The send gate tests those choices against never-send and opens within 3
// reward windows; Guard (read by the /metrics gauge
// coupond_policy_gate_open) shows it, the log has the compuerta_abierta
// event, and the guard never switches. Without the gate's test the share
// sent stays at the testing share (about one half).
func TestGateOpensEngine(t *testing.T) {
	cfg := policy.DefaultConfig()
	cfg.GateSendZ = -50
	_, db := newTestEngine(t, 2, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	var logs strings.Builder
	e := New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.New(&logs), Now: time.Now, Seed: 1, Policy: &cfg})
	effect := map[int]int64{0: 0, 1: 2000, 2: 2000}
	opened := 0
	var share float64
	for round := 1; round <= 4; round++ {
		share = rewardRound(t, e, db, round, 400, 3000, effect)
		g, err := e.Learner.Guard("acme")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: sent %.2f, gate %+v", round, share, *g.Gate)
		if g.Gate.Open() && opened == 0 {
			opened = round
		}
		if g.Active {
			t.Fatalf("round %d: the guard switched where coupons pay: %+v", round, g)
		}
	}
	if opened == 0 || opened > 3 {
		t.Fatalf("gate opened in round %d, want 1–3", opened)
	}
	if share < 0.8 {
		t.Errorf("last round, gate open: %.0f %% sent a coupon, want ≥ 80 %%", 100*share)
	}
	if !strings.Contains(logs.String(), `"evento":"compuerta_abierta"`) {
		t.Errorf("no compuerta_abierta event in the log:\n%s", logs.String())
	}
}
