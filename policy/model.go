// Package policy is coupond's decision model: what a coupon is worth for a
// customer, how sure the model is, which action to draw and with which
// probability, and the guard that keeps the learned policy from doing worse
// than a plain baseline. It is pure computation over plain values: no
// store, no clock, no engine; the engine feeds it customers, candidate
// actions and final rewards. POLICY.md beside this file gives the
// derivations and the tuning record.
//
// The model in one paragraph. The reward of action a for customer c
// (cents over the reward window) is
//
//	r = Base(c) + φ(c)ᵀβ + [a ≠ 0]·(pe(c,a) + ψ(c,a)ᵀδₐ) + noise
//
// Base and pe = Prior(a) − Base are the economic prior's baseline and
// effect, used as offsets; φ is the customer's features (with Base itself,
// so the prior's baseline weight is learned) and β is shared by every
// action; ψ are the (customer, action) pair's features (with pe itself, so
// the prior effect's weight is learned per action, and the customer's
// affinity to the action's categories) and δₐ the action's own effect
// coefficients. β and every δₐ are fitted jointly by one ridge regression
// (its normal equations have an arrow shape, solved by the Schur
// complement), samples weighted by their logged propensity. Effect
// uncertainty is a sandwich (heteroscedasticity-robust) variance of δₐ plus
// the ridge prior's own variance; the ridge strengths are chosen by
// evidence (empirical Bayes), so how much the prior counts is learned.
// Decisions (Config.Gate, the default) send the coupon of best expected
// effect, split evenly with its strongest challenger when the data cannot
// tell them apart (top-two), as an experiment against never-send until
// that choice beats never-send with confidence in the customer's
// frequency band (gate.go); they explore the plausible others with a
// share that falls fast, and keep a floor on every eligible action. Without the gate (ZRuleConfig) they send the
// action with the best lower confidence bound on its effect.
package policy

import (
	"math"
	"slices"
)

// Config holds the model's constants (DefaultConfig; see POLICY.md).
type Config struct {
	// Z is the width, in Score.Width units, of the confidence bounds: an
	// action is sent when its effect minus Z·Width beats never-send.
	Z float64
	// TieZ: two actions whose effects differ by less than TieZ widths of
	// the difference (diffSE, on Score.Width's basis) are tied and share the exploitation mass
	// (with TieTopTwo only the leader and its strongest tied challenger).
	TieZ float64
	// PopZ: two actions are also told apart when their average effects
	// over their customers differ by more than PopZ standard errors (3.5:
	// with sparse, heavy-tailed rewards 2.5 told two equal coupons apart in
	// 2 of 12 simulated e-mail worlds, POLICY.md §7.8).
	PopZ float64
	// Eps0 and EpsN0 set the exploration share ε = Eps0·√(EpsN0/(EpsN0+n))
	// after n rewards; Floor is spread over every eligible action.
	Eps0, EpsN0, Floor float64
	// FloorCost (0: off) bounds the gate's Floor for a customer whose
	// margin is small beside what a send can lose: at most FloorCost times
	// the customer's never-send μ over the coupons' mean downside
	// (Arm.Downside), so the floor's sends cost about FloorCost of what the
	// customer brings without a coupon, and never below Floor/10, so every
	// action keeps some support (floor; POLICY.md §7.102).
	FloorCost float64
	// NeverShare is the least probability of never-send where it is
	// eligible: the guard's window on what not sending earns.
	NeverShare float64
	// TauEffect (cents per feature unit) and TauPrior (weight units) are the
	// prior standard deviations of the effect coefficients and of the prior
	// effect's correction before evidence; HyperPseudo is how many
	// coefficients' worth of weight they keep against the evidence.
	TauEffect, TauPrior, HyperPseudo float64
	// TauLevel (cents) is the prior standard deviation of an action's own
	// effect level (ψ's constant: its deviation from the pooled coupon
	// effect), TauShared that of the pooled coupon effect's level; neither
	// is shrunk by evidence.
	TauLevel, TauShared float64
	// BaseRidge is the ridge (pseudo-rewards) of the baseline's unit-scaled
	// coefficients; TauBase the prior standard deviation of the prior
	// baseline's correction.
	BaseRidge, TauBase float64
	// NoiseStart (cents) and NoisePseudo: the prior of the residual
	// variance v before data.
	NoiseStart, NoisePseudo float64
	// ResidualClip, when above 0, bounds each folded reward's residual
	// against the current fit to ResidualClip standard deviations of the
	// residual noise (√v), as a Huber loss does: one absurd amount (a
	// margin of a billion pesos typed into one ticket line) moves the
	// model by at most that, instead of taking over every estimate. A
	// bounded residual adds v itself to v's tally, not its bounded square:
	// a stream of absurd amounts leaves v, and so the bound, where it was,
	// where adding (ResidualClip·√v)² multiplied v by about eight each
	// time and let the stream through.
	ResidualClip float64
	// ImportanceAlpha flattens importance weights: (1/(k·p))^α.
	ImportanceAlpha float64
	// Guard: GuardZ standard errors of evidence to switch, at least
	// GuardMinN effective rewards, evidence half-life in reward windows.
	GuardZ, GuardMinN, GuardHalfLife float64
	// GuardReleaseZ: an active guard is released once π is no longer
	// below its baseline by this many standard errors.
	GuardReleaseZ float64
	// GuardSingleActions lets the guard exploit "always action a" when π
	// is below it; off, the single actions are estimated and shown but
	// only never-send is exploited. Off by default: in the lab's scenario
	// worlds (engine/lab/scenarios_test.go) exploiting a single coupon
	// sent it to 92–98 % of customers, the rare buyers who never respond
	// and one of two equal treatments included (POLICY.md §4).
	GuardSingleActions bool
	// Gate makes the send gate decide whether to send (gate.go, POLICY.md
	// §7.7): each decision's choice (never-send unless some coupon's effect
	// is above GateSendZ widths, then the coupon of highest
	// expected effect) is tested against never-send as an experiment, per
	// frequency band.
	Gate bool
	// GateQ0, GateN0, GatePow: while a band tests, the choice is sent with
	// probability GateQ0/(1 + (n/GateN0)^GatePow) after n rewards (else
	// never-send), but at least GatePromise·Φ(z − GateZ), z the band's test
	// statistic.
	GateQ0, GateN0, GatePow, GatePromise float64
	// GateAgeMin, GateAgeMax (windows; 0: no bound): the rewards counted in
	// the testing share reach GateN0 no sooner than GateAgeMin and no later
	// than GateAgeMax windows of the tenant's age (testShare).
	GateAgeMin, GateAgeMax float64
	// GateModelPromise: while a customer's band tests and its own test
	// is not below 0, their choice is sent with at least
	// GatePromise·Φ(z − bar), z the choice's effect over its standard
	// error (Model.Sigma) and bar GateZ (the band's own bar now with
	// GateModelPromiseAtBar): the model's own promise for this customer, as
	// GatePromise is the band test's (POLICY.md §7.21).
	GateModelPromise bool
	// GateModelPromiseAtBar: the model's promise (GateModelPromise) reads
	// the band's own opening bar now (openBar: GateZ at its first look,
	// rising with every further window it tests) instead of GateZ: the
	// chance of clearing the bar the band is looked at against. The band
	// test's promise keeps GateZ: read at the band's bar too it cut the
	// late openings of bands whose tests near the bar are what pays
	// (POLICY.md §7.153, §7.158).
	GateModelPromiseAtBar bool
	// DuelZ, when positive, settles a top-two tie for its winner when the
	// randomized duel of the pair's ties (observeDuel) puts their
	// difference DuelZ standard errors from 0.
	DuelZ float64
	// GateZ: a band opens (the choice sent to all but NeverShare) when its
	// choices beat never-send by GateZ standard errors, and goes back to
	// testing when they no longer beat it by GateReleaseZ on its fast
	// test (negative: only on evidence that they lose; −0.5, half a
	// standard error, since POLICY.md §7.142). A band or the whole tenant closes
	// (GuardZ, GuardReleaseZ) when the choices lose to never-send; closed,
	// the testing share is divided by GateClosedDiv.
	GateZ, GateReleaseZ, GateClosedDiv float64
	// GateClosedLateDiv (0: off) takes GateClosedDiv's place from
	// GateLeanAge windows of the tenant's age: a closed band, and every
	// band while the guard holds never-send, then tests at the testing
	// share over GateClosedLateDiv. Earlier a closed share keeps its
	// GateClosedDiv, so the guard's first weeks' false alarms can still be
	// released; later every test send is bought in the weeks the retailer
	// is judged on, and a closed test has already read a loss
	// (POLICY.md §7.78).
	GateClosedLateDiv float64
	// GateExploreClosedLate: from GateLeanAge windows of the tenant's age
	// (with GateClosedLateDiv), exploration (exploreGate) in a closed band,
	// and in every band while the guard holds never-send, reads the closed
	// share instead of the testing share, as that band's tests do: those
	// weeks are the ones the retailer is judged on, and the closed test has
	// already read a loss (POLICY.md §7.106).
	GateExploreClosedLate bool
	// GateHalfLife: the tests' evidence fades with this half-life in
	// reward windows.
	GateHalfLife float64
	// GateLookAlpha (0: off; by default Φ(−2)·π²/6, POLICY.md §7.51) makes
	// a band's own opening bar always-valid: at its k-th look a band's test opens it only when
	// its mean is above max(GateZ, lookZ(GateLookAlpha, k)) standard
	// errors, the bar of a one-sided error GateLookAlpha·6/(π²k²), so the
	// chance that the test of choices that do not pay ever crosses one of
	// its bars is at most GateLookAlpha (Φ(−GateZ) at the first look with
	// Φ(−GateZ)·π²/6). Looks are windows of the tenant's age since the band
	// last went back to testing (openBar), not learner passes: the passes
	// of one window read the same faded data. The pooled opening keeps
	// GateZ.
	GateLookAlpha float64
	// GateLeanAge (windows of the tenant's age; 0: never): from this age a
	// testing band whose test leans against its choices (mean below 0,
	// judged on at least GuardMinN effective decisions) tests them at the
	// testing share times 2Φ(z), z the test's mean over its standard
	// error: after the testing weeks such a test is more likely right than
	// wrong, and every send it still buys costs the weeks the retailer is
	// judged on. Earlier it would decide on the choices of a model still
	// learning (POLICY.md §7.33).
	GateLeanAge float64
	// GateDownAge (windows of the tenant's age; 0: never): while the
	// tenant is younger, the bar a coupon must clear to be the choice reads
	// the smaller of its width and its downside (Arm.Downside), so a send
	// that can lose little (an e-mail without discount, a coupon to a
	// customer who rarely buys) is tested on the prior's leaning alone
	// instead of waiting for a confidence no untested action has
	// (POLICY.md §7.34).
	GateDownAge float64
	// GateDownOpen: in a band whose gate is open (and the guard holding no
	// one back) the bar reads the downside too, at any age: the band's
	// choices have beaten never-send, and a send that can lose little needs
	// no more than a lean to be one of them. Without it, a tenant whose
	// e-mails had opened on the downside bar fell back to the width's bar at
	// GateDownAge and stopped sending to most of the customers it had just
	// shown they pay for (POLICY.md §7.35).
	GateDownOpen bool
	// GateSendZ: the choice is a coupon when its effect is above GateSendZ
	// widths (Score.Width; 0: the point estimate; 0.25 by default, POLICY.md
	// §7.8).
	GateSendZ float64
	// TicketTarget makes the model learn from Target's ticket-count
	// reward instead of the reward itself (target.go); TicketPseudo is the
	// weight, in tickets, of the tenant's margin per ticket against a
	// customer's own.
	TicketTarget bool
	TicketPseudo float64
	// GateOpenSendZ is GateSendZ in a band whose gate is open (0.1 by
	// default, POLICY.md §7.14): the testing bar limits what testing a
	// losing choice costs; once the band's choices have shown that they
	// pay, a customer whose own estimate is positive but below the testing
	// bar gets the coupon too.
	GateOpenSendZ float64
	// GatePooled: a testing band also opens when the test over all
	// customers clears GateZ and the band's own mean is not below 0, so a
	// band too small to prove itself alone follows the tenant's evidence
	// (its own fast test still sends it back to testing if it loses).
	GatePooled bool
	// GatePooledOwn: a band opens on the pooled test only once its own
	// test can be judged (GuardMinN effective decisions): a band without
	// evidence of its own (its customers' choice has been never-send, so
	// its test holds nothing) keeps testing, so the model's sends there
	// stay at the testing share until its own test can say whether they
	// pay (POLICY.md §7.61).
	GatePooledOwn bool
	// GateControlWeight: a decision weighs the gate's benefit tests (the
	// ones that open a band and keep a pooled opening) by the smaller of
	// its choice's probability and never-send's, not by the choice's
	// alone: the difference it measures is as uncertain as its rarer arm,
	// so an open band's decisions (choice 0.9, control 0.1) count as ones
	// tested at 0.1, not as nine of them, and its first open weeks no
	// longer swamp the evidence it opened on. The harm tests keep the
	// choice's probability (POLICY.md §7.62).
	GateControlWeight bool
	// GateExplore: coupons outside the choice that might beat never-send
	// are tried with GateExplore·(testing share/GateQ0)² of the mass, so a
	// coupon the prior undervalues is learned while the tenant is young.
	GateExplore float64
	// TieTopTwo: of the coupons tied with the lead only the lead and its
	// strongest challenger share its mass (evenTies; POLICY.md §7.10). It
	// assumes the gate, where the leader (the highest effect) holds the
	// choice's mass; ZRuleConfig turns it off.
	TieTopTwo bool
}

// ZRuleConfig is the configuration before the gate (POLICY.md §7.7): the
// send rule "effect − Z·SE above 0" per customer, decaying ε exploration of
// every plausible coupon, a 1 % floor, never-send at least 5 %, folds
// weighted by (1/(k·p))^0.5, every tied coupon sharing the lead's mass.
// Kept for comparison (coupond lab --model zrule) and for the tests of the
// mechanisms that belong to it.
func ZRuleConfig() Config {
	c := DefaultConfig()
	c.Gate, c.Floor, c.NeverShare, c.ImportanceAlpha, c.PopZ, c.TieTopTwo = false, 0.01, 0.05, 0.5, 2.5, false
	return c
}

// DefaultConfig is the configuration the engine runs.
func DefaultConfig() Config {
	return Config{
		Z: 1.5, TieZ: 2.5, PopZ: 3.5,
		Eps0: 0.25, EpsN0: 1000, Floor: 0.0005, FloorCost: 0.0005, NeverShare: 0.1,
		TauEffect: 1000, TauPrior: 0.5, HyperPseudo: 5, TauLevel: 1000, TauShared: 3000,
		BaseRidge: 1, TauBase: 0.5,
		NoiseStart: 5000, NoisePseudo: 50,
		ImportanceAlpha: 0,
		GuardZ:          2, GuardReleaseZ: 1, GuardMinN: 100, GuardHalfLife: 1,
		Gate: true, GateExplore: 0.05, GatePromise: 0.5, GateQ0: 0.5, GateN0: 12000, GateAgeMin: 4, GateAgeMax: 6, GatePow: 4, GateZ: 2, GateReleaseZ: -0.5, GateClosedDiv: 4, GateClosedLateDiv: 1000, GateExploreClosedLate: true, GateHalfLife: 3, GateLookAlpha: 0.0374224670668522, GateLeanAge: 6, GateDownAge: 2, GateDownOpen: true, GatePooled: true, GatePooledOwn: true, GateControlWeight: true, GateModelPromise: true, GateModelPromiseAtBar: true, GateSendZ: 0.25, GateOpenSendZ: 0.1, TieTopTwo: true,
		TicketTarget: true, TicketPseudo: 64, DuelZ: 3,
		ResidualClip: 50,
	}
}

// Model is a tenant's policy model. Its state is sufficient statistics
// (weighted cross products of the features and the targets), so folding a
// reward is cheap and exact; Refit solves the regression from them and
// must be called after folding before the model is read again. A Model is
// not safe for concurrent use; the engine publishes clones.
type Model struct {
	cfg Config
	// Cats are the tenant's main categories (at most NumCats, append only:
	// position k of Customer.Shares is Cats[k]).
	Cats []string

	n        float64   // rewards folded
	phi      []float64 // Σ w φφᵀ, dimBase²
	bPhi     []float64 // Σ w φ y
	mPhi     []float64 // meat: Σ w² φφᵀ ε²
	resN     float64   // residual variance: count and sum of squares
	resSS    float64
	arms     map[int]*armStats
	tauE     float64 // evidence: prior SD of effect coefficients
	tauP     float64 // evidence: prior SD of the prior effect's correction
	beta     []float64
	guard    Guard
	sinceFit int
	// ticketGross and tickets tally the folded windows' gross margin and
	// tickets (TallyTickets).
	ticketGross, tickets float64
	// sends and optouts tally the folded windows of sends and those of
	// them with an opt-out (TallyOptouts).
	sends, optouts float64
	// cross holds Cov(δₐ, δ_b) for a < b (fit), for the standard error
	// of the difference between two actions' effects.
	cross map[[2]int][]float64
	// sharedCov is Var of the pooled coupon effect's coefficients (fit).
	sharedCov []float64
	// popApart[a,b] (a < b): the two actions differ with confidence on
	// average over their customers (apartOverall).
	popApart map[[2]int]bool
	// observed is Observe's scratch for the logged decision's scores; a
	// clone gets its own.
	observed []Score
}

// armStats are one action's statistics and fit.
type armStats struct {
	n     float64   // rewards of this action
	c     []float64 // Σ w φψᵀ, dimBase×dimEffect
	psi   []float64 // Σ w ψψᵀ
	b     []float64 // Σ w ψ y
	mC    []float64 // meat cross block Σ w² φψᵀ ε²
	mPsi  []float64 // meat Σ w² ψψᵀ ε²
	delta []float64 // fit: δₐ
	cov   []float64 // fit: Var(δₐ), dimEffect²
	// shX is Cov(β_pooled, δₐ), nShared×dimEffect (fit): the pooled
	// coupon effect and the action's own deviation from it trade off where
	// the data cannot tell them apart, so it is negative there.
	shX []float64
}

func newArm() *armStats {
	return &armStats{c: make([]float64, dimBase*dimEffect), psi: make([]float64, dimEffect*dimEffect), b: make([]float64, dimEffect),
		mC: make([]float64, dimBase*dimEffect), mPsi: make([]float64, dimEffect*dimEffect)}
}

// New returns a model without data: it decides on the economic prior,
// with the prior's uncertainty.
func New(cfg Config) *Model {
	m := &Model{cfg: cfg, phi: make([]float64, dimBase*dimBase), bPhi: make([]float64, dimBase), mPhi: make([]float64, dimBase*dimBase),
		arms: map[int]*armStats{}, tauE: cfg.TauEffect, tauP: cfg.TauPrior}
	m.Refit()
	return m
}

// N is the number of rewards folded.
func (m *Model) N() int64 { return int64(m.n) }

// Clone returns an independent copy.
func (m *Model) Clone() *Model {
	c := *m
	c.Cats = slices.Clone(m.Cats)
	c.phi, c.bPhi, c.mPhi, c.beta = slices.Clone(m.phi), slices.Clone(m.bPhi), slices.Clone(m.mPhi), slices.Clone(m.beta)
	c.arms = make(map[int]*armStats, len(m.arms))
	for id, a := range m.arms {
		c.arms[id] = &armStats{n: a.n, c: slices.Clone(a.c), psi: slices.Clone(a.psi), b: slices.Clone(a.b), mC: slices.Clone(a.mC),
			mPsi: slices.Clone(a.mPsi), delta: slices.Clone(a.delta), cov: slices.Clone(a.cov), shX: slices.Clone(a.shX)}
	}
	c.guard = m.guard.clone()
	c.observed = nil
	return &c
}

// AddCats appends main categories (up to NumCats, no repeats).
func (m *Model) AddCats(names ...string) {
	for _, n := range names {
		if len(m.Cats) >= NumCats {
			return
		}
		if n != "" && !slices.Contains(m.Cats, n) {
			m.Cats = append(m.Cats, n)
		}
	}
}

// noise is v, the residual variance (cents²) with its prior.
func (m *Model) noise() float64 {
	s := m.cfg.NoiseStart
	return (m.resSS + m.cfg.NoisePseudo*s*s) / (m.resN + m.cfg.NoisePseudo)
}

// boundResidual is residual e bounded to ResidualClip standard deviations
// of the residual noise v; ok is false when e is within the bound (or the
// bound is off) and e stands as it is.
func (m *Model) boundResidual(e, v float64) (float64, bool) {
	h := m.cfg.ResidualClip * math.Sqrt(v)
	if !(h > 0 && math.Abs(e) > h) {
		return e, false
	}
	return math.Copysign(h, e), true
}

// Weight is the importance weight of a reward whose action was drawn with
// probability p among k eligible actions: (1/(k·p))^α, so a draw as likely
// as under uniform logging weighs 1. No logged distribution weighs 1.
func (m *Model) Weight(p float64, k int) float64 {
	if !(p > 0 && p <= 1) || k < 1 {
		return 1
	}
	return math.Pow(float64(k)*p, -m.cfg.ImportanceAlpha)
}

// Fold adds one final reward (cents) of arm a for customer c with
// importance weight w. The residual against the current fit feeds the
// robust variance (half the squared residual, half the pooled variance, so
// a handful of zero rewards cannot make an action look certain).
func (m *Model) Fold(c *Customer, a *Arm, reward, w float64) {
	if !(w > 0) || math.IsNaN(reward) || math.IsInf(reward, 0) {
		return
	}
	var x [dimBase]float64
	baseFeatures(c, &x)
	y := reward - c.Base
	pred := dot(m.beta, x[:])
	var psi [dimEffect]float64
	var arm *armStats
	if a.ID != 0 {
		effectFeatures(c, a, &x, &psi)
		setShared(&x, &psi)
		pred = dot(m.beta, x[:])
		y -= psi[psiPrior]
		arm = m.arms[a.ID]
		if arm == nil {
			arm = newArm()
			m.arms[a.ID] = arm
		}
		if arm.delta != nil {
			pred += dot(arm.delta, psi[:])
		}
	}
	e := y - pred
	v := m.noise()
	sq := e * e // e's share of v
	if b, ok := m.boundResidual(e, v); ok {
		e, y, sq = b, pred+b, v
	}
	m.resN++
	m.resSS += sq
	meat := w * w * (e*e + v) / 2
	rankOne(m.phi, x[:], x[:], w)
	addTo(m.bPhi, x[:], w*y)
	rankOne(m.mPhi, x[:], x[:], meat)
	if arm != nil {
		rankOne(arm.c, x[:], psi[:], w)
		rankOne(arm.psi, psi[:], psi[:], w)
		addTo(arm.b, psi[:], w*y)
		rankOne(arm.mC, x[:], psi[:], meat)
		rankOne(arm.mPsi, psi[:], psi[:], meat)
		arm.n++
	}
	m.n++
	m.sinceFit++
}

// lambdas returns the ridge of φ's and ψ's coordinates at noise v.
func (m *Model) lambdas(v float64) (lb [dimBase]float64, le [dimEffect]float64) {
	for i := range lb {
		lb[i] = m.cfg.BaseRidge
	}
	lb[phiBase] = v / (m.cfg.TauBase * m.cfg.TauBase)
	for k := 0; k < nShared; k++ {
		t := m.cfg.TauEffect
		switch k {
		case 0:
			t = m.cfg.TauShared
		case 1:
			t = m.cfg.TauPrior
		}
		lb[phiShared+k] = v / (t * t)
	}
	for j := range le {
		t := m.tau(j)
		le[j] = v / (t * t)
	}
	return lb, le
}

// tau is the prior standard deviation of ψ's coordinate j: the effect's
// level (TauLevel, fixed), the prior effect's correction (evidence) or an
// interaction (evidence).
func (m *Model) tau(j int) float64 {
	switch j {
	case 0:
		return m.cfg.TauLevel
	case psiPrior:
		return m.tauP
	}
	return m.tauE
}

// Refit solves the joint regression from the statistics, computes every
// action's effect covariance and updates the evidence for the ridge
// strengths (one fixed-point step per refit). See POLICY.md for the
// algebra of the arrow-shaped system.
func (m *Model) Refit() {
	for i := 0; i < evidenceSteps; i++ {
		m.evidenceFit()
	}
	m.fit()
}

// evidenceSteps is the number of evidence fixed-point steps per Refit.
const evidenceSteps = 3

// evidenceFit solves for the point estimates alone and takes one evidence
// step. The step reads only the estimates and the posterior precision's
// diagonal, so the covariances (most of fit's work) are left to the fit
// that follows the steps.
func (m *Model) evidenceFit() {
	const D, E = dimBase, dimEffect
	v := m.noise()
	lb, le := m.lambdas(v)
	blks, sinv := m.solveBase(lb[:], le[:], m.armIDs())
	var ev evidenceSums
	for k := range blks {
		b := &blks[k]
		m.solveArm(b)
		if b.a.n > 0 {
			ev.add(b, mul(b.g, sinv, E, D, D), le[:])
		}
	}
	m.evidenceStep(ev)
}

// solveArm sets action b's δₐ = Pinvₐ(bₐ − Cₐᵀβ) from the solved β.
func (m *Model) solveArm(b *fitBlock) {
	const D, E = dimBase, dimEffect
	a := b.a
	rb := slices.Clone(a.b)
	addTo(rb, mulVec(transpose(a.c, D, E), m.beta, E, D), -1)
	a.delta = mulVec(b.pinv, rb, E, E)
}

// fit solves the regression and its covariances.
func (m *Model) fit() {
	v := m.noise()
	lb, le := m.lambdas(v)
	ids := m.armIDs()
	blks, sinv := m.solveBase(lb[:], le[:], ids)
	core, mbb := m.meatCore(v, lb[:], le[:], blks)
	// Var(θ_φ) = S⁻¹·core·S⁻¹; keep the pooled coupon effect's block.
	const D = dimBase
	rows := sinv[phiShared*D : (phiShared+nShared)*D] // nShared×D
	vs := mul(mul(rows, core, nShared, D, D), transpose(rows, nShared, D), nShared, D, nShared)
	m.sharedCov = symmetrize(vs, nShared)
	m.fitArms(blks, sinv, core, mbb, ids)
	m.sinceFit = 0
}

// fitBlock is one action's block of the arrow-shaped system.
type fitBlock struct {
	a    *armStats
	pinv []float64 // (Ψ + Λₑ)⁻¹
	g    []float64 // Pinv·Cᵀ, E×D
}

// solveBase eliminates the action blocks (Schur complement) and solves
// for β; it returns the blocks and S⁻¹.
func (m *Model) solveBase(lb, le []float64, ids []int) ([]fitBlock, []float64) {
	const D, E = dimBase, dimEffect
	s := slices.Clone(m.phi)
	for i := 0; i < D; i++ {
		s[i*D+i] += lb[i]
	}
	rhs := slices.Clone(m.bPhi)
	blks := make([]fitBlock, len(ids))
	for k, id := range ids {
		a := m.arms[id]
		p := slices.Clone(a.psi)
		for i := 0; i < E; i++ {
			p[i*E+i] += le[i]
		}
		pinv := invSPD(p, E)
		g := mul(pinv, transpose(a.c, D, E), E, E, D)
		addTo(s, mul(a.c, g, D, E, D), -1)
		addTo(rhs, mulVec(transpose(g, E, D), a.b, D, E), -1)
		blks[k] = fitBlock{a, pinv, g}
	}
	sinv := invSPD(symmetrize(s, D), D)
	m.beta = mulVec(sinv, rhs, D, D)
	return blks, sinv
}

// meatCore returns core = M'_φφ − Q − Qᵀ + P (the meat with the prior's
// part, M + v·Λ, seen through the elimination) and each block's M'ₐₐ.
func (m *Model) meatCore(v float64, lb, le []float64, blks []fitBlock) (core []float64, mbb [][]float64) {
	const D, E = dimBase, dimEffect
	mPhi := slices.Clone(m.mPhi)
	for i := 0; i < D; i++ {
		mPhi[i*D+i] += v * lb[i]
	}
	p := make([]float64, D*D) // Σ T_b M_bb T_bᵀ
	q := make([]float64, D*D) // Σ M_φb T_bᵀ
	mbb = make([][]float64, len(blks))
	for k, b := range blks {
		mb := slices.Clone(b.a.mPsi)
		for i := 0; i < E; i++ {
			mb[i*E+i] += v * le[i]
		}
		mbb[k] = mb
		t := transpose(b.g, E, D) // D×E
		addTo(p, mul(mul(t, mb, D, E, E), b.g, D, E, D), 1)
		addTo(q, mul(b.a.mC, b.g, D, E, D), 1)
	}
	core = mPhi
	addTo(core, q, -1)
	addTo(core, transpose(q, D, D), -1)
	addTo(core, p, 1)
	return core, mbb
}

// evidenceSums are the sums of one evidence step: Σ δ² and Σ γ of the
// interactions (num, den) and of the prior effect's correction (numP,
// denP).
type evidenceSums struct{ num, den, numP, denP float64 }

// fitArms solves each action's δₐ and its covariances. Per action: Wₐ =
// Gₐ S⁻¹ and Lₐ = Pinvₐ(M'ₐₐ Gₐ − M_φaᵀ); then Cov(δₐ, δ_b) = (Wₐ·core +
// Lₐ)W_bᵀ + Wₐ L_bᵀ (+ Pinvₐ M'ₐₐ Pinvₐ when a = b) and Cov(β, δₐ) =
// −S⁻¹(Wₐ·core + Lₐ)ᵀ. See POLICY.md.
func (m *Model) fitArms(blks []fitBlock, sinv, core []float64, mbb [][]float64, ids []int) {
	const D, E = dimBase, dimEffect
	ws := make([][]float64, len(blks))
	ls := make([][]float64, len(blks))
	wcl := make([][]float64, len(blks))
	for k, b := range blks {
		a := b.a
		m.solveArm(&b)
		w := mul(b.g, sinv, E, D, D)
		l := mul(mbb[k], b.g, E, E, D)
		addTo(l, transpose(a.mC, D, E), -1)
		l = mul(b.pinv, l, E, E, D)
		wc := mul(w, core, E, D, D)
		addTo(wc, l, 1)
		ws[k], ls[k], wcl[k] = w, l, wc
		cov := m.crossCov(wc, w, w, l)
		addTo(cov, mul(mul(b.pinv, mbb[k], E, E, E), b.pinv, E, E, E), 1)
		a.cov = symmetrize(cov, E)
		// Cov(β, δₐ) = −S⁻¹(Wₐ·core + Lₐ)ᵀ; keep β's pooled rows.
		a.shX = mul(sinv[phiShared*D:(phiShared+nShared)*D], transpose(wc, E, D), nShared, D, E)
		for i := range a.shX {
			a.shX[i] = -a.shX[i]
		}
	}
	m.cross = map[[2]int][]float64{}
	m.popApart = map[[2]int]bool{}
	for i := range blks {
		for j := i + 1; j < len(blks); j++ {
			key := [2]int{ids[i], ids[j]}
			m.cross[key] = m.crossCov(wcl[i], ws[i], ws[j], ls[j])
			m.popApart[key] = m.apartOverall(blks[i].a, blks[j].a, m.cross[key])
		}
	}
}

// add adds action b's coefficients: γ_j = 1 − λ_j·(A⁻¹)_jj, with
// (A⁻¹)ₐₐ = Pinv + Wₐ·Gₐᵀ.
func (ev *evidenceSums) add(b *fitBlock, w, le []float64) {
	const D, E = dimBase, dimEffect
	a := b.a
	for j := 0; j < E; j++ {
		d := b.pinv[j*E+j] + dot(w[j*D:(j+1)*D], b.g[j*D:(j+1)*D])
		gam := math.Min(math.Max(1-le[j]*d, 0), 1)
		switch j {
		case 0:
		case psiPrior:
			ev.numP += a.delta[j] * a.delta[j]
			ev.denP += gam
		default:
			ev.num += a.delta[j] * a.delta[j]
			ev.den += gam
		}
	}
}

// evidenceStep takes one step of MacKay's fixed point for the prior
// standard deviations of the interactions and of the prior effect's
// correction, with a weak hyperprior.
func (m *Model) evidenceStep(ev evidenceSums) {
	h := m.cfg.HyperPseudo
	if ev.den > 0 {
		t2 := (ev.num + h*m.cfg.TauEffect*m.cfg.TauEffect) / (ev.den + h)
		m.tauE = clamp(math.Sqrt(t2), m.cfg.TauEffect/30, m.cfg.TauEffect*3)
	}
	if ev.denP > 0 {
		t2 := (ev.numP + m.cfg.TauPrior*m.cfg.TauPrior) / (ev.denP + 1)
		m.tauP = clamp(math.Sqrt(t2), m.cfg.TauPrior/10, m.cfg.TauPrior*4)
	}
}

// apartOverall reports whether actions a and b differ with confidence
// on average over the customers who received either (PopZ standard
// errors): the mean ψ of their samples, each with its own prior effect
// and affinity terms.
func (m *Model) apartOverall(a, b *armStats, cov []float64) bool {
	const E = dimEffect
	na, nb := a.psi[0], b.psi[0] // Σw: ψ₀ = 1
	if na <= 0 || nb <= 0 {
		return false
	}
	var pa, pb [E]float64
	for j := 0; j < E; j++ {
		mean := (a.psi[j] + b.psi[j]) / (na + nb)
		pa[j], pb[j] = mean, mean
	}
	for _, j := range []int{psiPrior, 2, 3, 4} {
		pa[j], pb[j] = a.psi[j]/na, b.psi[j]/nb
	}
	d := pa[psiPrior] + dot(pa[:], a.delta) - pb[psiPrior] - dot(pb[:], b.delta)
	v := quad(a.cov, pa[:], E) + quad(b.cov, pb[:], E)
	for i := 0; i < E; i++ {
		v -= 2 * pa[i] * dot(cov[i*E:(i+1)*E], pb[:])
	}
	return math.Abs(d) > m.cfg.PopZ*math.Sqrt(math.Max(v, 0))
}

// crossCov returns (Wₐ·core + Lₐ)W_bᵀ + Wₐ L_bᵀ, E×E, given wcl =
// Wₐ·core + Lₐ.
func (m *Model) crossCov(wcl, wa, wb, lb []float64) []float64 {
	const D, E = dimBase, dimEffect
	c := mul(wcl, transpose(wb, E, D), E, D, E)
	addTo(c, mul(wa, transpose(lb, E, D), E, D, E), 1)
	return c
}

func (m *Model) armIDs() []int {
	ids := make([]int, 0, len(m.arms))
	for id := range m.arms {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func symmetrize(a []float64, n int) []float64 {
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			v := (a[i*n+j] + a[j*n+i]) / 2
			a[i*n+j], a[j*n+i] = v, v
		}
	}
	return a
}

func clamp(x, lo, hi float64) float64 { return math.Min(math.Max(x, lo), hi) }
