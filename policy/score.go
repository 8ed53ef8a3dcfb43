package policy

import "math"

// Score is the model's view of one candidate action for one customer.
type Score struct {
	ID int
	// Mu is the expected reward (cents over the window); Effect is Mu minus
	// never-send's Mu; Sigma is the standard error of Effect (0 for
	// never-send, the reference).
	Mu, Effect, Sigma float64
}

// Score fills out[i] for arms[i] (out has len(arms)). Never-send is the
// arm with ID 0.
func (m *Model) Score(c *Customer, arms []Arm, out []Score) {
	var x [dimBase]float64
	baseFeatures(c, &x)
	base := c.Base + dot(m.beta, x[:])
	var psi [dimEffect]float64
	for i := range arms {
		a := &arms[i]
		sc := Score{ID: a.ID, Mu: base}
		if a.ID != 0 {
			effectFeatures(c, a, &x, &psi)
			eff, v := psi[psiPrior], 0.0
			if st := m.arms[a.ID]; st != nil && st.delta != nil {
				eff += dot(st.delta, psi[:])
				v = quad(st.cov, psi[:], dimEffect)
			} else {
				v = m.priorVar(&psi)
			}
			sc.Effect, sc.Sigma, sc.Mu = eff, math.Sqrt(math.Max(v, 0)), base+eff
		}
		out[i] = sc
	}
}

// priorVar is the variance of an effect without data: the ridge prior's.
func (m *Model) priorVar(psi *[dimEffect]float64) float64 {
	var v float64
	for j, p := range psi {
		t := m.tauE
		if j == psiPrior {
			t = m.tauP
		}
		v += t * t * p * p
	}
	return v
}

// Greedy returns the index of the action with the best lower confidence
// bound on its effect, Effect − Z·Sigma (never-send's is 0): the learned
// policy's choice, without the guard and without exploration.
func (m *Model) Greedy(sc []Score) int {
	top, best := -1, math.Inf(-1)
	for i, s := range sc {
		if l := s.Effect - m.cfg.Z*s.Sigma; l > best || (l == best && s.ID == 0) {
			top, best = i, l
		}
	}
	return top
}

// Distribution writes into probs (len(sc)) the probabilities to draw each
// action with, and returns the index of the policy's choice (the guard's
// baseline while the guard is active, else Greedy). The choice and the
// actions tied with it (effects within TieZ standard errors of each
// other, each safe against never-send) share the exploitation mass
// evenly, so the model does not pick a side that its data cannot support.
// Each other action a is explored with ε(n)/(k−1)·min(1, 2·Φ(−gap/sd)),
// gap its effect's shortfall from the choice's and sd the standard error of
// the difference: an action that is surely worse is hardly explored, one
// as good as the choice fully; what they leave goes to the choice. The
// floor is spread over all. The probabilities are exactly those to draw
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
	t := sc[top]
	tied := make([]bool, k)
	nt := 0
	floor := m.cfg.Floor
	eps := m.Epsilon()
	explore := 0.0
	for i, s := range sc {
		sd := math.Hypot(s.Sigma, t.Sigma)
		switch {
		case i == top:
			tied[i] = true
			nt++
		case !guarded && s.ID != 0 && t.ID != 0 && s.Effect-m.cfg.Z*s.Sigma > 0 && math.Abs(s.Effect-t.Effect) < m.cfg.TieZ*sd:
			tied[i] = true
			nt++
		default:
			w := 0.0
			if sd > 0 {
				w = math.Min(1, math.Erfc((t.Effect-s.Effect)/sd/math.Sqrt2))
			}
			probs[i] = eps / float64(k-1) * w
			explore += probs[i]
		}
	}
	for i := range probs {
		if tied[i] {
			probs[i] = (1 - floor - explore) / float64(nt)
		}
		probs[i] = probs[i]*1 + floor/float64(k)
	}
	return top
}

func indexOf(sc []Score, id int) int {
	for i, s := range sc {
		if s.ID == id {
			return i
		}
	}
	return -1
}

// Epsilon is the exploration share after the model's rewards.
func (m *Model) Epsilon() float64 {
	return m.cfg.Eps0 * math.Sqrt(m.cfg.EpsN0/(m.cfg.EpsN0+m.n))
}
