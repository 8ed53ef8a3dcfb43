package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// randomVector is a customer vector with bias 1 and uniform values in
// [0, 1) elsewhere.
func randomVector(rng *rand.Rand) []float64 {
	v := make([]float64, VectorDim)
	v[0] = 1
	for i := 1; i < VectorDim; i++ {
		v[i] = rng.Float64()
	}
	return v
}

// TestScoreXMatchesPredict checks that scoring once per customer (scoreX)
// gives exactly what scoring each action on its own (predict) gives.
func TestScoreXMatchesPredict(t *testing.T) {
	m := newPolicyModel()
	rng := rand.New(rand.NewPCG(1, 2))
	x := func() []float64 { return randomVector(rng) }
	for i := 0; i < 300; i++ {
		m.update(x(), i%3, 5000+3000*rng.NormFloat64(), 4000, 1)
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
		xs[i] = randomVector(rng)
	}
	// Rewards that do not depend on the action: every effect is zero.
	for i, x := range xs {
		m.update(x, i%4, 10000+5000*rng.NormFloat64(), 9000, 1)
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

// TestQuadMatchesFullProduct checks the symmetric quadratic form against
// the sum of all D² products in index order (within 1e-12 relative), on
// ridges before and after Sherman–Morrison updates, which must keep A⁻¹
// symmetric bit for bit.
func TestQuadMatchesFullProduct(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	vec := func(zeros int) []float64 {
		v := make([]float64, basisDim)
		for i := zeros; i < basisDim; i++ {
			v[i] = rng.NormFloat64()
		}
		return v
	}
	trained := func(n int) *ridge {
		r := newRidge(effectRidge)
		for i := 0; i < n; i++ {
			r.update(vec(0), rng.NormFloat64())
		}
		return r
	}
	full := func(r *ridge, x []float64) float64 {
		var q float64
		for i := range x {
			var row float64
			for j := range x {
				row += r.Ainv[i*basisDim+j] * x[j]
			}
			q += x[i] * row
		}
		return q
	}
	tests := []struct {
		name string
		r    *ridge
		x    []float64
	}{
		{"prior", newRidge(modelRidge), vec(0)},
		{"one update", trained(1), vec(0)},
		{"many updates", trained(500), vec(0)},
		{"sparse vector", trained(500), vec(basisDim - 3)},
		{"zero vector", trained(50), vec(basisDim)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < basisDim; i++ {
				for j := 0; j < i; j++ {
					if a, b := tc.r.Ainv[i*basisDim+j], tc.r.Ainv[j*basisDim+i]; math.Float64bits(a) != math.Float64bits(b) {
						t.Fatalf("A⁻¹[%d][%d] = %v, A⁻¹[%d][%d] = %v: not symmetric", i, j, a, j, i, b)
					}
				}
			}
			got, want := tc.r.quad(tc.x), full(tc.r, tc.x)
			if math.Abs(got-want) > 1e-12*math.Abs(want) {
				t.Errorf("quad = %v, full product = %v (relative difference %.3g)", got, want, math.Abs(got-want)/math.Abs(want))
			}
		})
	}
}

// TestLearnWeight checks the importance weight of a record's reward:
// (1/(K·p))^½, 1 for a draw as likely as uniform, bounded by the floor, 1
// when there is no logged distribution.
func TestLearnWeight(t *testing.T) {
	cases := []struct {
		name  string
		p     float64
		cands int
		want  float64
	}{
		{"as likely as uniform", 0.25, 4, 1},
		{"explored at a quarter of uniform", 1.0 / 16, 4, 2},
		{"exploited", 0.9, 4, 1 / math.Sqrt(3.6)},
		{"at the floor", modelFloor / 4, 4, math.Sqrt(1 / modelFloor)},
		{"only candidate", 1, 1, 1},
		{"no candidates logged", 1, 0, 1},
		{"no propensity", 0, 4, 1},
		{"damaged propensity", 1.5, 4, 1},
		{"NaN propensity", math.NaN(), 4, 1},
	}
	var got, want []string
	for _, c := range cases {
		r := &DecisionRecord{Propension: c.p, Candidates: make([]int, c.cands)}
		got = append(got, fmt.Sprintf("%s: %.12f", c.name, r.learnWeight()))
		want = append(want, fmt.Sprintf("%s: %.12f", c.name, c.want))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("learnWeight (-want +got):\n%s", d)
	}
}

// TestUpdateWeighsTheActionsRegression checks that a sample of weight w
// enters the action's precision matrix as w·φφᵀ (Sherman–Morrison from
// λₑI: φᵀAₐ⁻¹φ = q/(1 + w·q), q = |φ|²/λₑ) and counts once in the shared
// baseline whatever its weight.
func TestUpdateWeighsTheActionsRegression(t *testing.T) {
	x := make([]float64, VectorDim)
	x[0], x[3], x[17] = 1, 0.4, 0.7
	var buf [basisDim]float64
	phi := basis(x, &buf)
	q := dot(phi, phi) / effectRidge
	for _, w := range []float64{0.5, 1, 4} {
		m := newPolicyModel()
		m.update(x, 2, 15000, 9000, w)
		if got, want := m.arms[2].quad(phi), q/(1+w*q); math.Abs(got-want) > 1e-12*want {
			t.Errorf("w=%v: φᵀAₐ⁻¹φ = %v, want %v", w, got, want)
		}
		q0 := dot(phi, phi) / modelRidge
		if got, want := m.shared.quad(phi), q0/(1+q0); math.Abs(got-want) > 1e-12*want {
			t.Errorf("w=%v: shared φᵀA⁻¹φ = %v, want %v (one sample, unweighted)", w, got, want)
		}
	}
}

// TestExplorationIgnoresMoneyScale checks that the exploration rule does
// not depend on the tenant's money scale: the same history in cents and
// scaled by 100 or by 1/100 (priors and rewards alike) gives the same
// probabilities, up to rounding (the scale's pseudo-data are gone after 40
// rewards).
func TestExplorationIgnoresMoneyScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	type sample struct {
		x             []float64
		action        int
		reward, prior float64
	}
	hist := make([]sample, 3000)
	for i := range hist {
		x := randomVector(rng)
		a := rng.IntN(3)
		effect := []float64{0, 800 * (x[4] - 0.5), -600 * x[12]}[a]
		hist[i] = sample{x, a, 5000 + 2000*x[4] + effect + 3000*rng.NormFloat64(), 4000 + 100*float64(a)}
	}
	probe := make([][]float64, 50)
	for i := range probe {
		probe[i] = randomVector(rng)
	}
	probsAt := func(k float64) [][]float64 {
		m := newPolicyModel()
		for _, s := range hist {
			m.update(s.x, s.action, k*s.reward, k*s.prior, 1)
		}
		pm := &publishedModel{m: m}
		var out [][]float64
		for _, x := range probe {
			sc := pm.scoreX(x, []candidate{{id: 0, prior: k * 4000}, {id: 1, prior: k * 4100}, {id: 2, prior: k * 4200}})
			p, _ := pm.distribution(sc)
			out = append(out, p)
		}
		return out
	}
	want := probsAt(1)
	for _, k := range []float64{100, 0.01} {
		got := probsAt(k)
		var worst float64
		for i := range got {
			for j := range got[i] {
				worst = math.Max(worst, math.Abs(got[i][j]-want[i][j]))
			}
		}
		if worst > 1e-9 {
			t.Errorf("money scale ×%v: probabilities differ by up to %.4f from the same history in cents", k, worst)
		}
	}
}

// TestReadsOlderModels checks that models stored by earlier versions are
// read back as the model they were written from: the same predictions.
// Format 2 fitted the regressions in units of the scale s; models stored
// before effect_ridge existed fitted the arms at formerEffectRidge.
func TestReadsOlderModels(t *testing.T) {
	m := newPolicyModel()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 500; i++ {
		x := randomVector(rng)
		m.update(x, i%3, 20000*x[3]+9000*rng.NormFloat64(), 15000, 1)
	}
	store := func(old *policyModel, format int) []byte {
		b, err := json.Marshal(modelFile{Format: format, Version: "v500-x", N: old.n, Shared: old.shared, Arms: old.arms,
			ResN: old.resN, ResMean: old.resMean, ResM2: old.resM2, FitN: old.fitN, FitM2: old.fitM2})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	formerRidge := func() *policyModel {
		old := m.clone()
		for _, a := range old.arms {
			a.reridge(effectRidge, formerEffectRidge)
		}
		return old
	}
	cases := []struct {
		name   string
		stored func() []byte
	}{
		{"format 2", func() []byte {
			old := formerRidge()
			s := old.format2Scale()
			old.shared.mul(1 / s)
			for _, a := range old.arms {
				a.mul(1 / s)
			}
			old.fitM2 /= s * s
			return store(old, 2)
		}},
		{"format 3 without effect_ridge", func() []byte { return store(formerRidge(), 3) }},
		{"format 3 now", func() []byte {
			b, err := m.marshal("v500-x")
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
	}
	x := randomVector(rng)
	for _, c := range cases {
		got, version, err := unmarshalPolicyModel(c.stored())
		if err != nil || version != "v500-x" {
			t.Fatalf("%s: unmarshal: %v, version %q", c.name, err, version)
		}
		for a := 0; a < 4; a++ {
			mu, sigma := got.predict(x, a, 15000)
			wantMu, wantSigma := m.predict(x, a, 15000)
			if math.Abs(mu-wantMu) > 1e-6*math.Abs(wantMu) || math.Abs(sigma-wantSigma) > 1e-6*wantSigma {
				t.Errorf("%s, action %d: read (%v, %v), want (%v, %v)", c.name, a, mu, sigma, wantMu, wantSigma)
			}
		}
	}
}

// A ridge fit at one λ and moved to another by reridge is the ridge fit at
// the other from the start.
func TestReridgeMatchesFitAtNewRidge(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	from, to := newRidge(formerEffectRidge), newRidge(effectRidge)
	for i := 0; i < 300; i++ {
		var buf [basisDim]float64
		x := basis(randomVector(rng), &buf)
		y := 5000*x[4] + 3000*rng.NormFloat64()
		from.update(x, y)
		to.update(x, y)
	}
	from.reridge(formerEffectRidge, effectRidge)
	near := cmpopts.EquateApprox(1e-9, 1e-12)
	if d := cmp.Diff(to.Theta, from.Theta, near); d != "" {
		t.Errorf("theta (-want +got):\n%s", d)
	}
	if d := cmp.Diff(to.Ainv, from.Ainv, near); d != "" {
		t.Errorf("A⁻¹ (-want +got):\n%s", d)
	}
	for i := 0; i < basisDim; i++ {
		for j := 0; j < i; j++ {
			if from.Ainv[i*basisDim+j] != from.Ainv[j*basisDim+i] {
				t.Fatalf("A⁻¹ not symmetric at (%d,%d)", i, j)
			}
		}
	}
}

// TestLearnedDeviationCountsBeyondItsError checks the soft threshold of
// predictArm: an action's learned deviation θₐᵀφ moves μ only by what it
// exceeds trustSigmas·σ. After a few noisy rewards the deviation is within
// its error and μ is the prior plus the shared baseline; after many
// rewards a large effect counts, less c·σ, in either direction.
func TestLearnedDeviationCountsBeyondItsError(t *testing.T) {
	const prior = 9000
	fit := func(n int, effect float64) (*policyModel, []float64) {
		m := newPolicyModel()
		rng := rand.New(rand.NewPCG(21, 22))
		for i := 0; i < n; i++ {
			a := i % 2
			r := prior + 3000*rng.NormFloat64()
			if a == 1 {
				r += effect
			}
			m.update(randomVector(rng), a, r, prior, 1)
		}
		return m, randomVector(rng)
	}
	// parts returns μ − (prior + θ₀ᵀφ), the raw deviation and σ of action 1.
	parts := func(m *policyModel, x []float64) (used, raw, sigma float64) {
		var cs custScore
		m.customerScore(x, &cs)
		mu, sigma := m.predictArm(&cs, 1, prior)
		return mu - prior - cs.base, m.arms[1].predict(cs.phi[:]), sigma
	}

	m, x := fit(20, 500)
	used, raw, sigma := parts(m, x)
	if !(math.Abs(raw) < trustSigmas*sigma) {
		t.Fatalf("after 20 rewards: deviation %.1f is not within c·σ = %.1f; the case does not test the threshold", raw, trustSigmas*sigma)
	}
	if math.Abs(used) > 1e-6 { // rounding of prior + baseline only
		t.Errorf("after 20 rewards: μ moved %.3f from prior + baseline for a deviation of %.1f within c·σ = %.1f", used, raw, trustSigmas*sigma)
	}

	for _, effect := range []float64{20000, -20000} {
		m, x := fit(4000, effect)
		used, raw, sigma := parts(m, x)
		if !(math.Abs(raw) > 2*trustSigmas*sigma) {
			t.Fatalf("effect %v: deviation %.1f not beyond 2·c·σ = %.1f; the case does not test the threshold", effect, raw, 2*trustSigmas*sigma)
		}
		want := raw - math.Copysign(trustSigmas*sigma, raw)
		if math.Abs(used-want) > 1e-6 {
			t.Errorf("effect %v: μ moved %.3f from prior + baseline, want the deviation %.3f less c·σ %.3f = %.3f", effect, used, raw, trustSigmas*sigma, want)
		}
	}
}
