package policy

import (
	"math"
	"slices"
	"testing"
)

// TestCovarianceMatchesDenseSandwich checks the arrow-shaped algebra of
// fit against the dense sandwich A⁻¹(M + vΛ)A⁻¹ of the whole system: each
// action's Var(δₐ), the pooled coupon effect's block Var(β_shared), its
// covariance with each action's δₐ, a customer's Sigma (the whole effect's
// standard error) and the cross-covariance of two actions.
func TestCovarianceMatchesDenseSandwich(t *testing.T) {
	w := newWorld(5, 600, []simAction{
		{id: 1, cat: 0, costCents: 1000, prior: func(*simCust) float64 { return 500 }, lift: func(*simCust) float64 { return 0.05 }},
		{id: 2, cat: 1, costCents: 3000, prior: func(*simCust) float64 { return -800 }, lift: func(*simCust) float64 { return 0.02 }},
	})
	m := New(DefaultConfig())
	for i, sc := range w.custs {
		arms := w.arms(sc)
		a := &arms[i%len(arms)]
		m.Fold(&sc.c, a, w.draw(sc, a.ID), 0.5+float64(i%3)/2)
	}
	m.Refit()
	const D, E = dimBase, dimEffect
	ids := m.armIDs()
	n := D + len(ids)*E
	a, mt := make([]float64, n*n), make([]float64, n*n)
	v := m.noise()
	lb, le := m.lambdas(v)
	put := func(dst, src []float64, r0, c0, rows, cols int) {
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				dst[(r0+i)*n+c0+j] += src[i*cols+j]
				if r0 != c0 {
					dst[(c0+j)*n+r0+i] += src[i*cols+j]
				}
			}
		}
	}
	put(a, m.phi, 0, 0, D, D)
	put(mt, m.mPhi, 0, 0, D, D)
	for i := 0; i < D; i++ {
		a[i*n+i] += lb[i]
		mt[i*n+i] += v * lb[i]
	}
	for k, id := range ids {
		st, o := m.arms[id], D+k*E
		put(a, st.c, 0, o, D, E)
		put(a, st.psi, o, o, E, E)
		put(mt, st.mC, 0, o, D, E)
		put(mt, st.mPsi, o, o, E, E)
		for i := 0; i < E; i++ {
			a[(o+i)*n+o+i] += le[i]
			mt[(o+i)*n+o+i] += v * le[i]
		}
	}
	ai := invSPD(a, n)
	cov := mul(mul(ai, mt, n, n, n), ai, n, n, n)
	at := func(i, j int) float64 { return cov[i*n+j] }
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*(1+math.Abs(want)) {
			t.Errorf("%s: arrow %g, dense %g", what, got, want)
		}
	}
	for k, id := range ids {
		st, o := m.arms[id], D+k*E
		for i := 0; i < E; i++ {
			for j := 0; j < E; j++ {
				near("Var(δ)", st.cov[i*E+j], at(o+i, o+j))
			}
		}
	}
	for i := 0; i < nShared; i++ {
		for j := 0; j < nShared; j++ {
			near("Var(β_shared)", m.sharedCov[i*nShared+j], at(phiShared+i, phiShared+j))
		}
	}
	for k, id := range ids {
		st, o := m.arms[id], D+k*E
		for i := 0; i < nShared; i++ {
			for j := 0; j < E; j++ {
				near("Cov(β_shared, δ)", st.shX[i*E+j], at(phiShared+i, o+j))
			}
		}
	}
	// A customer's Sigma is the standard error of the whole effect, pooled
	// part plus own part: gᵀ·Cov·g with g the effect's gradient.
	sc := w.custs[0]
	arms := w.arms(sc)
	scores := make([]Score, len(arms))
	m.Score(&sc.c, arms, scores)
	for _, s := range scores {
		if s.ID == 0 {
			continue
		}
		k := slices.Index(ids, s.ID)
		g := make([]float64, n)
		copy(g[phiShared:], s.sh[:])
		copy(g[D+k*E:], s.psi[:])
		sigma := m.Sigma(&s)
		near("Sigma²", sigma*sigma, quad(cov, g, n))
		if !(s.Width > 0) {
			t.Errorf("arm %d: Width %g", s.ID, s.Width)
		}
	}
	// An EffectSum over many customers' effects: gᵀ·Cov·g with g the
	// sum of the weighted gradients (the customers share the errors).
	es, g := effectSumOf(m, w, ids, n)
	se := m.SE(&es)
	near("EffectSum SE²", se*se, quad(cov, g, n))
	c := m.cross[[2]int{ids[0], ids[1]}]
	for i := 0; i < E; i++ {
		for j := 0; j < E; j++ {
			near("Cov(δ₁, δ₂)", c[i*E+j], at(D+i, D+E+j))
		}
	}
}

// effectSumOf adds the effects of w's first 40 customers with varied
// coefficients to an EffectSum and returns it with the gradient of that
// sum over the n coefficients of the dense system (the pooled block at
// phiShared, action ids[k]'s at dimBase+k·dimEffect).
func effectSumOf(m *Model, w *world, ids []int, n int) (EffectSum, []float64) {
	const D, E = dimBase, dimEffect
	var es EffectSum
	g := make([]float64, n)
	for i, sc := range w.custs[:40] {
		arms := w.arms(sc)
		scores := make([]Score, len(arms))
		m.Score(&sc.c, arms, scores)
		for j := range scores {
			s := &scores[j]
			if s.ID == 0 {
				continue
			}
			cf := float64(i%5)/4 - 0.3*float64(j)
			es.Add(s, cf)
			k := slices.Index(ids, s.ID)
			for q := range s.sh {
				g[phiShared+q] += cf * s.sh[q]
			}
			for q := range s.psi {
				g[D+k*E+q] += cf * s.psi[q]
			}
		}
	}
	return es, g
}

// TestSigmaIsOfTheOrderOfTheData: one coupon with the same lift for every
// customer, sent to half of 8,000 at random. A typical customer's Sigma is
// then of the order of the plain standard error of the difference between
// the two groups' mean rewards (between half and 2.5 times it), however
// many pooled and own terms the model spreads the effect over. Without the
// covariance of the pooled and own parts (Width's basis) it is 3.2 times.
func TestSigmaIsOfTheOrderOfTheData(t *testing.T) {
	act := simAction{id: 1, cat: -1, costCents: 500,
		prior: func(*simCust) float64 { return 0 },
		lift:  func(*simCust) float64 { return 0.05 }}
	w := newWorld(9, 8000, []simAction{act})
	m := New(DefaultConfig())
	var sent float64
	for i, sc := range w.custs {
		arms := w.arms(sc)
		a := &arms[i%2]
		sent += float64(a.ID)
		m.Fold(&sc.c, a, w.draw(sc, a.ID), 1)
	}
	m.Refit()
	plain := math.Sqrt(m.noise() * (1/sent + 1/(m.n-sent)))
	var sigmas, widths []float64
	for _, sc := range w.custs[:500] {
		arms := w.arms(sc)
		scores := make([]Score, len(arms))
		m.Score(&sc.c, arms, scores)
		sigmas, widths = append(sigmas, m.Sigma(&scores[1])), append(widths, scores[1].Width)
	}
	slices.Sort(sigmas)
	slices.Sort(widths)
	s, wd := sigmas[len(sigmas)/2], widths[len(widths)/2]
	t.Logf("plain SE %.0f cents; median Sigma %.0f, median Width %.0f", plain, s, wd)
	if s < plain/2 || s > 2.5*plain {
		t.Errorf("median Sigma %.0f cents, want within 0.5–2.5 times the plain standard error %.0f", s, plain)
	}
}
