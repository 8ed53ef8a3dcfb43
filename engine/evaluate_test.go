package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/coupond/coupond/store"
)

// TestEvaluateLeavesOutShadowDecisions: in shadow mode the caller applies
// its own rule, so a shadow decision is ejecutada only where that rule
// happened to agree with the engine's draw; its logged propensity is not the
// probability of what was done, and importance weighting it would bias
// every estimate. Shadow decisions are counted as left out, and the logged
// behaviour is measured without them.
// evaluateRecords stores n decision records of tenant acme, record(i)
// each, and evaluates acme's log (10 replicates, seed 1).
func evaluateRecords(t *testing.T, e *Engine, n int, record func(i int) *DecisionRecord) *Evaluation {
	t.Helper()
	b := e.db.NewBatch()
	for i := 0; i < n; i++ {
		putDecision(b, "acme", record(i), nil)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	ev, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Replicates: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestEvaluateLeavesOutShadowDecisions(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	x := make([]float64, VectorDim)
	ev := evaluateRecords(t, e, 30, func(i int) *DecisionRecord {
		reward := int64(1000) // 10 MXN
		r := &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i), At: t0, Accion: i % 3, Propension: 1.0 / 3,
			X: x, Candidates: []int{0, 1, 2}, Probs: []float64{1. / 3, 1. / 3, 1. / 3}, Priors: []float64{0, 0, 0},
			Estado: EstadoEjecutada, Recompensa: &reward}
		if i >= 20 {
			r.EnSombra = true
			*r.Recompensa = 9000 // 90 MXN
		}
		return r
	})
	if diff := cmp.Diff(map[string]int{"shadow": 10}, ev.Excluded); diff != "" {
		t.Errorf("excluded (-want +got):\n%s", diff)
	}
	if ev.Records != 20 || ev.Logged.N != 20 || ev.Logged.Mean != 10 {
		t.Errorf("records %d, logged behaviour %+v; want 20 records at 10 MXN", ev.Records, ev.Logged)
	}
}

// shadowLift tallies n shadow decisions of one customer profile for whom
// the caller's rule sent nothing (accion_real 0) and the engine, on its
// economic prior, would send coupon 1 (its effect never measured), with
// rewards spread ±50 MXN around the model's never-send value; it returns
// the report and the engine's probability and standard error (MXN) of
// coupon 1's effect for that customer.
func shadowLift(t *testing.T, n int) (rep *ShadowReport, p1, sigma1 float64) {
	t.Helper()
	e, _ := newTestEngine(t, 2, nil)
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	rep = &ShadowReport{CouponsReceived: 100, CouponsLabelled: 100, Reasons: []string{}}
	tally := &shadowTally{rep: rep, pm: ts.model.Load()}
	x := make([]float64, VectorDim)
	none := 0
	for i := 0; i < n; i++ {
		r := &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i), At: t0, Accion: 1, Propension: 0.5,
			X: x, Candidates: []int{0, 1}, Probs: []float64{0.5, 0.5}, Priors: []float64{1000, 4000},
			Estado: EstadoModificada, AccionReal: &none, EnSombra: true}
		sc := tally.pm.scoreRecord(r)
		probs, _ := tally.pm.distribution(sc)
		p1, sigma1 = probs[1], sc.sigma(1)/100
		reward := int64(math.Round(sc.cands[0].mu)) + 5000*int64(1-2*(i%2))
		r.Recompensa = &reward
		tally.add(marshalRecord(r))
	}
	tally.finish()
	rep.judge()
	if rep.RewardsFinal != n || !(rep.Lift.Mean > 0) || !(p1 > 0) {
		t.Fatalf("setup: %d rewards, lift %+v, P(coupon 1) %v", rep.RewardsFinal, rep.Lift, p1)
	}
	return rep, p1, sigma1
}

// TestShadowLiftCarriesTheModelsError: in shadow mode the caller's rule
// decides, so the engine's value where it departs from the rule is its
// model's estimate, never measured; here coupon 1's effect is the
// economic prior's. That estimate's error is the same for every customer
// like these: the lift's interval must hold at least P(coupon 1) times
// its standard error on either side however many decisions there are,
// and must not shrink with them as the rewards' noise does; a lead
// inside it is no proof (not ready).
func TestShadowLiftCarriesTheModelsError(t *testing.T) {
	few, p1, sigma1 := shadowLift(t, 250)
	many, _, _ := shadowLift(t, 25000)
	for _, rep := range []*ShadowReport{few, many} {
		half := (rep.Lift.Hi - rep.Lift.Lo) / 2
		if want := 1.96 * p1 * sigma1; !(half >= want*(1-1e-9)) {
			t.Errorf("%d decisions: lift %.2f ± %.2f MXN; the model's error alone is ± %.2f", rep.RewardsFinal, rep.Lift.Mean, half, want)
		}
		if rep.Ready != (rep.Lift.Lo > 0) {
			t.Errorf("%d decisions: ready %v with the lift's interval [%.2f, %.2f]", rep.RewardsFinal, rep.Ready, rep.Lift.Lo, rep.Lift.Hi)
		}
	}
	if a, b := few.Lift.Hi-few.Lift.Lo, many.Lift.Hi-many.Lift.Lo; b < 0.9*a {
		t.Errorf("the lift's interval shrank from %.2f to %.2f MXN with 100 times the decisions: the model's error does not average out", a, b)
	}
	if many.Ready {
		t.Errorf("ready on the prior's estimate: %s", many.Verdict)
	}
}

// TestEvaluateSkipsARecordWithAnImpossiblePropensity: a decision record
// that decodes but logs a propensity no draw can have (0, above 1, or so
// small its importance weight is beyond float64) is damage: the evaluation
// leaves it out and counts it, and every other figure stays finite, instead
// of failing as a whole or reporting +Inf.
func TestEvaluateSkipsARecordWithAnImpossiblePropensity(t *testing.T) {
	for _, tt := range []struct {
		p   float64
		why string
	}{{0, "invalid_propensity"}, {-0.25, "invalid_propensity"}, {1.5, "invalid_propensity"}, {1e-320, "weight_out_of_range"}, {1e-200, "weight_out_of_range"}} {
		p := tt.p
		t.Run(fmt.Sprint(p), func(t *testing.T) {
			e, _ := newTestEngine(t, 2, nil)
			x := make([]float64, VectorDim)
			b := e.db.NewBatch()
			for i := 0; i < 30; i++ {
				reward := int64(1000 + 100*i)
				r := &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i), At: t0, Accion: i % 3, Propension: 1.0 / 3,
					X: x, Candidates: []int{0, 1, 2}, Probs: []float64{1. / 3, 1. / 3, 1. / 3}, Priors: []float64{0, 0, 0},
					Estado: EstadoEjecutada, Recompensa: &reward}
				if i == 5 {
					r.Propension = p
				}
				putDecision(b, "acme", r, nil)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			ev, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Replicates: 10, Seed: 1})
			if err != nil {
				t.Fatalf("one record with propensity %v stopped the evaluation: %v", p, err)
			}
			if diff := cmp.Diff(map[string]int{tt.why: 1}, ev.Excluded); diff != "" {
				t.Errorf("excluded (-want +got):\n%s", diff)
			}
			if ev.Records != 29 || ev.Logged.N != 29 {
				t.Errorf("records %d, logged %d; want 29", ev.Records, ev.Logged.N)
			}
			for _, pv := range ev.Policies {
				for _, f := range []float64{pv.IPS.Value, pv.IPS.Lo, pv.IPS.Hi, pv.SNIPS.Value, pv.DR.Value, pv.DR.Lo, pv.DR.Hi, pv.ESS, pv.MaxWeight, pv.MeanWeight} {
					if math.IsInf(f, 0) {
						t.Errorf("%s: an infinite figure: %+v", pv.Policy, pv)
						break
					}
				}
			}
		})
	}
}

// TestEvaluateLeavesOutVoidedControlDecisions: a control-group decision of
// a batch job that failed never reached the caller and released its
// customer's reward window (VoidJob); its window's purchases are no
// measure of the control group. The control group's value counts the
// three delivered control decisions only, and the voided ones are counted
// as left out.
func TestEvaluateLeavesOutVoidedControlDecisions(t *testing.T) {
	e := voidedJobSetup(t, func(s *store.Settings) { s.ControlShare = 1 })
	ev, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Replicates: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Control.N != 3 {
		t.Errorf("control group n = %d, want 3 (the voided batch decisions left out)", ev.Control.N)
	}
	if diff := cmp.Diff(map[string]int{"voided_batch": 4}, ev.Excluded); diff != "" {
		t.Errorf("excluded (-want +got):\n%s", diff)
	}
}

// TestCallerRejectionInVoidWordsIsNoVoid: a batch decision the caller
// confirms as rejected, with motivo_rechazo in the very words VoidJob
// writes, is the caller's rejection, not a void: the evaluation leaves it
// out as rechazada, not voided_batch (the void was recognised by that
// text, which a caller can send).
func TestCallerRejectionInVoidWordsIsNoVoid(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "camp", Canal: "push", Descripcion: "d"}, t0); err != nil {
		t.Fatal(err)
	}
	bd, err := e.NewBatchDecider("acme", "job1", "camp")
	if err != nil {
		t.Fatal(err)
	}
	d, err := bd.Decide("batch00", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := bd.Flush(); err != nil {
		t.Fatal(err)
	}
	bd.Close()
	if _, err := e.Confirm("acme", d.DecisionID, Confirmation{MotivoRechazo: "lote fallido: la decisión no se entregó"}); err != nil {
		t.Fatal(err)
	}
	advance(t, db, 40*24*time.Hour)
	learnAll(t, e)
	ev, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Replicates: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"rechazada": 1}, ev.Excluded); diff != "" {
		t.Errorf("excluded (-want +got):\n%s", diff)
	}
}

// TestEvaluateStopsWithItsContext: admin evaluate stops once its ctx ends
// (the admin client interrupted, serve stopping) instead of reading the
// whole decision log: run inside serve, an interrupted evaluation went on
// to its end, audited as exit 0.
func TestEvaluateStopsWithItsContext(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	x := make([]float64, VectorDim)
	b := e.db.NewBatch()
	const n = 3 * evalChunkSize
	for i := range n {
		reward := int64(1000)
		putDecision(b, "acme", &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i), At: t0, Accion: i % 3,
			Propension: 1.0 / 3, X: x, Candidates: []int{0, 1, 2}, Probs: []float64{1. / 3, 1. / 3, 1. / 3}, Priors: []float64{0, 0, 0},
			Estado: EstadoEjecutada, Recompensa: &reward}, nil)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ev, err := e.Evaluator.Evaluate(ctx, "acme", EvalOptions{Replicates: 10, Seed: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("evaluate with its ctx ended: %v (records %v), want context.Canceled", err, ev != nil && ev.Records > 0)
	}
	if ev, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Replicates: 10, Seed: 1}); err != nil || ev.Records != n {
		t.Errorf("evaluate: %v; want all %d records", err, n)
	}
}

// TestEvaluateGivesNoEstimateForACouponNeverSent: a coupon added to the
// catalog after the decisions (3), or a candidate the log never shows sent
// (2), has no estimate (n/a, effective sample size 0), as the README
// says: "always id" sends nothing where id is not a candidate, so its
// records were never-send's, and their value under the coupon's name
// (which the console may call the best single coupon) passed for what the
// coupon earns. The coupons sent keep their estimates.
func TestEvaluateGivesNoEstimateForACouponNeverSent(t *testing.T) {
	e, _ := newTestEngine(t, 3, nil)
	x := make([]float64, VectorDim)
	ev := evaluateRecords(t, e, 40, func(i int) *DecisionRecord {
		reward := int64(1000 + 100*(i%7))
		r := &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i), At: t0, Accion: []int{0, 1}[i%2], Propension: 0.5,
			X: x, Candidates: []int{0, 1}, Probs: []float64{0.5, 0.5}, Priors: []float64{0, 0}, Estado: EstadoEjecutada, Recompensa: &reward}
		if i%4 == 0 { // coupon 2 a candidate, never drawn
			r.Candidates, r.Probs, r.Priors = []int{0, 1, 2}, []float64{0.5, 0.5, 0}, []float64{0, 0, 0}
		}
		return r
	})
	got := map[string]string{}
	for _, p := range ev.Policies {
		got[p.Policy] = fmt.Sprintf("ESS %.0f, DR %v, IPS %v, SNIPS %v", p.ESS, !math.IsNaN(p.DR.Value), !math.IsNaN(p.IPS.Value), !math.IsNaN(p.SNIPS.Value))
	}
	want := map[string]string{
		"current_policy":  got["current_policy"],
		"never_send":      "ESS 20, DR true, IPS true, SNIPS true",
		"always_1_cupon1": "ESS 20, DR true, IPS true, SNIPS true",
		"always_2_cupon2": "ESS 0, DR false, IPS false, SNIPS false",
		"always_3_cupon3": "ESS 0, DR false, IPS false, SNIPS false",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("estimates (-want +got):\n%s", diff)
	}
}

// TestControlGroupIntervalCountsCustomers: the control group is a stable
// set of customers decided again each reward window, read against the
// policy's value over the other customers, so its interval counts each
// customer as one draw. Ten customers worth 0, 10, … 90 MXN, five
// decisions each with the same reward: the mean is 45 and the
// cluster-robust standard error √(10/9·25·8250)/50 = 9.57 (a half-width
// of 18.77); over the 50 decisions as if independent it was 4.10 (8.04).
func TestControlGroupIntervalCountsCustomers(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	ev := evaluateRecords(t, e, 50, func(i int) *DecisionRecord {
		reward := int64(1000 * (i % 10))
		return &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i%10), At: t0.Add(time.Duration(i/10) * 31 * 24 * time.Hour),
			Propension: 1, EnControl: true, Estado: EstadoPendiente, Recompensa: &reward}
	})
	half := 1.96 * math.Sqrt(10.0/9*25*8250) / 50
	want := MeasuredValue{N: 50, Mean: 45, Lo: 45 - half, Hi: 45 + half}
	if diff := cmp.Diff(want, ev.Control, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("control group (-want +got):\n%s", diff)
	}
}
