package engine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestScoreXMatchesPredict checks that scoring once per customer (scoreX)
// gives exactly what scoring each action on its own (predict) gives.
func TestScoreXMatchesPredict(t *testing.T) {
	m := newPolicyModel()
	rng := rand.New(rand.NewPCG(1, 2))
	x := func() []float64 {
		v := make([]float64, VectorDim)
		v[0] = 1
		for i := 1; i < VectorDim; i++ {
			v[i] = rng.Float64()
		}
		return v
	}
	for i := 0; i < 300; i++ {
		m.update(x(), i%3, 5000+3000*rng.NormFloat64(), 4000)
	}
	pm := &publishedModel{m: m}
	xs := x()
	cands := []candidate{{id: 0, prior: 4000}, {id: 1, prior: 4500}, {id: 2, prior: 3900}, {id: 7, prior: 4200}}
	sc := pm.scoreX(xs, cands)
	for _, c := range sc.cands {
		mu, sigma := m.predict(xs, c.id, c.prior)
		if mu != c.mu || sigma != c.sigma {
			t.Errorf("action %d: scoreX (%v, %v), predict (%v, %v)", c.id, c.mu, c.sigma, mu, sigma)
		}
	}
}

// TestNewActionUncertaintyFollowsEvidence checks the empirical-Bayes
// variance of an action without data: the ridge prior's before any data,
// smaller once the supported actions show effects that are small next to
// the noise (no optimism burst for a new coupon), never larger than the
// prior, and still positive so the new action is explored.
func TestNewActionUncertaintyFollowsEvidence(t *testing.T) {
	m := newPolicyModel()
	if got, want := m.newEffectVar(), m.noise()/effectRidge; got != want {
		t.Fatalf("without data: τ² = %v, want the ridge prior %v", got, want)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([][]float64, 2000)
	for i := range xs {
		v := make([]float64, VectorDim)
		v[0] = 1
		for j := 1; j < VectorDim; j++ {
			v[j] = rng.Float64()
		}
		xs[i] = v
	}
	// Rewards that do not depend on the action: every effect is zero.
	for i, x := range xs {
		m.update(x, i%4, 10000+5000*rng.NormFloat64(), 9000)
	}
	prior := m.noise() / effectRidge
	tau2 := m.newEffectVar()
	if m.newVar != tau2 {
		t.Errorf("cached τ² %v after updates, computed %v", m.newVar, tau2)
	}
	if !(tau2 > 0 && tau2 < 0.5*prior) {
		t.Errorf("actions without effects: τ² = %v, want in (0, %v)", tau2, 0.5*prior)
	}
	_, sNew := m.predict(xs[0], 99, 9000)
	if !(sNew > 0) {
		t.Errorf("a new action has σ = %v; it must keep some uncertainty", sNew)
	}
	var buf [basisDim]float64
	phi := basis(xs[0], &buf)
	full := m.scale() * math.Sqrt(m.noise()*dot(phi, phi)/effectRidge)
	if sNew >= full {
		t.Errorf("a new action has σ = %v, not below the ridge prior's %v", sNew, full)
	}
}
