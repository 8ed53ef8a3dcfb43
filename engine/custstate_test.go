package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// custStateOutcome is what a decision request answered: the open window's
// decision given back (Open, Accion, Motivo), a new decision (New), or the
// daily cap (Cap).
type custStateOutcome struct {
	Open   string
	Accion int
	Motivo string
	New    bool
	Cap    bool
}

// TestDamagedCustomerStateIsRebuilt: a customer whose decision state does
// not decode is read as the store's decisions tell (contract §8: read
// conservatively), not as a customer without open window or requests
// today: an open reward window is given back, fallback records and voided
// batch decisions open none, and the day's decisions count toward the
// daily cap. The rebuilt state takes the damaged one's place.
func TestDamagedCustomerStateIsRebuilt(t *testing.T) {
	const ana = "ana-00000001"
	day := t0.Format(time.DateOnly)
	decide := func(t *testing.T, e *Engine) *Decision {
		t.Helper()
		d, err := e.Decide("acme", Request{ClienteRef: ana, Canal: "push"})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	fallback := func(t *testing.T, e *Engine) {
		t.Helper()
		if err := e.Fallback("acme", FallbackInput{Accion: 1, Canal: "push", ClienteRef: ana}); err != nil {
			t.Fatal(err)
		}
	}
	nonceOf := func(e *Engine, d *Decision) string {
		n, _ := e.ids.parse("acme", d.DecisionID)
		return n
	}
	openMotive := func(at time.Time, window time.Duration) string {
		return "ventana de recompensa abierta hasta " + at.Add(window).Format(time.RFC3339) + ": no se crea una nueva decisión"
	}
	tests := []struct {
		name   string
		window time.Duration
		// history makes ana's decisions; it returns what a decision after
		// her state is damaged answers and, when not nil, the state
		// stored after it.
		history func(t *testing.T, e *Engine, db *store.DB) (custStateOutcome, *customerState)
	}{
		{"open window given back, a later fallback opens none", 28 * 24 * time.Hour, func(t *testing.T, e *Engine, db *store.DB) (custStateOutcome, *customerState) {
			d := decide(t, e)
			advance(t, db, time.Hour)
			fallback(t, e)
			advance(t, db, time.Hour)
			return custStateOutcome{Open: d.DecisionID, Motivo: openMotive(t0, 28*24*time.Hour)},
				&customerState{OpenNonce: nonceOf(e, d), OpenAt: t0, Day: day, Count: 2}
		}},
		{"fallback after a closed window opens none", time.Hour, func(t *testing.T, e *Engine, db *store.DB) (custStateOutcome, *customerState) {
			decide(t, e)
			advance(t, db, 2*time.Hour)
			fallback(t, e)
			advance(t, db, time.Minute)
			return custStateOutcome{New: true}, nil
		}},
		{"damaged open decision still holds the window", 28 * 24 * time.Hour, func(t *testing.T, e *Engine, db *store.DB) (custStateOutcome, *customerState) {
			d := decide(t, e)
			damage(t, db, decisionKey("acme", nonceOf(e, d)), "\xee")
			advance(t, db, time.Hour)
			return custStateOutcome{Open: d.DecisionID, Motivo: openMotive(t0, 28*24*time.Hour)},
				&customerState{OpenNonce: nonceOf(e, d), OpenAt: t0, Day: day, Count: 2}
		}},
		{"the day's decisions count toward the cap", time.Hour, func(t *testing.T, e *Engine, db *store.DB) (custStateOutcome, *customerState) {
			decide(t, e)
			advance(t, db, 2*time.Hour)
			decide(t, e)
			advance(t, db, 2*time.Hour)
			last := decide(t, e)
			advance(t, db, 2*time.Hour)
			return custStateOutcome{Cap: true},
				&customerState{OpenNonce: nonceOf(e, last), OpenAt: t0.Add(4 * time.Hour), Day: day, Count: 3}
		}},
		{"yesterday's decisions do not", time.Hour, func(t *testing.T, e *Engine, db *store.DB) (custStateOutcome, *customerState) {
			for range DailyCap {
				decide(t, e)
				advance(t, db, 2*time.Hour)
			}
			advance(t, db, 24*time.Hour)
			return custStateOutcome{New: true}, nil
		}},
		{"a voided batch decision holds no window", 28 * 24 * time.Hour, func(t *testing.T, e *Engine, db *store.DB) (custStateOutcome, *customerState) {
			if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "x"}, t0); err != nil {
				t.Fatal(err)
			}
			bd, err := e.NewBatchDecider("acme", "lote_1", "c1")
			if err != nil {
				t.Fatal(err)
			}
			defer bd.Close()
			if _, err := bd.Decide(ana, false); err != nil {
				t.Fatal(err)
			}
			if err := bd.Flush(); err != nil {
				t.Fatal(err)
			}
			if n, err := e.VoidJob("acme", "lote_1"); n != 1 || err != nil {
				t.Fatalf("VoidJob: %d %v", n, err)
			}
			advance(t, db, time.Minute)
			return custStateOutcome{New: true}, nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 2, func(s *store.Settings) { s.RewardWindow = tc.window })
			ingestFor(t, e, ana, "a", 2)
			want, wantState := tc.history(t, e, db)
			damage(t, db, customerStateKey("acme", ana), "\xee")

			var got custStateOutcome
			d, err := e.Decide("acme", Request{ClienteRef: ana, Canal: "push"})
			switch {
			case errors.Is(err, ErrDailyCap):
				got.Cap = true
			case err != nil:
				t.Fatal(err)
			case strings.HasPrefix(d.Motivo, "ventana de recompensa abierta"):
				got = custStateOutcome{Open: d.DecisionID, Accion: d.Accion, Motivo: d.Motivo}
			default:
				got.New = true
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decision after the damage (-want +got):\n%s", diff)
			}
			if q, err := e.Quarantine.Quarantined("acme"); err != nil || !slices.ContainsFunc(q, func(r DamagedRecord) bool {
				return strings.Contains(r.Error, "rebuilt from the customer's decisions")
			}) {
				t.Errorf("quarantine: %+v %v; want the damaged state", q, err)
			}
			if wantState == nil {
				return
			}
			raw, err := db.Get(customerStateKey("acme", ana))
			if err != nil {
				t.Fatal(err)
			}
			var cs customerState
			if err := unmarshalCustomerState(raw, &cs); err != nil {
				t.Fatalf("stored state: %v", err)
			}
			if diff := cmp.Diff(*wantState, cs); diff != "" {
				t.Errorf("stored state (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSendGainReadsDamagedStateRebuilt: a batch's SendGain, which holds no
// customer lock, reads a damaged state as rebuilt (the open window keeps
// the customer out of the sends) and leaves the record for her decision.
func TestSendGainReadsDamagedStateRebuilt(t *testing.T) {
	const ana = "ana-00000001"
	e, db := newTestEngine(t, 2, nil)
	ingestFor(t, e, ana, "a", 2)
	if _, err := e.Decide("acme", Request{ClienteRef: ana, Canal: "push"}); err != nil {
		t.Fatal(err)
	}
	damage(t, db, customerStateKey("acme", ana), "\xee")
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "x"}, t0); err != nil {
		t.Fatal(err)
	}
	bd, err := e.NewBatchDecider("acme", "lote_1", "c1")
	if err != nil {
		t.Fatal(err)
	}
	defer bd.Close()
	if g, err := bd.SendGain(ana); g.OK || err != nil {
		t.Errorf("SendGain: ok %v, err %v; want no send (window open)", g.OK, err)
	}
	if raw, err := db.Get(customerStateKey("acme", ana)); err != nil || string(raw) != "\xee" {
		t.Errorf("state after SendGain: %q %v; want the damaged record left in place", raw, err)
	}
}
