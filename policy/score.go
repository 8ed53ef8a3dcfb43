package policy

import "math"

// Score is the model's view of one candidate action for one customer.
type Score struct {
	ID int
	// Mu is the expected reward (cents over the window); Effect is Mu minus
	// never-send's Mu (0 for never-send, the reference).
	Mu, Effect float64
	// Width is the width the decision rules read (send, explore, tie with
	// never-send): the variances of Effect's two parts, the pooled coupon
	// effect's and the action's own, summed as if they were independent.
	// Where the features cannot tell the two apart (a feature the same for
	// every customer, such as a frequency bin all of them share), the parts
	// trade off and Width stays near the priors' scale (TauEffect,
	// TauLevel) while the standard error (Model.Sigma) shrinks with the
	// data: a margin of about a prior's width on top of the evidence. The
	// rules were tuned on it; with the standard error in its place they
	// lose the scenario lines (POLICY.md §7.12).
	Width float64

	psi    [dimEffect]float64 // the pair's features, for covariances (EffectSum too)
	fitted bool               // the action has data: own is from its fit
	own    float64            // variance of the action's own part of Effect
	sh     [nShared]float64   // the pooled effect's terms
	// band is the customer's frequency band (the gate's).
	band int8
	// down is the arm's Downside.
	down float64
}

// Score fills out[i] for arms[i] (out has len(arms)). Never-send is the
// arm with ID 0.
func (m *Model) Score(c *Customer, arms []Arm, out []Score) {
	var x [dimBase]float64
	baseFeatures(c, &x)
	base := c.Base + dot(m.beta, x[:])
	band := int8(bandOf(c))
	var psi [dimEffect]float64
	effectCustomer(&x, &psi) // the arms fill in their own terms
	for i := range arms {
		a := &arms[i]
		sc := &out[i]
		*sc = Score{ID: a.ID, Mu: base, band: band, down: a.Downside}
		if a.ID != 0 {
			effectArm(c, a, &psi)
			sc.psi = psi
			for k, j := range [nShared]int{0, psiPrior, 2, 7, 5, 10, 11, 12} {
				sc.sh[k] = psi[j]
			}
			eff := psi[psiPrior] + dot(m.beta[phiShared:phiShared+nShared], sc.sh[:])
			if st := m.arms[a.ID]; st != nil && st.delta != nil {
				eff += dot(st.delta, psi[:])
				sc.own = quad(st.cov, psi[:], dimEffect)
				sc.fitted = true
			} else {
				sc.own = m.priorVar(&psi)
			}
			v := max(sc.own, 0)
			if m.sharedCov != nil {
				v += max(quad(m.sharedCov, sc.sh[:], nShared), 0)
			}
			sc.Effect, sc.Width, sc.Mu = eff, math.Sqrt(v), base+eff
		}
	}
}

// Sigma is the standard error of s.Effect (0 for never-send): Width with
// the covariance of the pooled and own parts, which the fit keeps per
// action (armStats.shX). s must come from this model's Score. The rules
// read Width; the standard error is computed only when asked: for the
// chosen coupon of a testing band (choiceShare), the API's detalle and
// RewardModel.Predict.
func (m *Model) Sigma(s *Score) float64 {
	st := m.arms[s.ID]
	if s.ID == 0 || !s.fitted || st == nil || st.shX == nil {
		return s.Width
	}
	return math.Sqrt(math.Max(s.Width*s.Width+2*bilinear(st.shX, s.sh[:], s.psi[:]), 0))
}

// priorVar is the variance of an action's own effect without data: the
// ridge prior's.
func (m *Model) priorVar(psi *[dimEffect]float64) float64 {
	var v float64
	for j, p := range psi {
		t := m.tau(j)
		v += t * t * p * p
	}
	return v
}

// Greedy returns the index of the learned policy's choice, without the
// guard and without exploration. With Config.Gate (the default) it is
// gateChoice's: never-send unless some coupon's effect is above GateSendZ
// widths (Score.Width; GateOpenSendZ in an open band), then the coupon of
// highest expected effect. Without,
// among the coupons that are safe (lower confidence bound Effect − Z·Width
// above never-send's 0), the one of highest expected effect; never-send
// when none is safe.
func (m *Model) Greedy(sc []Score) int {
	if m.cfg.Gate {
		return m.gateChoice(sc)
	}
	return m.greedyZ(sc, m.cfg.Z)
}

// greedyZ is Greedy with the send rule's width z.
func (m *Model) greedyZ(sc []Score, z float64) int {
	top, zero := -1, -1
	for i := range sc {
		s := &sc[i]
		if s.ID == 0 {
			zero = i
			continue
		}
		if s.Effect-z*m.barWidth(s) > 0 && (top < 0 || s.Effect > sc[top].Effect) {
			top = i
		}
	}
	switch {
	case top >= 0:
		return top
	case zero >= 0:
		return zero
	}
	for i := range sc { // no never-send among the candidates
		if top < 0 || sc[i].Effect > sc[top].Effect {
			top = i
		}
	}
	return top
}

// barWidth is the width the send bar reads for s: Width, or, under the
// gate while the tenant is younger than GateDownAge windows or where the
// customer's band is open (GateDownOpen, the guard holding no one back),
// the arm's downside where it is known and smaller. The bar stands for
// the loss a wrong send risks; a send can lose no more than its downside
// unless the coupon makes customers buy less, which the prior does not
// expect.
func (m *Model) barWidth(s *Score) float64 {
	if !m.cfg.Gate || !(s.down > 0) {
		return s.Width
	}
	young := m.cfg.GateDownAge > 0 && m.guard.Windows < m.cfg.GateDownAge
	if !young && !(m.cfg.GateDownOpen && m.bandOpen(s.band)) {
		return s.Width
	}
	return math.Min(s.Width, s.down)
}

// Distribution writes into probs (len(sc)) the probabilities to draw each
// action with, and returns the index of the policy's choice (the guard's
// baseline while the guard is active, else Greedy). Each other action a is
// explored with ε(n)/(k−1)·min(1, 2·Φ(−gap/sd)), gap its effect's
// shortfall from the choice's and sd the standard error of the difference:
// an action that is surely worse is hardly explored, one as good as the
// choice fully; the rest goes to the choice. Then the coupons tied with
// the leading coupon (tied: neither their average effects over their
// customers differ by PopZ standard errors, nor their effects for this
// customer by TieZ) get the same probability, their mean, so the model does not
// pick a side that its data cannot support (evenTies; not while the guard
// exploits its baseline). The floor is spread over all. The probabilities are exactly those to draw
// from and to log.
func (m *Model) Distribution(sc []Score, probs []float64) int {
	k := len(sc)
	for i := range probs {
		probs[i] = 0
	}
	if k == 0 {
		return -1
	}
	if k == 1 {
		probs[0] = 1
		return 0
	}
	if m.cfg.Gate {
		return m.distributionGate(sc, probs)
	}
	top, guarded := m.Greedy(sc), false
	if g := m.guard; g.Active {
		top, guarded = indexOf(sc, g.Baseline), true
		if top < 0 {
			top = indexOf(sc, 0)
		}
		if top < 0 {
			top, guarded = m.Greedy(sc), false
		}
	}
	t := &sc[top]
	floor := m.cfg.Floor
	eps := m.Epsilon()
	explore := 0.0
	for i := range sc {
		s := &sc[i]
		if i == top {
			continue
		}
		w := 0.0
		if sd := m.diffSE(s, t, false); sd > 0 {
			w = math.Min(1, math.Erfc((t.Effect-s.Effect)/sd/math.Sqrt2))
		}
		probs[i] = eps / float64(k-1) * w
		explore += probs[i]
	}
	probs[top] = 1 - floor - explore
	if !guarded {
		if w := m.evenTies(sc, probs); w >= 0 {
			top = w
		}
	}
	m.keepNever(sc, probs, 1-floor)
	for i := range probs {
		probs[i] += floor / float64(k)
	}
	return top
}

// keepNever raises never-send's probability to NeverShare of the mass
// (taken from the others in proportion), so the guard can always tell
// what never sending earns: its pseudo-outcomes weigh at most
// 1/NeverShare.
func (m *Model) keepNever(sc []Score, probs []float64, mass float64) {
	z := indexOf(sc, 0)
	want := m.cfg.NeverShare * mass
	if z < 0 || probs[z] >= want {
		return
	}
	rest := mass - probs[z]
	if rest <= 0 {
		return
	}
	f := (mass - want) / rest
	for i := range probs {
		if i != z {
			probs[i] *= f
		}
	}
	probs[z] = want
}

// evenTies gives the coupons that the data cannot tell apart from the
// leading coupon (highest expected effect) the same probability: their
// mean. With Config.TieTopTwo only the lead and its strongest challenger
// (the tied coupon of highest effect) share it, as in top-two sampling
// (Russo 2016): two equal coupons stay even, and where many coupons are
// tied the lead's mass is not spread over those the estimate ranks below
// both (POLICY.md §7.10). When the pair's duel has settled the tie, its
// winner takes the pair's mass and evenTies returns its index: the
// policy's choice from then on (what the record logs, and what explorado
// compares with); else -1.
func (m *Model) evenTies(sc []Score, probs []float64) int {
	lead := -1
	for i := range sc {
		if sc[i].ID != 0 && (lead < 0 || sc[i].Effect > sc[lead].Effect) {
			lead = i
		}
	}
	if lead < 0 {
		return -1
	}
	group, challenger := []int{lead}, -1
	for i := range sc {
		s := &sc[i]
		switch {
		case s.ID == 0 || i == lead || !m.tied(s, &sc[lead]):
		case !m.cfg.TieTopTwo:
			group = append(group, i)
		case challenger < 0 || s.Effect > sc[challenger].Effect:
			challenger = i
		}
	}
	if challenger >= 0 {
		if w, ok := m.duelWinner(sc[lead].ID, sc[challenger].ID); ok {
			// the pair's randomized duel has settled the tie: its
			// winner takes the pair's mass
			win, lose := lead, challenger
			if sc[challenger].ID == w {
				win, lose = challenger, lead
			}
			probs[win] += probs[lose]
			probs[lose] = 0
			return win
		}
		group = append(group, challenger)
	}
	var sum float64
	for _, i := range group {
		sum += probs[i]
	}
	for _, i := range group {
		probs[i] = sum / float64(len(group))
	}
	return -1
}

// tied reports whether the data cannot tell coupons a and b apart: not on
// average over their customers (PopZ), nor for this customer (TieZ).
func (m *Model) tied(a, b *Score) bool {
	x, y := a.ID, b.ID
	if x > y {
		x, y = y, x
	}
	if m.popApart[[2]int{x, y}] {
		return false
	}
	return math.Abs(a.Effect-b.Effect) < m.cfg.TieZ*m.diffSE(a, b, true)
}

// diffSE is the width of a's effect minus b's, on Width's basis (the
// pooled and own parts as if independent): the pooled effect's part of the
// difference, their own parts, and with cross their covariance when both
// are fitted (without it the width is larger when they covary positively,
// as actions sharing a baseline do: exploration weights use that cheaper
// bound). Against never-send it is the coupon's Width.
func (m *Model) diffSE(a, b *Score, cross bool) float64 {
	if a.ID == 0 || b.ID == 0 {
		return math.Hypot(a.Width, b.Width)
	}
	v := a.own + b.own
	if m.sharedCov != nil {
		var d [nShared]float64
		for k := range d {
			d[k] = a.sh[k] - b.sh[k]
		}
		v += quad(m.sharedCov, d[:], nShared)
	}
	if cross && a.fitted && b.fitted && a.ID != b.ID {
		x, y := a, b
		if x.ID > y.ID {
			x, y = y, x
		}
		if c := m.cross[[2]int{x.ID, y.ID}]; c != nil {
			v -= 2 * bilinear(c, x.psi[:], y.psi[:])
		}
	}
	return math.Sqrt(max(v, 0))
}

func indexOf(sc []Score, id int) int {
	for i := range sc {
		if sc[i].ID == id {
			return i
		}
	}
	return -1
}

// Epsilon is the exploration share after the model's rewards.
func (m *Model) Epsilon() float64 {
	return m.cfg.Eps0 * math.Sqrt(m.cfg.EpsN0/(m.cfg.EpsN0+m.n))
}
