package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// The policy: a reward model with uncertainty and an exploration rule with
// exact propensities.
//
// Reward model. The expected reward of action a for a customer with feature
// vector x (cents over the reward window) is
//
//	μ(x,a) = prior(x,a) + θ₀ᵀφ + soft(θₐᵀφ, trustSigmas·σ)
//
// where prior is the economic prior (customer.prior), φ = basis(x), θ₀ a
// ridge regression shared by all actions (what the prior gets wrong for
// everyone: the customer's baseline) and θₐ a per-action ridge regression
// on what is left (the action's own effect), which counts only by what it
// exceeds its own uncertainty (softThreshold). Each regression keeps its
// precision matrix inverse A⁻¹ up to date with Sherman–Morrison, so an
// update costs O(D²). Each reward enters its action's regression with an
// importance weight from its logged propensity (sampleWeight), the shared
// one unweighted. The uncertainty of action a is σ = √(v·φᵀAₐ⁻¹φ), v the
// running variance of the residuals after the fit. An action without
// support (a new coupon) has the uncertainty of a new effect, σ = √(τ²·|φ|²),
// where τ² is estimated from how far the supported actions' effects
// actually turned out from zero (newEffectVar, empirical Bayes), never
// above the ridge prior's v/λₑ: its optimism is as large as effects have
// proved to be.
//
// Money scale. The regressions fit rewards in cents as they come: a ridge
// estimate is linear in its targets and A depends on φ only, so a tenant
// whose amounts are k times larger gets k·θ, k·σ and the same τ²/v, and
// the exploration rule below divides every score by s, the running
// standard deviation of the residuals r − prior, which is k times larger
// too. So the probabilities do not depend on the money scale (up to the
// pseudo-data that start s at initialScale, whose weight fades after a
// few dozen rewards).
//
// Exploration. Actions are ranked by the optimistic score (μ + β·σ)/s
// (RegCB-opt: an unsupported action is tried until its uncertainty is
// gone), then probabilities follow SquareCB's inverse-gap weighting
// (Foster & Rakhlin 2020): p(a) = 1/(K + γ·gap(a)) for every action but the
// top one, which takes the rest, with γ = γ₀ + γ₁·√n growing with the data
// n, so the rule becomes near-greedy as it learns (Bietti, Agarwal &
// Langford 2021: optimistic and near-greedy rules win, heavy exploration
// loses). Finally a floor mixes in pmin/K of uniform so every eligible
// action keeps a non-zero probability and off-policy evaluation stays
// possible. The logged propensity is exactly the probability drawn from.
const (
	modelRidge = 1.0 // λ of the shared baseline regression
	// effectRidge is λₑ, the ridge of the per-action effect regressions, in
	// pseudo-rewards per coefficient. A coupon's effect is small next to
	// purchase noise (tens of MXN against a residual deviation of a hundred
	// or more), so an action's coefficients are held near the shared
	// prediction until some dozens of rewards say otherwise; it also bounds
	// the optimism of a new action (newEffectVar). The value is about what
	// the evidence says in the lab: MacKay's fixed point λₐ = v·γₐ/|θₐ|²,
	// iterated per action, settles at 28–57 in base and drift worlds. It
	// trades variance for speed of adaptation: in the lab (β = 0.5), 300
	// captured more uplift in a stationary world (0.73 against 0.68 at 30)
	// and much less when the customers' response drifts (0.52 against
	// 0.63); see README.
	effectRidge = 30.0
	modelBeta   = 0.25 // optimism β (0.5 until 2026-11-23; see README)
	// trustSigmas is c: an action's learned deviation from the prior and the
	// shared baseline, θₐᵀφ, counts in μ only by what it exceeds c·σ
	// (soft thresholding, the posterior mean under a sparse, Laplace-like
	// prior on the deviation): the economic prior holds for a customer
	// until the action's own data there say otherwise by more than their
	// uncertainty. Without it, what a per-action regression learns where
	// the action is exploited leaks to customers where it is only explored:
	// in the lab the model rated coupons about 20 MXN too high for sure
	// things and sleeping dogs, worse than the prior alone. c = 1 raised
	// uplift capture from 0.71 / 0.68 / 0.73 to 0.76 / 0.75 / 0.76 (seeds
	// 1–8 / 9–16 / 17–24) and with a new coupon from 0.61 to 0.73, with half
	// the spread between runs; it adapts more slowly to a mid-run change
	// (drift: 0.61 / 0.76 / 0.74 to 0.48 / 0.53 / 0.50). See README.
	trustSigmas = 1.0
	modelGamma0 = 50.0 // γ₀
	modelGamma1 = 20.0 // γ₁
	tauPseudo   = 2.0  // ν: pseudo-coefficients of the ridge prior in newEffectVar
	// modelFloor is pmin, the probability spread uniformly over the eligible
	// actions so that each keeps pmin/K and off-policy evaluation stays
	// possible (the largest importance weight is K/pmin).
	modelFloor = 0.01
	// importanceAlpha flattens the importance weights of the per-action
	// regressions (sampleWeight).
	importanceAlpha = 0.5
	initialScale    = 2000 // cents: residual scale before any data
	// The prior of the noise v (noise): noisePseudo rewards at noiseStart
	// times the variance before the fit, chosen in the lab over 24 seeds
	// when the regressions moved to cents (see README).
	noisePseudo = 4000
	noiseStart  = 1.5
	// formerEffectRidge is the λₑ of models stored without effect_ridge
	// (until 2026-11-23); unmarshalPolicyModel moves their arms to
	// effectRidge with ridge.reridge.
	formerEffectRidge = 10.0
)

type ridge struct {
	N     float64   `json:"n"`
	Ainv  []float64 `json:"ainv"` // D×D, row-major
	B     []float64 `json:"b"`
	Theta []float64 `json:"theta"`
}

func newRidge(lambda float64) *ridge {
	r := &ridge{Ainv: make([]float64, basisDim*basisDim), B: make([]float64, basisDim), Theta: make([]float64, basisDim)}
	for i := 0; i < basisDim; i++ {
		r.Ainv[i*basisDim+i] = 1 / lambda
	}
	return r
}

func (r *ridge) clone() *ridge {
	return &ridge{N: r.N, Ainv: append([]float64(nil), r.Ainv...), B: append([]float64(nil), r.B...), Theta: append([]float64(nil), r.Theta...)}
}

func (r *ridge) predict(x []float64) float64 {
	var s float64
	for i, v := range x {
		s += r.Theta[i] * v
	}
	return s
}

// quad returns xᵀA⁻¹x for x of length basisDim. It is the hot spot of
// scoring a trained model (every action, once per decision), so it uses
// that A⁻¹ is symmetric bit for bit (newRidge starts it diagonal, and
// update subtracts u_i·u_j/den, the same value at (i,j) and (j,i)):
// xᵀA⁻¹x = Σᵢ xᵢ(A⁻¹ᵢᵢxᵢ + 2Σ_{j>i} A⁻¹ᵢⱼxⱼ), half the products, each row's
// in four partial sums the CPU adds in parallel. It differs from the sum
// of all D² products in index order only by rounding (about 1e-16
// relative).
func (r *ridge) quad(x []float64) float64 {
	xv := (*[basisDim]float64)(x)
	var q float64
	for i := 0; i < basisDim; i++ {
		a := (*[basisDim]float64)(r.Ainv[i*basisDim:])
		var s0, s1, s2, s3 float64
		j := i + 1
		for ; j+3 < basisDim; j += 4 {
			s0 += a[j] * xv[j]
			s1 += a[j+1] * xv[j+1]
			s2 += a[j+2] * xv[j+2]
			s3 += a[j+3] * xv[j+3]
		}
		for ; j < basisDim; j++ {
			s0 += a[j] * xv[j]
		}
		q += xv[i] * (a[i]*xv[i] + 2*((s0+s1)+(s2+s3)))
	}
	return q
}

// update folds (x, y) with Sherman–Morrison and refreshes θ = A⁻¹b.
func (r *ridge) update(x []float64, y float64) {
	shermanMorrison(r.Ainv, x)
	for i := 0; i < basisDim; i++ {
		r.B[i] += y * x[i]
	}
	r.solve()
	r.N++
}

// solve sets θ = A⁻¹b.
func (r *ridge) solve() {
	for i := 0; i < basisDim; i++ {
		var s float64
		for j := 0; j < basisDim; j++ {
			s += r.Ainv[i*basisDim+j] * r.B[j]
		}
		r.Theta[i] = s
	}
}

// reridge changes the regression's ridge from λ = from to λ = to: A gains
// (to − from)·I, one Sherman–Morrison step per coordinate (each a
// rank-one change c·eᵢeᵢᵀ), and θ is solved again. The data folded so far
// are kept exactly; A⁻¹ stays symmetric bit for bit.
func (r *ridge) reridge(from, to float64) {
	c := to - from
	var col [basisDim]float64
	for i := 0; i < basisDim; i++ {
		copy(col[:], r.Ainv[i*basisDim:(i+1)*basisDim]) // row i = column i
		f := c / (1 + c*col[i])
		for j := 0; j < basisDim; j++ {
			for k := 0; k < basisDim; k++ {
				r.Ainv[j*basisDim+k] -= col[j] * col[k] * f
			}
		}
	}
	r.solve()
}

// shermanMorrison turns ainv = A⁻¹ (D×D, row-major) into (A + xxᵀ)⁻¹. It
// subtracts u_i·u_j/den at (i,j) and (j,i) alike, so a symmetric ainv stays
// symmetric bit for bit (ridge.quad relies on it).
func shermanMorrison(ainv, x []float64) {
	var u [basisDim]float64 // A⁻¹x
	for i := 0; i < basisDim; i++ {
		var s float64
		for j := 0; j < basisDim; j++ {
			s += ainv[i*basisDim+j] * x[j]
		}
		u[i] = s
	}
	var den float64 = 1
	for i := 0; i < basisDim; i++ {
		den += x[i] * u[i]
	}
	for i := 0; i < basisDim; i++ {
		for j := 0; j < basisDim; j++ {
			ainv[i*basisDim+j] -= u[i] * u[j] / den
		}
	}
}

// policyModel is a tenant's reward model.
type policyModel struct {
	n      int64
	shared *ridge
	arms   map[int]*ridge
	// Running mean and variance (Welford) of the raw residuals r − prior
	// for the scale s, and the sum of squared residuals after the fit
	// (cents²), for v.
	resN, resMean, resM2 float64
	fitN, fitM2          float64
	// newVar is newEffectVar(), kept current by update so that scoring,
	// once per decision, does not recompute it over every action.
	newVar float64
}

func newPolicyModel() *policyModel {
	m := &policyModel{shared: newRidge(modelRidge), arms: map[int]*ridge{}}
	m.newVar = m.newEffectVar()
	return m
}

func (m *policyModel) clone() *policyModel {
	c := *m
	c.shared = m.shared.clone()
	c.arms = make(map[int]*ridge, len(m.arms))
	for k, v := range m.arms {
		c.arms[k] = v.clone()
	}
	return &c
}

// scale is s: the standard deviation of the raw residuals, with
// pseudo-data at initialScale while there are few rewards. The
// pseudo-data's weight falls from 20 to 0 over the first 40 rewards, so
// from then on s is the data's alone, whatever the tenant's money scale.
func (m *policyModel) scale() float64 {
	const pseudo, fade = 20, 40
	var w float64
	if m.resN < fade {
		w = pseudo * (1 - m.resN/fade) * (1 - m.resN/fade)
	}
	v := (m.resM2 + w*initialScale*initialScale) / (m.resN + w)
	return math.Max(math.Sqrt(v), 1)
}

// noise is v: the variance (cents²) of the residuals after the fit, with
// noisePseudo pseudo-rewards at noiseStart·s² (s² is the variance of the
// residuals before the fit), so it is as money-scale free as s. The
// pseudo-rewards keep v, and so σ and the optimism it drives, from
// dropping to the fit's residual variance before there are thousands of
// rewards: early fits are unreliable beyond what φᵀA⁻¹φ says.
func (m *policyModel) noise() float64 {
	s := m.scale()
	return (m.fitM2 + noisePseudo*noiseStart*s*s) / (m.fitN + noisePseudo)
}

// basisDim is the length of the model's basis φ(x): the customer vector
// plus nonlinear terms that let a linear model express effects that rise
// and fall with purchase frequency, ticket size and coupon history (a
// coupon helps the occasional buyer, not the one who buys every week).
const basisDim = VectorDim + 12

// Positions in the customer vector (engine.vectorNames) used by basis.
const (
	vecRecencia   = 1
	vecFreq90     = 4
	vecTicket     = 12
	vecRecibidos  = 16
	vecRedencion  = 17
	vecSinceCupon = 18
)

// basis writes φ(x) into dst (len basisDim). A vector shorter than
// VectorDim (an old record) is padded with zeros.
func basis(x []float64, dst *[basisDim]float64) []float64 {
	copy(dst[:], x)
	for i := len(x); i < VectorDim; i++ {
		dst[i] = 0
	}
	f, r, t, red, rec := dst[vecFreq90], dst[vecRecencia], dst[vecTicket], dst[vecRedencion], dst[vecRecibidos]
	ext := dst[VectorDim:]
	ext[0] = f * f
	ext[1] = f * red
	ext[2] = f * t
	ext[3] = red * t
	ext[4] = r * r
	ext[5] = b2f(f < 0.25)
	ext[6] = b2f(f >= 0.25 && f < 0.5)
	ext[7] = b2f(f >= 0.5 && f < 0.75)
	ext[8] = b2f(f >= 0.75)
	ext[9] = rec * (1 - red) // coupons received and not redeemed
	ext[10] = t * t
	ext[11] = dst[vecSinceCupon] * red
	return dst[:]
}

// custScore is the part of scoring that depends on the customer only,
// computed once per decision: the basis, the shared prediction, the scale
// and the noise.
type custScore struct {
	phi  [basisDim]float64
	s, v float64
	base float64 // θ₀ᵀφ, cents
	qNew float64 // (τ²/v)·φᵀφ: the variance factor of an action without data
}

func (m *policyModel) customerScore(x []float64, cs *custScore) {
	phi := basis(x, &cs.phi)
	cs.s, cs.v = m.scale(), m.noise()
	cs.base = m.shared.predict(phi)
	cs.qNew = m.newVar / cs.v * dot(phi, phi)
}

// newEffectVar is τ², the variance per coefficient that an action without
// data is given (σ² = s²·τ²·|φ|²): an empirical-Bayes estimate from the
// actions with data, τ² = Σₐ|θₐ|² / Σₐγₐ, γₐ = D − λₑ·tr(Aₐ⁻¹) the number of
// coefficients of θₐ the data determine (MacKay's evidence fixed point),
// with a weak hyperprior toward the ridge prior v/λₑ and never above it. A
// new action is thus assumed to differ from the model's shared prediction
// about as much as the existing actions do, so its optimism is measured,
// not a burst.
func (m *policyModel) newEffectVar() float64 {
	v0 := m.noise() / effectRidge
	num, den := tauPseudo*v0, tauPseudo
	ids := make([]int, 0, len(m.arms))
	for id := range m.arms {
		ids = append(ids, id)
	}
	slices.Sort(ids) // a fixed order: the same sums, bit for bit, on every call
	for _, id := range ids {
		a := m.arms[id]
		var tr float64
		for i := 0; i < basisDim; i++ {
			tr += a.Ainv[i*basisDim+i]
		}
		num += dot(a.Theta, a.Theta)
		den += float64(basisDim) - effectRidge*tr
	}
	return math.Min(num/den, v0)
}

// predictArm returns μ and σ (cents) of action with prior for the customer
// of cs: only the action's own part is computed here. The action's learned
// deviation θₐᵀφ enters μ only by what it exceeds trustSigmas·σ:
// μ = prior + θ₀ᵀφ + soft(θₐᵀφ, trustSigmas·σ).
func (m *policyModel) predictArm(cs *custScore, action int, prior float64) (mu, sigma float64) {
	phi := cs.phi[:]
	a, ok := m.arms[action]
	if !ok {
		return prior + cs.base, math.Sqrt(cs.v * cs.qNew)
	}
	sigma = math.Sqrt(cs.v * a.quad(phi))
	return prior + cs.base + softThreshold(a.predict(phi), trustSigmas*sigma), sigma
}

// softThreshold moves d toward 0 by t (t ≥ 0), stopping at 0.
func softThreshold(d, t float64) float64 {
	switch {
	case d > t:
		return d - t
	case d < -t:
		return d + t
	}
	return 0
}

// predict returns μ and σ (cents) of action for x given its prior.
func (m *policyModel) predict(x []float64, action int, prior float64) (mu, sigma float64) {
	var cs custScore
	m.customerScore(x, &cs)
	return m.predictArm(&cs, action, prior)
}

// update folds one final reward of action for x. w is the sample's
// importance weight in the action's regression (sampleWeight; 1 for a
// sample without a logged propensity): the regression of θₐ adds w·φφᵀ to
// Aₐ and w·φ·y to bₐ, i.e. folds √w·φ and √w·y. The shared baseline and the
// noise estimates count every sample once.
func (m *policyModel) update(x []float64, action int, reward, prior, w float64) {
	var buf, wbuf [basisDim]float64
	x = basis(x, &buf)
	y := reward - prior // cents
	m.resN++
	d := y - m.resMean
	m.resMean += d / m.resN
	m.resM2 += d * (y - m.resMean)
	pred := m.shared.predict(x)
	a, ok := m.arms[action]
	if !ok {
		a = newRidge(effectRidge)
		m.arms[action] = a
	}
	pred += a.predict(x)
	e := y - pred
	m.fitN++
	m.fitM2 += e * e
	m.shared.update(x, y)
	sw := math.Sqrt(w)
	for i, v := range x {
		wbuf[i] = sw * v
	}
	a.update(wbuf[:], sw*(y-m.shared.predict(x)))
	m.n++
	m.newVar = m.newEffectVar()
}

// sampleWeight is the importance weight of a reward whose action was drawn
// with probability p among k eligible actions: (1/(k·p))^α, α =
// importanceAlpha, so a draw as likely as under uniform logging weighs 1.
// It is at most (1/pmin)^α, because the floor keeps p ≥ pmin/k. p outside
// (0, 1] or k < 1 (no logged distribution) weighs 1.
//
// Why. Each action's regression is misspecified (a linear model of an
// effect that is not linear), and a least-squares fit is accurate where its
// data lie: for the exploited action, the customers the model already sends
// it to. A fit weighted by 1/p estimates the action's effect as if it had
// been sent uniformly, so the rare explored sends on the customers for
// whom the model is wrong count in proportion (importance-weighted
// regression: Bietti, Agarwal & Langford 2021, where it was the best
// reduction; MTR in Vowpal Wabbit's cb_explore_adf). Full weights make the
// fit as noisy as IPS; the power α < 1 flattens them (Shimodaira 2000),
// trading that variance for some of the bias. In the lab (24 seeds) α = 0.5
// raised uplift capture from 0.61 to 0.65; α = 0.3 gained less, and 0.75
// and 1 lost (0.56).
func sampleWeight(p float64, k int) float64 {
	if !(p > 0 && p <= 1) || k < 1 {
		return 1
	}
	return math.Pow(float64(k)*p, -importanceAlpha)
}

// distribution is the exploration rule; see the package comment above.
func (m *policyModel) distribution(sc *scored) ([]float64, int) {
	k := len(sc.cands)
	probs := make([]float64, k)
	if k == 1 {
		probs[0] = 1
		return probs, 0
	}
	s := sc.s
	top := 0
	opt := make([]float64, k)
	for i, c := range sc.cands {
		opt[i] = (c.mu + modelBeta*c.sigma) / s
		if opt[i] > opt[top] {
			top = i
		}
	}
	gamma := modelGamma0 + modelGamma1*math.Sqrt(sc.n)
	rest := 1.0
	for i := range sc.cands {
		if i == top {
			continue
		}
		probs[i] = 1 / (float64(k) + gamma*(opt[top]-opt[i]))
		rest -= probs[i]
	}
	probs[top] = rest
	for i := range probs {
		probs[i] = (1-modelFloor)*probs[i] + modelFloor/float64(k)
	}
	return probs, top
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// modelFile is the stored form of a model (TableModel), JSON with a version.
type modelFile struct {
	Format  int            `json:"format"`
	Version string         `json:"politica_version"`
	N       int64          `json:"n"`
	Shared  *ridge         `json:"shared"`
	Arms    map[int]*ridge `json:"arms"`
	ResN    float64        `json:"res_n"`
	ResMean float64        `json:"res_mean"`
	ResM2   float64        `json:"res_m2"`
	FitN    float64        `json:"fit_n"`
	FitM2   float64        `json:"fit_m2"`
	// EffectRidge is the λₑ the arms were fit with; absent in models stored
	// before 2026-11-23, which used formerEffectRidge.
	EffectRidge float64 `json:"effect_ridge,omitempty"`
}

func (m *policyModel) marshal(version string) ([]byte, error) {
	return json.Marshal(modelFile{Format: modelFormat, Version: version, N: m.n, Shared: m.shared, Arms: m.arms,
		ResN: m.resN, ResMean: m.resMean, ResM2: m.resM2, FitN: m.fitN, FitM2: m.fitM2, EffectRidge: effectRidge})
}

func unmarshalPolicyModel(b []byte) (*policyModel, string, error) {
	var f modelFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, "", fmt.Errorf("decode model: %w", err)
	}
	ok := (f.Format == modelFormat || f.Format == 2) && f.EffectRidge >= 0 && f.Shared != nil && f.Shared.valid()
	for _, a := range f.Arms {
		ok = ok && a != nil && a.valid()
	}
	if !ok {
		return nil, "", fmt.Errorf("decode model: damaged or unknown format %d", f.Format)
	}
	if f.Arms == nil {
		f.Arms = map[int]*ridge{}
	}
	m := &policyModel{n: f.N, shared: f.Shared, arms: f.Arms, resN: f.ResN, resMean: f.ResMean, resM2: f.ResM2, fitN: f.FitN, fitM2: f.FitM2}
	if f.Format == 2 {
		m.fromNormalised()
	}
	from := f.EffectRidge
	if from == 0 {
		from = formerEffectRidge
	}
	if from != effectRidge {
		// The arms keep their data and take today's ridge, so a stored
		// model behaves as if it had been learnt with it.
		for _, a := range m.arms {
			a.reridge(from, effectRidge)
		}
	}
	m.newVar = m.newEffectVar()
	return m, f.Version, nil
}

// modelFormat is the stored format: 3 fits rewards in cents. Format 2
// (until 2026-11) fitted them divided by the scale s of the moment; it is
// read and converted by fromNormalised.
const modelFormat = 3

// fromNormalised converts a format-2 model, whose regressions and fit
// residuals were in units of s, to cents at the s it was last stored with
// (format2Scale). Rewards folded while s was still moving were scaled by a
// slightly different s, so the conversion is approximate; it keeps what
// the model learnt.
func (m *policyModel) fromNormalised() {
	s := m.format2Scale()
	m.shared.mul(s)
	for _, a := range m.arms {
		a.mul(s)
	}
	m.fitM2 *= s * s
}

// format2Scale is s as format 2 computed it: 20 pseudo-rewards at
// initialScale for ever.
func (m *policyModel) format2Scale() float64 {
	const pseudo = 20
	return math.Max(math.Sqrt((m.resM2+pseudo*initialScale*initialScale)/(m.resN+pseudo)), 1)
}

// mul multiplies the regression's targets by k: b and θ scale, A does not.
func (r *ridge) mul(k float64) {
	for i := range r.B {
		r.B[i] *= k
		r.Theta[i] *= k
	}
}

func (r *ridge) valid() bool {
	return len(r.Ainv) == basisDim*basisDim && len(r.B) == basisDim && len(r.Theta) == basisDim
}

// versionLabel names a published model: the rewards folded and the tenant
// time of publication, e.g. "v1250-20261122T230000".
func versionLabel(n int64, now time.Time) string {
	return "v" + strconv.FormatInt(n, 10) + "-" + now.UTC().Format("20060102T150405")
}
