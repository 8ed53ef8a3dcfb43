package engine

import (
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
			"0 final rewards (needs at least 200 for a comparison)",
			"no coupon reported received yet (CUPON_RECIBIDO events, each with its decision_id)",
			"no shadow decisions yet",
		}},
		{"unconfirmed and unlabelled", ShadowReport{Decisions: 10, Confirmed: 5, CouponsReceived: 4, CouponsLabelled: 1, RewardsFinal: 10}, []string{
			"10 final rewards (needs at least 200 for a comparison)",
			"only 25.0% of coupons carry a decision_id (needs at least 95%)",
			"only 50.0% of decisions confirmed (needs at least 95%)",
		}},
		{"one final reward", ShadowReport{Decisions: 1, Confirmed: 1, CouponsReceived: 1, CouponsLabelled: 1, RewardsFinal: 1}, []string{
			"1 final reward (needs at least 200 for a comparison)",
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
	rep, err := e.Evaluator.Shadow("acme")
	if err != nil {
		t.Fatal(err)
	}
	got := []int{rep.Decisions, rep.Confirmed, rep.Compared, rep.RewardsFinal}
	if diff := cmp.Diff([]int{3, 3, 3, 3}, got); diff != "" {
		t.Errorf("decisions, confirmed, compared, final rewards (-want +got):\n%s", diff)
	}
}
