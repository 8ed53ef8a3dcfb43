package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestShadowVerdictReasons: the verdict's reasons (sorted) name what is
// missing; a share of nothing is "none yet", not "only 0.0 %".
func TestShadowVerdictReasons(t *testing.T) {
	tests := []struct {
		name string
		rep  ShadowReport
		want []string
	}{
		{"nothing yet", ShadowReport{}, []string{
			"0 confirmed decisions with their final reward (needs at least 200 for a comparison)",
			"no coupon reported received yet (CUPON_RECIBIDO events, each with its decision_id)",
			"no shadow decisions yet",
		}},
		{"unconfirmed and unlabelled", ShadowReport{Decisions: 10, Confirmed: 5, CouponsReceived: 4, CouponsLabelled: 1, RewardsFinal: 10}, []string{
			"10 confirmed decisions with their final reward (needs at least 200 for a comparison)",
			"only 25.0% of coupons carry a decision_id (needs at least 95%)",
			"only 50.0% of decisions confirmed (needs at least 95%)",
		}},
		{"one final reward", ShadowReport{Decisions: 1, Confirmed: 1, CouponsReceived: 1, CouponsLabelled: 1, RewardsFinal: 1}, []string{
			"1 confirmed decision with its final reward (needs at least 200 for a comparison)",
		}},
		{"ready", ShadowReport{Decisions: 300, Confirmed: 300, CouponsReceived: 100, CouponsLabelled: 100, RewardsFinal: 250,
			CallerRule: MeasuredValue{Mean: 1}, Engine: MeasuredValue{Mean: 2}, Lift: MeasuredValue{Mean: 1, Lo: 0.5, Hi: 1.5}}, nil},
		{"lead within the noise", ShadowReport{Decisions: 300, Confirmed: 300, CouponsReceived: 100, CouponsLabelled: 100, RewardsFinal: 250,
			CallerRule: MeasuredValue{Mean: 1}, Engine: MeasuredValue{Mean: 2}, Lift: MeasuredValue{Mean: 1, Lo: -0.5, Hi: 2.5}}, []string{
			"the engine's estimated value 2.00 MXN does not beat the caller's rule 1.00 MXN (difference 1.00 MXN, 95% interval [-0.50, 2.50])",
		}},
		// A loss that rounds to nothing reads 0.00, not -0.00.
		{"tie within a cent", ShadowReport{Decisions: 300, Confirmed: 300, CouponsReceived: 100, CouponsLabelled: 100, RewardsFinal: 250,
			CallerRule: MeasuredValue{Mean: 1}, Engine: MeasuredValue{Mean: 0.998}, Lift: MeasuredValue{Mean: -0.002, Lo: -0.5, Hi: 0.49}}, []string{
			"the engine's estimated value 1.00 MXN does not beat the caller's rule 1.00 MXN (difference 0.00 MXN, 95% interval [-0.50, 0.49])",
		}},
	}
	for _, tt := range tests {
		rep := tt.rep
		tally := shadowTally{rep: &rep}
		tally.finish()
		rep.CallerRule, rep.Engine, rep.Lift = tt.rep.CallerRule, tt.rep.Engine, tt.rep.Lift // finish reads them from the tally
		rep.judge()
		if diff := cmp.Diff(tt.want, rep.Reasons); diff != "" {
			t.Errorf("%s: reasons (-want +got):\n%s", tt.name, diff)
		}
		if rep.Ready != (tt.want == nil) {
			t.Errorf("%s: ready %v", tt.name, rep.Ready)
		}
	}
}

// voidedJobSetup decides online for three customers (confirmed), then has
// a batch job of four customers fail after its decisions were committed
// (VoidJob), and advances the clock past every reward window and grace.
func voidedJobSetup(t *testing.T, fn func(*store.Settings)) *Engine {
	t.Helper()
	e, db := newTestEngine(t, 2, fn)
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "camp", Canal: "push", Descripcion: "d"}, t0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("online%02d", i), Canal: "push"})
		if err != nil {
			t.Fatal(err)
		}
		none := 0 // the caller's rule sent nothing
		if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true, AccionReal: &none}); err != nil {
			t.Fatal(err)
		}
	}
	bd, err := e.NewBatchDecider("acme", "job1", "camp")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := bd.Decide(fmt.Sprintf("batch%02d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := bd.Flush(); err != nil {
		t.Fatal(err)
	}
	bd.Close()
	if n, err := e.VoidJob("acme", "job1"); err != nil || n != 4 {
		t.Fatalf("VoidJob = %d, %v; want 4", n, err)
	}
	advance(t, db, 40*24*time.Hour)
	learnAll(t, e)
	return e
}

// TestShadowReportLeavesOutVoidedBatchDecisions: the decisions of a batch
// job that failed never reached the caller (VoidJob makes them rechazada,
// "lote fallido"). The shadow report must not count them as decisions the
// caller confirmed, nor compare them with a rule the caller never applied
// to them.
func TestShadowReportLeavesOutVoidedBatchDecisions(t *testing.T) {
	e := voidedJobSetup(t, func(s *store.Settings) { s.Shadow = true })
	rep, err := e.Evaluator.Shadow(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	got := []int{rep.Decisions, rep.Confirmed, rep.Compared, rep.RewardsFinal}
	if diff := cmp.Diff([]int{3, 3, 3, 3}, got); diff != "" {
		t.Errorf("decisions, confirmed, compared, final rewards (-want +got):\n%s", diff)
	}
}

// receivedCoupon is the n-th CUPON_RECIBIDO of customer c1 in these tests:
// coupon cupon1 received at ts, labelled with decisionID ("" for none).
func receivedCoupon(n int, ts time.Time, decisionID string) IngestEvent {
	ev := Event{ID: fmt.Sprintf("ev-%d", n), ClienteRef: "c1", TS: ts, Tipo: CuponRecibido, Clave: "cupon1",
		CuponEmitidoID: fmt.Sprintf("cup-%d", n), DecisionID: decisionID, Caducidad: ts.Add(7 * 24 * time.Hour)}
	return IngestEvent{Event: ev, Canonical: []byte(ev.ID)}
}

// TestShadowLabellingCountsCouponsSinceShadowOn: the shadow report's
// coupon-labelling share reads the coupons received from the moment shadow
// mode was switched on (Settings.ShadowSince), so a history of coupons sent
// before coupond (no decision_id), uploaded before or during shadow mode,
// does not hold the verdict back for good; switched on anew, it counts
// afresh. Without the shadow counters the share is 1 of 4.
func TestShadowLabellingCountsCouponsSinceShadowOn(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	n := 0
	coupon := func(ts time.Time, decisionID string) IngestEvent {
		n++
		return receivedCoupon(n, ts, decisionID)
	}
	ingest := func(evs ...IngestEvent) {
		t.Helper()
		if res, err := e.Ingester.Ingest("acme", evs); err != nil || res.Aceptados != len(evs) {
			t.Fatalf("ingest: %+v %v", res, err)
		}
	}
	labelled := func() [2]int64 {
		t.Helper()
		rep, err := e.Evaluator.Shadow(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		return [2]int64{rep.CouponsLabelled, rep.CouponsReceived}
	}
	d, err := e.Decide("acme", Request{ClienteRef: "c1", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	ingest(coupon(t0.Add(-30*24*time.Hour), ""), coupon(t0.Add(-20*24*time.Hour), "")) // the history, before
	advance(t, db, time.Hour)
	switchShadow(t, db, true)
	if diff := cmp.Diff([2]int64{0, 0}, labelled()); diff != "" {
		t.Errorf("before any coupon in shadow mode (-want +got):\n%s", diff)
	}
	since := t0.Add(time.Hour)
	ingest(coupon(since, d.DecisionID), coupon(t0.Add(-10*24*time.Hour), "")) // one sent now, one more of the history
	if diff := cmp.Diff([2]int64{1, 1}, labelled()); diff != "" {
		t.Errorf("a labelled coupon and an old unlabelled one (-want +got):\n%s", diff)
	}
	ingest(coupon(since.Add(time.Minute), ""))
	if diff := cmp.Diff([2]int64{1, 2}, labelled()); diff != "" {
		t.Errorf("an unlabelled coupon sent in shadow mode counts (-want +got):\n%s", diff)
	}
	switchShadow(t, db, false)
	ingest(coupon(since.Add(2*time.Minute), ""))
	advance(t, db, time.Hour)
	switchShadow(t, db, true)
	if diff := cmp.Diff([2]int64{0, 0}, labelled()); diff != "" {
		t.Errorf("switched on anew (-want +got):\n%s", diff)
	}
	ingest(coupon(since.Add(time.Hour), d.DecisionID))
	if diff := cmp.Diff([2]int64{1, 1}, labelled()); diff != "" {
		t.Errorf("the new period's first coupon (-want +got):\n%s", diff)
	}
}

// TestShadowLabellingOfATenantSwitchedOnBefore: a tenant switched on in
// shadow mode before the switch's time was recorded (Settings.ShadowSince
// zero) has coupons its quality record never counted in a shadow period:
// the report reads all the coupons received, as it did then, not "no
// coupon reported received yet" until new ones come. Fails if it reads
// the shadow counters.
func TestShadowLabellingOfATenantSwitchedOnBefore(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	d, err := e.Decide("acme", Request{ClienteRef: "c1", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	var evs []IngestEvent
	for i, id := range []string{d.DecisionID, d.DecisionID, ""} {
		evs = append(evs, receivedCoupon(i, t0, id))
	}
	// Ingested while the release before kept no shadow counters: as a
	// tenant whose switch has no time, ingested with shadow off.
	if res, err := e.Ingester.Ingest("acme", evs); err != nil || res.Aceptados != len(evs) {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	if _, err := db.UpdateTenant("acme", func(tn *store.Tenant) error { tn.Settings.Shadow = true; return nil }); err != nil {
		t.Fatal(err)
	}
	rep, err := e.Evaluator.Shadow(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([2]int64{2, 3}, [2]int64{rep.CouponsLabelled, rep.CouponsReceived}); diff != "" {
		t.Errorf("labelled, received (-want +got):\n%s", diff)
	}
}

// TestLabellingCountsCouponsSinceCreation: the labelling share of "admin
// tenant show" and the console (Quality.Labelled) counts the coupons whose
// ts is from the tenant's creation on: a history of coupons from before
// (no decision_id, as coupond never decided them) is left out. Without it
// the share is 1 of 3.
func TestLabellingCountsCouponsSinceCreation(t *testing.T) {
	e, _ := newTestEngine(t, 1, nil)
	d, err := e.Decide("acme", Request{ClienteRef: "c1", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	var evs []IngestEvent
	for i, c := range []struct {
		ts time.Time
		id string
	}{{t0.Add(-40 * 24 * time.Hour), ""}, {t0.Add(-time.Hour), ""}, {t0, d.DecisionID}} {
		evs = append(evs, receivedCoupon(i, c.ts, c.id))
	}
	if _, err := e.Ingester.Ingest("acme", evs); err != nil {
		t.Fatal(err)
	}
	q, err := e.Ingester.Quality("acme")
	if err != nil {
		t.Fatal(err)
	}
	n, of := q.Labelled()
	if diff := cmp.Diff([2]int64{1, 1}, [2]int64{n, of}); diff != "" {
		t.Errorf("labelled of received since creation (-want +got):\n%s", diff)
	}
}

// TestShadowVerdictOfATenantSwitchedOff: once the tenant has left shadow
// mode, the report on its shadow decisions says so before the verdict
// ("not ready to leave shadow mode" read as if it were still in it, while
// its engine values moved with the model learned live: the proof audit
// saw the engine's lead go from -0.75 to +1.79 MXN after going live).
func TestShadowVerdictOfATenantSwitchedOff(t *testing.T) {
	e, db := newTestEngine(t, 2, func(s *store.Settings) { s.Shadow = true })
	d, err := e.Decide("acme", Request{ClienteRef: "c0000001", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	none := 0
	if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true, AccionReal: &none}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, shadow := range []bool{true, false} {
		if _, err := db.UpdateTenant("acme", func(t *store.Tenant) error { t.Settings.Shadow = shadow; return nil }); err != nil {
			t.Fatal(err)
		}
		rep, err := e.Evaluator.Shadow(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rep.Verdict)
	}
	want := []string{"not ready to leave shadow mode", "shadow mode is off; its decisions read with the current model: not ready to leave shadow mode"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts, shadow on then off (-want +got):\n%s", diff)
	}
}

// TestShadowReportCountsTheLastPeriod: the shadow report reads the
// decisions of the last shadow period, from the moment shadow mode was
// last switched on, as it reads the coupons received (Quality's shadow
// counters start afresh then): switched off and on again, the earlier
// period's decisions are not counted beside the new period's coupons, and
// its unconfirmed decisions do not hold the confirmed share down. Without
// it the report counts 3 decisions, 1 confirmed.
func TestShadowReportCountsTheLastPeriod(t *testing.T) {
	e, db := newTestEngine(t, 3, nil)
	decide := func(ref string) *Decision {
		t.Helper()
		d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push"})
		if err != nil || !d.EnSombra {
			t.Fatalf("decide %s: %+v %v", ref, d, err)
		}
		return d
	}
	switchShadow(t, db, true)
	decide("c0000001") // the first period's, never confirmed
	decide("c0000002")
	switchShadow(t, db, false)
	advance(t, db, time.Hour)
	switchShadow(t, db, true)
	d := decide("c0000003")
	if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true, AccionReal: &d.Accion}); err != nil {
		t.Fatal(err)
	}
	rep, err := e.Evaluator.Shadow(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 1}, []int{rep.Decisions, rep.Confirmed}); diff != "" {
		t.Errorf("decisions, confirmed of the last period (-want +got):\n%s", diff)
	}
}

// switchShadow switches acme's shadow mode on or off as admin tenant set
// does: switched on from off, ShadowSince is the tenant's clock.
func switchShadow(t *testing.T, db *store.DB, on bool) {
	t.Helper()
	if _, err := db.UpdateTenant("acme", func(tn *store.Tenant) error {
		if on && !tn.Settings.Shadow {
			tn.Settings.ShadowSince = tn.ClockNow
		}
		tn.Settings.Shadow = on
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
