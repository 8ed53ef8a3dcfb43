package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
	"github.com/google/go-cmp/cmp"
)

// TestLearnPassReadsEveryEntry: one learner pass over decisions of a
// campaign (a sent coupon queues a reward and an expiry entry for the same
// decision) reads each entry's record and its customer's window (read
// together, learnPass.load): every confirmed reward is the customer's
// margin in the window minus the sending cost, every unconfirmed send's
// budget comes back, and a damaged decision with both entries is
// quarantined and counted once while the rest of the pass completes. A
// pass of one chunk reads before it folds; a longer one reads ahead in
// chunks (eachLoaded), and the damaged decision's two entries then fall in
// different chunks.
func TestLearnPassReadsEveryEntry(t *testing.T) {
	for _, n := range []int{60, 3*learnLoadChunk/2 + 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { testLearnPassReadsEveryEntry(t, n) })
	}
}

func testLearnPassReadsEveryEntry(t *testing.T, n int) {
	e, db := newTestEngine(t, 3, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "camp", Canal: "push", Descripcion: "d"}, t0); err != nil {
		t.Fatal(err)
	}
	type want struct {
		confirmed bool
		accion    int
		margin    int64
	}
	wants := map[string]want{}
	var broken string
	var evs []IngestEvent
	for i := range n {
		ref := fmt.Sprintf("cust-%04d", i)
		d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CampanaID: "camp", CapExempt: true})
		if err != nil {
			t.Fatal(err)
		}
		w := want{confirmed: i%2 == 0, accion: d.Accion, margin: int64(100 * (i + 1))}
		if w.confirmed {
			if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
				t.Fatal(err)
			}
		}
		nonce, _ := e.ids.parse("acme", d.DecisionID)
		if broken == "" && d.Accion != 0 && !w.confirmed {
			broken = nonce // damaged below: its reward and expiry entries meet it
		} else {
			wants[nonce] = w
		}
		for j, ts := range []time.Duration{time.Hour, 30 * time.Hour} { // in the window, then after it
			ev := Event{ID: fmt.Sprintf("ev-%s-%d", ref, j), ClienteRef: ref, TS: t0.Add(ts), Tipo: CompraCat, Clave: "c",
				ValorCents: 10000, TicketID: fmt.Sprintf("t-%s-%d", ref, j), MargenCents: w.margin}
			evs = append(evs, IngestEvent{Index: len(evs), Event: ev, Canonical: []byte(ev.ID)})
		}
	}
	if broken == "" {
		t.Fatal("no unconfirmed send to damage: the policy sent nothing")
	}
	if _, err := e.Ingester.Ingest("acme", evs); err != nil {
		t.Fatal(err)
	}
	r, err := e.loadDecision("acme", broken)
	if err != nil {
		t.Fatal(err)
	}
	year0 := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	r.TsEjecucion = &year0 // does not decode
	b := db.NewBatch()
	b.Set(decisionKey("acme", broken), marshalRecord(r))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()

	advance(t, db, 40*24*time.Hour)
	e.onlineAt.Store(0) // one pass for everything
	st, err := e.Learner.Learn("acme")
	if err != nil {
		t.Fatal(err)
	}
	var wantSt LearnStats
	wantSt.Damaged = 1
	for nonce, w := range wants {
		switch {
		case w.confirmed:
			wantSt.Folded++
		default:
			wantSt.Unconfirmed++
			if w.accion != 0 {
				wantSt.Released++
			}
		}
		got, err := e.loadDecision("acme", nonce)
		if err != nil {
			t.Fatal(err)
		}
		reward := w.margin
		if w.accion != 0 {
			reward -= 50 // the catalog's CostoEnvioCents: a send unconfirmed counts as sent
		}
		if got.Recompensa == nil || *got.Recompensa != reward {
			t.Errorf("decision %s (accion %d, confirmed %v): reward %v, want %d", nonce, w.accion, w.confirmed, deref(got.Recompensa), reward)
		}
	}
	if diff := cmp.Diff(wantSt, st); diff != "" {
		t.Errorf("learner pass (-want +got):\n%s", diff)
	}
	if wantSt.Released == 0 || wantSt.Folded == 0 {
		t.Errorf("the pass released %d budgets and folded %d rewards: the test needs both", wantSt.Released, wantSt.Folded)
	}
	if e.Quarantine.DamagedSeen() != 1 {
		t.Errorf("DamagedSeen = %d, want 1", e.Quarantine.DamagedSeen())
	}
}

// deref shows a reward pointer's value in a message.
func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
