package engine

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/store"
)

// campaignSends puts campaign "c1" with maxEnvios and decides customers
// "send-NNNN" with it until want of them got a send; it returns their ids.
func campaignSends(tb testing.TB, e *Engine, maxEnvios int64, want int) []string {
	tb.Helper()
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &maxEnvios}, t0); err != nil {
		tb.Fatal(err)
	}
	var ids []string
	for i := 0; len(ids) < want && i < 500; i++ {
		d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("send-%04d", i), Canal: "push", CampanaID: "c1"})
		if err != nil {
			tb.Fatal(err)
		}
		if d.Accion != 0 {
			ids = append(ids, d.DecisionID)
		}
	}
	if len(ids) < want {
		tb.Fatalf("%d sends in 500 decisions, want %d: change the seed or the refs", len(ids), want)
	}
	return ids
}

// storedBudget is campaign "c1"'s spent budget as stored.
func storedBudget(tb testing.TB, db *store.DB) budget {
	tb.Helper()
	var bu budget
	if err := db.GetJSON(store.BudgetKey("acme", "c1"), &bu); err != nil {
		tb.Fatal(err)
	}
	return bu
}

// TestExpiryAtDeadlineKeepsConfirmableSend: a confirmation is accepted
// while the tenant clock is not after caduca_en, so an unconfirmed send
// gives its budget back only once the clock is past caduca_en. A sandbox
// clock advanced by exactly 7 days stands on caduca_en: the learner must
// not release a send that can still be confirmed (ejecutada would then
// count nothing, rechazada would release it twice).
func TestExpiryAtDeadlineKeepsConfirmableSend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		confirm *Confirmation // of the first send at caduca_en; nil: none
		want    budget        // after the clock moves past caduca_en and the learner runs
	}{
		{"ejecutada", &Confirmation{Ejecutada: true}, budget{Envios: 2, DescuentoCents: 2000}},
		{"rechazada", &Confirmation{Ejecutada: false, MotivoRechazo: "no"}, budget{Envios: 1, DescuentoCents: 1000}},
		{"unconfirmed", nil, budget{Envios: 1, DescuentoCents: 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 1, nil)
			ids := campaignSends(t, e, 2, 2)
			if _, err := e.Confirm("acme", ids[1], Confirmation{Ejecutada: true}); err != nil {
				t.Fatal(err)
			}
			advance(t, db, DecisionTTL) // the clock stands on caduca_en
			if _, err := e.Learner.Learn("acme"); err != nil {
				t.Fatal(err)
			}
			if tc.confirm != nil {
				if _, err := e.Confirm("acme", ids[0], *tc.confirm); err != nil {
					t.Fatalf("confirmation at caduca_en: %v", err)
				}
			}
			advance(t, db, time.Second)
			if _, err := e.Learner.Learn("acme"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, storedBudget(t, db)); diff != "" {
				t.Errorf("budget (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBudgetStoredInCommitOrder: budget records are counters written
// whole, so a writer that counted a send before another must not store its
// older counters after the other's. A learner pass that gives an expired
// send back commits after an online decision that spent meanwhile: the
// stored budget must count that decision's send, or an engine started
// again over the store lets the campaign overspend.
func TestBudgetStoredInCommitOrder(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	campaignSends(t, e, 3, 2) // both expire unconfirmed; a third send fits
	advance(t, db, DecisionTTL+time.Second)
	var sent []string
	e.Learner.beforeCommit = func() {
		e.Learner.beforeCommit = nil
		for i := 0; len(sent) == 0 && i < 500; i++ {
			d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("late-%04d", i), Canal: "push", CampanaID: "c1"})
			if err != nil {
				t.Fatal(err)
			}
			if d.Accion != 0 {
				sent = append(sent, d.DecisionID)
			}
		}
	}
	st, err := e.Learner.Learn("acme")
	if err != nil {
		t.Fatal(err)
	}
	if st.Released != 2 || len(sent) != 1 {
		t.Fatalf("the pass released %d sends and %d decisions sent while it ran: the test needs 2 and 1", st.Released, len(sent))
	}
	want := budget{Envios: 1, DescuentoCents: 1000}
	if diff := cmp.Diff(want, storedBudget(t, db)); diff != "" {
		t.Errorf("stored budget (-want +got):\n%s", diff)
	}
}

// TestConfirmDuringLearnerPassKept: with a reward window and grace shorter
// than the 7 days of caduca_en, a decision's reward is made final while it
// can still be confirmed. A learner pass writes back the record it read,
// so a confirmation committed during the pass was undone, and a second
// confirmation was then accepted with another outcome.
func TestConfirmDuringLearnerPassKept(t *testing.T) {
	e, db := newTestEngine(t, 1, func(s *store.Settings) { s.RewardWindow, s.RewardGrace = time.Hour, 0 })
	d, err := e.Decide("acme", Request{ClienteRef: "window-short", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	advance(t, db, 2*time.Hour)
	confirmed := make(chan error, 1)
	e.Learner.beforeCommit = func() {
		e.Learner.beforeCommit = nil
		go func() {
			_, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true})
			confirmed <- err
		}()
		// Let a confirmation that does not wait for the pass commit first;
		// one that waits is not a failure, whatever the time it takes.
		select {
		case err := <-confirmed:
			confirmed <- err
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := e.Learner.Learn("acme"); err != nil {
		t.Fatal(err)
	}
	if err := <-confirmed; err != nil {
		t.Fatalf("confirmation during the pass: %v", err)
	}
	_, err = e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: false, MotivoRechazo: "otra"})
	if !errors.Is(err, ErrAlreadyConfirmed) {
		t.Errorf("second confirmation: %v, want ErrAlreadyConfirmed", err)
	}
	r, err := e.DecisionByID("acme", d.DecisionID)
	if err != nil {
		t.Fatal(err)
	}
	if got := [2]any{r.Estado, r.Recompensa != nil}; got != [2]any{EstadoEjecutada, true} {
		t.Errorf("record estado %q, reward final %v; want ejecutada with its reward", r.Estado, r.Recompensa != nil)
	}
}

// TestConfirmCommittedAfterPassReadKept: a confirmation that read the
// clock, under its customer's lock, before the decision's reward fell due
// does not wait for a learner pass, and may commit after a pass that
// started meanwhile read the record as pending. The pass wrote back the
// record it read: the rejection was undone (the decision pending again)
// and the send it gave back counted again by the record, not by the
// budget. Setting the tenant clock back in the pass, and hiding the pass
// under way (learnView), stands in for that confirmation: it is not due by
// its clock, and it took its lock before the pass began.
func TestConfirmCommittedAfterPassReadKept(t *testing.T) {
	e, db := newTestEngine(t, 1, func(s *store.Settings) { s.RewardWindow, s.RewardGrace = time.Hour, 0 })
	id := campaignSends(t, e, 5, 1)[0]
	advance(t, db, 2*time.Hour)
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	var confirmErr error
	e.Learner.beforeCommit = func() {
		e.Learner.beforeCommit = nil
		advance(t, db, -90*time.Minute)
		view := ts.learnView.Swap(nil)
		_, confirmErr = e.Confirm("acme", id, Confirmation{MotivoRechazo: "no"})
		ts.learnView.Store(view)
		advance(t, db, 90*time.Minute)
	}
	st, err := e.Learner.Learn("acme")
	if err != nil || confirmErr != nil {
		t.Fatalf("pass: %v; confirmation: %v", err, confirmErr)
	}
	if st.Requeued != 1 {
		t.Errorf("pass requeued %d entries, want 1: the confirmed record waits for the next pass", st.Requeued)
	}
	advance(t, db, time.Second)
	if _, err := e.Learner.Learn("acme"); err != nil {
		t.Fatal(err)
	}
	r, err := e.DecisionByID("acme", id)
	if err != nil {
		t.Fatal(err)
	}
	if got := [2]any{r.Estado, r.Recompensa != nil}; got != [2]any{EstadoRechazada, true} {
		t.Errorf("record estado %q, reward final %v; want rechazada with its reward", r.Estado, r.Recompensa != nil)
	}
	if diff := cmp.Diff(budget{}, storedBudget(t, db)); diff != "" {
		t.Errorf("stored budget (-want +got):\n%s", diff)
	}
}

// TestConfirmAfterSettleWithWiderWindowKept: a learner pass reads the
// records it makes final as pending, then again under their customers'
// locks just before its commit (settleUnconfirmed), and writes back those
// still pending. A confirmation that takes the lock after that read must
// wait for the pass, or the pass's commit undoes it (and counts again the
// send a rejection gave back). Judged by the clock and settings the
// confirmation reads, the reward was not due: the operator widened the
// reward window after the pass read the tenant's. The confirmation is
// tried once without waiting (confirmCall.once), as Confirm first tries it.
func TestConfirmAfterSettleWithWiderWindowKept(t *testing.T) {
	e, db := newTestEngine(t, 1, func(s *store.Settings) { s.RewardWindow, s.RewardGrace = time.Hour, 0 })
	id := campaignSends(t, e, 5, 1)[0]
	advance(t, db, 2*time.Hour)
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	nonce, _ := e.ids.parse("acme", id)
	c := Confirmation{MotivoRechazo: "no"}
	var duringPass error
	e.Learner.afterSettle = func() {
		e.Learner.afterSettle = nil
		if _, err := db.UpdateTenant("acme", func(t *store.Tenant) error { t.Settings.RewardWindow = 24 * time.Hour; return nil }); err != nil {
			t.Fatal(err)
		}
		_, duringPass = confirmCall{e: e, ts: ts, tenant: "acme", id: id, nonce: nonce, c: c}.once(false)
	}
	if _, err := e.Learner.Learn("acme"); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(duringPass, errRewardDue) {
		t.Errorf("confirmation during the pass, after its settle: %v, want errRewardDue (wait for the pass)", duringPass)
	}
	if errors.Is(duringPass, errRewardDue) {
		if _, err := e.Confirm("acme", id, c); err != nil {
			t.Fatalf("confirmation after the pass: %v", err)
		}
	}
	r, err := e.DecisionByID("acme", id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Estado != EstadoRechazada {
		t.Errorf("record estado %q, want rechazada: the pass undid the confirmation", r.Estado)
	}
	if diff := cmp.Diff(budget{}, storedBudget(t, db)); diff != "" {
		t.Errorf("stored budget (-want +got):\n%s", diff)
	}
}

// TestConfirmWaitsForPassWhenRewardFallsDue: a confirmation reads the
// clock before its locks and again under its customer's lock. When the
// decision's reward fell due in between, a learner pass may have started
// and read the record: the confirmation must wait for the pass (here, the
// learner lock the test holds), or the pass's commit undoes it.
func TestConfirmWaitsForPassWhenRewardFallsDue(t *testing.T) {
	e, db := newTestEngine(t, 1, func(s *store.Settings) { s.RewardWindow, s.RewardGrace = time.Hour, 0 })
	d, err := e.Decide("acme", Request{ClienteRef: "falls-due", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateTenant("acme", func(t *store.Tenant) error { t.Sandbox = false; return nil }); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64 // the engine clock: 30 minutes after the decision at the first read, 2 h 30 after
	e.now = func() time.Time {
		if reads.Add(1) == 1 {
			return t0.Add(30 * time.Minute)
		}
		return t0.Add(150 * time.Minute)
	}
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	ts.learnMu.Lock() // a pass under way
	confirmed := make(chan error, 1)
	go func() {
		_, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true})
		confirmed <- err
	}()
	select {
	case err := <-confirmed:
		ts.learnMu.Unlock()
		t.Fatalf("the confirmation did not wait for the learner pass (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	ts.learnMu.Unlock()
	if err := <-confirmed; err != nil {
		t.Fatalf("confirmation: %v", err)
	}
	if reads.Load() < 2 {
		t.Fatalf("the confirmation read the clock %d times, want 2: the test no longer moves it between them", reads.Load())
	}
}

// batchCampaignSends puts campaign "c1" with maxEnvios and runs batch job
// job over customers "lote-NNNN" until want of them got a send (committed,
// not delivered: the job then fails); it returns the budget then stored.
func batchCampaignSends(tb testing.TB, e *Engine, db *store.DB, job string, maxEnvios int64, want int) budget {
	tb.Helper()
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &maxEnvios}, t0); err != nil {
		tb.Fatal(err)
	}
	bd, err := e.NewBatchDecider("acme", job, "c1")
	if err != nil {
		tb.Fatal(err)
	}
	defer bd.Close()
	sends := 0
	for i := 0; sends < want && i < 500; i++ {
		d, err := bd.Decide(fmt.Sprintf("lote-%04d", i), false)
		if err != nil {
			tb.Fatal(err)
		}
		if d.Accion != 0 {
			sends++
		}
	}
	if err := bd.Flush(); err != nil {
		tb.Fatal(err)
	}
	if sends < want {
		tb.Fatalf("%d sends in 500 decisions, want %d: change the seed or the refs", sends, want)
	}
	return storedBudget(tb, db)
}

// TestVoidJobAfterExpiryReleasesOnce: the sends of a failed job that
// expired unconfirmed were given back by the learner; voiding the job
// afterwards (a restart's Recover, a sandbox clock advanced while the job
// ran) must not give them back a second time, or the campaign's counter
// falls below its outstanding sends and a later decision overspends.
func TestVoidJobAfterExpiryReleasesOnce(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	if got := batchCampaignSends(t, e, db, "lote_1", 3, 2); got.Envios != 2 {
		t.Fatalf("budget after the job: %+v, want 2 sends", got)
	}
	ids := campaignSends(t, e, 3, 1) // online, confirmed: stays counted
	if _, err := e.Confirm("acme", ids[0], Confirmation{Ejecutada: true}); err != nil {
		t.Fatal(err)
	}
	advance(t, db, DecisionTTL+time.Second)
	learnAll(t, e)
	if _, err := e.VoidJob("acme", "lote_1"); err != nil {
		t.Fatal(err)
	}
	want := budget{Envios: 1, DescuentoCents: 1000}
	if diff := cmp.Diff(want, storedBudget(t, db)); diff != "" {
		t.Errorf("stored budget (-want +got):\n%s", diff)
	}
}

// TestVoidJobDuringLearnerPass: a learner pass reads decision records
// without their customers' locks and commits long after: a failed job
// voided meanwhile had its expired sends given back by both (the pass had
// read them pending), and the pass wrote back the pending record it read
// over the voided one, which a rejection could then release again.
func TestVoidJobDuringLearnerPass(t *testing.T) {
	e, db := newTestEngine(t, 1, func(s *store.Settings) { s.RewardWindow, s.RewardGrace = time.Hour, 0 })
	batchCampaignSends(t, e, db, "lote_1", 3, 2)
	ids := campaignSends(t, e, 3, 1) // online, confirmed: stays counted
	if _, err := e.Confirm("acme", ids[0], Confirmation{Ejecutada: true}); err != nil {
		t.Fatal(err)
	}
	advance(t, db, DecisionTTL+time.Second)
	voided := make(chan error, 1)
	e.Learner.beforeCommit = func() {
		e.Learner.beforeCommit = nil
		go func() {
			_, err := e.VoidJob("acme", "lote_1")
			voided <- err
		}()
		// Let a VoidJob that does not wait for the pass commit first; one
		// that waits is not a failure, whatever the time it takes.
		select {
		case err := <-voided:
			voided <- err
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := e.Learner.Learn("acme"); err != nil {
		t.Fatal(err)
	}
	if err := <-voided; err != nil {
		t.Fatal(err)
	}
	want := budget{Envios: 1, DescuentoCents: 1000}
	if diff := cmp.Diff(want, storedBudget(t, db)); diff != "" {
		t.Errorf("stored budget (-want +got):\n%s", diff)
	}
	for _, r := range storedRecords(t, db, "acme") {
		if r.JobID == "lote_1" && r.Estado != EstadoRechazada {
			t.Errorf("decision of the voided job at %v: estado %q, want rechazada", r.At, r.Estado)
		}
	}
}

// TestReleaseStoredOnlyWithItsCommit: a send given back (here by a learner
// pass, which commits long after it counts its releases) must reach the
// stored counters with its own commit, not with another writer's. A
// decision that committed during the pass stored the counters with the
// pass's releases in; a stop before the pass committed left the expired
// sends pending with their expiry entries, so the next start gave them
// back again, and the campaign could overspend.
func TestReleaseStoredOnlyWithItsCommit(t *testing.T) {
	fs := store.NewMemFS()
	db, err := store.Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := newTestEngineOn(t, db, 1, nil)
	campaignSends(t, e, 3, 2) // both expire unconfirmed; a third send fits
	advance(t, db, DecisionTTL+time.Second)
	sent := 0
	e.Learner.beforeCommit = func() {
		e.Learner.beforeCommit = nil
		for i := 0; sent == 0 && i < 500; i++ {
			d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("late-%04d", i), Canal: "push", CampanaID: "c1"})
			if err != nil {
				t.Fatal(err)
			}
			if d.Accion != 0 {
				sent++
			}
		}
		if err := db.Checkpoint("stopped"); err != nil { // the store as a stop now leaves it
			t.Fatal(err)
		}
	}
	if _, err := e.Learner.Learn("acme"); err != nil {
		t.Fatal(err)
	}
	if sent != 1 {
		t.Fatalf("%d decisions sent while the pass ran: the test needs 1", sent)
	}
	stopped, err := store.Open("stopped", fs)
	if err != nil {
		t.Fatal(err)
	}
	defer stopped.Close()
	again := New(Config{DB: stopped, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clock.NewFake(t0).Now, Seed: 1})
	if st, err := again.Learner.Learn("acme"); err != nil || st.Released != 2 {
		t.Fatalf("the pass after the start released %d sends (%v): the test needs 2", st.Released, err)
	}
	want := budget{Envios: 1, DescuentoCents: 1000}
	if diff := cmp.Diff(want, storedBudget(t, stopped)); diff != "" {
		t.Errorf("stored budget after the start (-want +got):\n%s", diff)
	}
}

// TestRejectionAtDeadlineDuringExpiryReleasesOnce: a rejection whose clock
// reading is not after caduca_en is accepted and gives its send back. A
// learner pass that started just after caduca_en and read the record as
// pending before that rejection committed must not give the send back
// again when it commits after it: the campaign would count one send fewer
// than are out, and a later decision could overspend. The pass's hook
// runs the rejection with the clock set back on caduca_en, as one that
// read the clock (under the customer lock) before the pass started.
func TestRejectionAtDeadlineDuringExpiryReleasesOnce(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	ids := campaignSends(t, e, 2, 2)
	if _, err := e.Confirm("acme", ids[1], Confirmation{Ejecutada: true}); err != nil {
		t.Fatal(err)
	}
	advance(t, db, DecisionTTL+time.Second)
	var rejected error
	e.Learner.beforeCommit = func() {
		e.Learner.beforeCommit = nil
		advance(t, db, -time.Second) // the rejection's reading: on caduca_en
		_, rejected = e.Confirm("acme", ids[0], Confirmation{Ejecutada: false, MotivoRechazo: "no"})
		advance(t, db, time.Second)
	}
	if _, err := e.Learner.Learn("acme"); err != nil {
		t.Fatal(err)
	}
	if rejected != nil {
		t.Fatalf("rejection on caduca_en: %v", rejected)
	}
	want := budget{Envios: 1, DescuentoCents: 1000}
	if diff := cmp.Diff(want, storedBudget(t, db)); diff != "" {
		t.Errorf("stored budget (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, memBudget(t, e)); diff != "" {
		t.Errorf("budget in memory (-want +got):\n%s", diff)
	}
}

// memBudget is campaign "c1"'s spent budget as decisions read it.
func memBudget(tb testing.TB, e *Engine) budget {
	tb.Helper()
	ts, err := e.state("acme")
	if err != nil {
		tb.Fatal(err)
	}
	ts.budgetMu.Lock()
	defer ts.budgetMu.Unlock()
	b, err := e.Campaigns.budgetLocked(ts, "acme", "c1")
	if err != nil {
		tb.Fatal(err)
	}
	return *b
}
