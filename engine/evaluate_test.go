package engine

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEvaluateLeavesOutShadowDecisions: in shadow mode the caller applies
// its own rule, so a shadow decision is ejecutada only where that rule
// happened to agree with the engine's draw; its logged propensity is not the
// probability of what was done, and importance weighting it would bias
// every estimate. Shadow decisions are counted as left out, and the logged
// behaviour is measured without them.
func TestEvaluateLeavesOutShadowDecisions(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	x := make([]float64, VectorDim)
	b := e.db.NewBatch()
	for i := 0; i < 30; i++ {
		reward := int64(1000) // 10 MXN
		r := &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i), At: t0, Accion: i % 3, Propension: 1.0 / 3,
			X: x, Candidates: []int{0, 1, 2}, Probs: []float64{1. / 3, 1. / 3, 1. / 3}, Priors: []float64{0, 0, 0},
			Estado: EstadoEjecutada, Recompensa: &reward}
		if i >= 20 {
			r.EnSombra = true
			*r.Recompensa = 9000 // 90 MXN
		}
		putDecision(b, "acme", r)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	ev, err := e.Evaluator.Evaluate("acme", EvalOptions{Replicates: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"shadow": 10}, ev.Excluded); diff != "" {
		t.Errorf("excluded (-want +got):\n%s", diff)
	}
	if ev.Records != 20 || ev.Logged.N != 20 || ev.Logged.Mean != 10 {
		t.Errorf("records %d, logged behaviour %+v; want 20 records at 10 MXN", ev.Records, ev.Logged)
	}
}
