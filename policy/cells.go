package policy

import "math"

// The cell model (Config.Cells): what decides whether and what to send.
//
// Every (customer, action) pair falls in one cell: the customer's purchase
// frequency band (four bands of frecuencia_365d) crossed with a group (the
// customer's dominant main category, no dominant category, or "buys the
// action's categorias"). In each cell the model compares the rewards of
// the customers who got the action with those of the customers who could
// have got it and got nothing, both taken as residuals against the
// regression's never-send baseline (the customer's expected margin
// without a coupon), so what the customer would buy anyway cancels. That
// difference is the action's effect in the cell, with a variance that
// mixes the cell's own spread with the pooled one (CellPseudo rewards'
// worth), so a handful of zeros cannot make an effect look certain.
//
// The effects are shrunk in three levels (empirical Bayes): the action as
// a whole (its prior: the economic prior's effect times a calibration κ
// learned from every action's data), its frequency bands, its cells. How
// far a band may stray from its action, and a cell from its band, are
// variances estimated from the data (method of moments), so a group whose
// own sends say "no response" is believed as soon as its data are strong
// enough, and a cell with few data borrows from its band.
//
// Decisions draw by probability matching: each action's chance is the
// chance that it is the best, from pairwise normal comparisons of the
// effects (never-send is 0, exactly), so the engine explores what might
// be best, stops sending what surely loses, and keeps two actions that
// the data cannot tell apart even.

const (
	nBands  = 4
	nGroups = NumCats + 2 // dominant main category k, none (NumCats), the action's categorias (NumCats+1)
	nCells  = nBands * nGroups
)

// bandTops are the upper bounds of the frequency bands on frecuencia_365d
// = log1p(n)/log1p(365), n the tickets in the last 365 days: at most one,
// 2–7, 8–25 and more.
var bandTops = [nBands - 1]float64{0.15, 0.36, 0.55}

// cellOf returns the cell of customer c and coupon a.
func cellOf(c *Customer, a *Arm) int {
	band := bandOf(c)
	g := NumCats
	if a.AffShare >= 0.3 {
		g = NumCats + 1
	} else {
		best := 0.4
		for k, s := range c.Shares {
			if k < NumCats && s >= best {
				best, g = s, k
			}
		}
	}
	return band*nGroups + g
}

// moments are the weighted sums of one sample set: weights, squared
// weights, residuals (cents), squared residuals, prior effects (cents).
type moments struct {
	N  float64 `json:"n"`
	W2 float64 `json:"w2"`
	S  float64 `json:"s"`
	SS float64 `json:"ss"`
	PE float64 `json:"pe"`
}

func (s *moments) add(r, pe, w float64) {
	s.N += w
	s.W2 += w * w
	s.S += w * r
	s.SS += w * r * r
	s.PE += w * pe
}

func (s *moments) merge(o *moments) {
	s.N += o.N
	s.W2 += o.W2
	s.S += o.S
	s.SS += o.SS
	s.PE += o.PE
}

func (s *moments) scale(f float64) {
	s.N *= f
	s.W2 *= f * f
	s.S *= f
	s.SS *= f
	s.PE *= f
}

// neff is the effective number of samples (Kish): (Σw)²/Σw².
func (s *moments) neff() float64 {
	if !(s.W2 > 0) {
		return 0
	}
	return s.N * s.N / s.W2
}

func (s *moments) finite() bool {
	return finite([]float64{s.N, s.W2, s.S, s.SS, s.PE}) && s.N >= 0 && s.W2 >= 0 && s.SS >= 0
}

// cellArm are one coupon's cell statistics and fit.
type cellArm struct {
	T [nCells]moments // customers who got the coupon
	C [nCells]moments // customers for whom it was a candidate and who got nothing
	// fit: posterior mean and variance of the effect per cell.
	mean, vari [nCells]float64
}

// FoldCells adds one final reward (cents) of arms[idx] for customer c to
// the cell statistics: to the coupon's treated cell, or, when nothing was
// sent, to the control cell of every coupon that was a candidate. The
// residual is taken against the current never-send baseline. probs, when
// it is the distribution the action was drawn from (len(arms)), weighs the
// reward by 1/p (capped at 1/CellMinProb): each cell's means are then
// those of "always a" and "never" over the decisions the cell saw, however
// the policy's shares moved over time (Hájek). Without probs every reward
// weighs 1. Without Config.Cells it keeps nothing.
func (m *Model) FoldCells(c *Customer, arms []Arm, idx int, reward float64, probs []float64) {
	if !m.KeepsCells() || idx < 0 || idx >= len(arms) || math.IsNaN(reward) || math.IsInf(reward, 0) {
		return
	}
	w := 1.0
	if len(probs) == len(arms) && probs[idx] > 0 {
		w = 1 / math.Max(probs[idx], m.cfg.CellMinProb)
	}
	res := reward - m.baseline(c)
	if a := &arms[idx]; a.ID != 0 {
		m.cellArm(a.ID).T[cellOf(c, a)].add(res, a.Prior-c.Base, w)
		return
	}
	for i := range arms {
		if a := &arms[i]; a.ID != 0 {
			m.cellArm(a.ID).C[cellOf(c, a)].add(res, a.Prior-c.Base, w)
		}
	}
}

// KeepsCells reports whether the model keeps the cell statistics
// (Config.Cells): without them FoldCells does nothing, and a caller need
// not build its arguments.
func (m *Model) KeepsCells() bool { return m.cfg.Cells }

// baseline is the model's expected reward of sending nothing (cents).
func (m *Model) baseline(c *Customer) float64 {
	var x [dimBase]float64
	baseFeatures(c, &x)
	return c.Base + dot(m.beta, x[:])
}

func (m *Model) cellArm(id int) *cellArm {
	if m.cells == nil {
		m.cells = map[int]*cellArm{}
	}
	a := m.cells[id]
	if a == nil {
		a = &cellArm{}
		m.cells[id] = a
	}
	return a
}

// fadeCells scales the cell statistics by f (drift: old evidence fades).
func (m *Model) fadeCells(f float64) {
	for _, a := range m.cells {
		for k := range a.T {
			a.T[k].scale(f)
			a.C[k].scale(f)
		}
	}
}

// cellEffect is the cell model's effect of coupon a for customer c and its
// standard error.
func (m *Model) cellEffect(c *Customer, a *Arm) (eff, sd float64) {
	pe := a.Prior - c.Base
	st := m.cells[a.ID]
	if st == nil || st.vari[0] == 0 {
		return m.cellFit.kappa * pe, math.Sqrt(m.cellFit.priorVar())
	}
	k := cellOf(c, a)
	return st.mean[k], math.Sqrt(st.vari[k])
}

// greedyCells is the cell model's choice without exploration: the coupon
// of highest expected effect when that effect is above never-send's 0,
// else never-send.
func greedyCells(sc []Score) int {
	top, zero := -1, -1
	for i := range sc {
		switch {
		case sc[i].ID == 0:
			zero = i
		case top < 0 || sc[i].Effect > sc[top].Effect:
			top = i
		}
	}
	if zero >= 0 && (top < 0 || sc[top].Effect <= 0) {
		return zero
	}
	return top
}

// distributionCells is Distribution with the cell model: probability
// matching (matchProbs); while the guard is active its baseline takes all
// but CellGuardShare of the mass (the rest still matched, so learning
// goes on); never-send keeps NeverShare; CellFloor is spread over all. It
// returns the index of the most probable action.
func (m *Model) distributionCells(sc []Score, probs []float64) int {
	m.matchProbs(sc, probs)
	if g := m.guard; g.Active {
		if b := indexOf(sc, g.Baseline); b >= 0 {
			s := m.cfg.CellGuardShare
			for i := range probs {
				probs[i] *= s
			}
			probs[b] += 1 - s
		}
	}
	floor := m.cfg.CellFloor
	for i := range probs {
		probs[i] *= 1 - floor
	}
	m.keepNever(sc, probs, 1-floor)
	top := 0
	for i := range probs {
		probs[i] += floor / float64(len(probs))
		if probs[i] > probs[top] {
			top = i
		}
	}
	return top
}

// matchProbs writes into probs each action's chance of being the best,
// approximated by the product of its pairwise chances of beating each
// other action (normal effects, independent), normalised.
func (m *Model) matchProbs(sc []Score, probs []float64) {
	temper, margin := m.cfg.CellTemper, m.cfg.CellMargin
	var sum float64
	for i := range sc {
		p := 1.0
		for j := range sc {
			if j != i {
				p *= m.beats(&sc[i], &sc[j], temper, margin)
			}
		}
		probs[i] = p
		sum += p
	}
	for i := range probs {
		if sum > 0 {
			probs[i] /= sum
		} else {
			probs[i] = 1 / float64(len(probs))
		}
	}
	m.evenCellTies(sc, probs)
}

// evenCellTies gives the coupons tied with the leading one (effects within
// CellTieZ standard errors of the difference) the same probability, their
// mean: each also beats never-send by a slightly different chance, which
// must not pick a side the data cannot support.
func (m *Model) evenCellTies(sc []Score, probs []float64) {
	lead := -1
	for i := range sc {
		if sc[i].ID != 0 && (lead < 0 || sc[i].Effect > sc[lead].Effect) {
			lead = i
		}
	}
	if lead < 0 {
		return
	}
	var sum float64
	var group []int
	for i := range sc {
		if sc[i].ID != 0 && math.Abs(sc[i].Effect-sc[lead].Effect) < m.cfg.CellTieZ*math.Hypot(sc[i].Sigma, sc[lead].Sigma) {
			group = append(group, i)
			sum += probs[i]
		}
	}
	for _, i := range group {
		probs[i] = sum / float64(len(group))
	}
}

// beats is the chance that a's effect is above b's, their standard
// errors scaled by temper. Two coupons whose effects differ by less than
// TieZ (untempered) standard errors are even: the data cannot tell them
// apart, so neither is favoured.
func (m *Model) beats(a, b *Score, temper, margin float64) float64 {
	d, sd := a.Effect-b.Effect, math.Hypot(a.Sigma, b.Sigma)
	switch {
	case a.ID == 0:
		d += margin
	case b.ID == 0:
		d -= margin
	case math.Abs(d) < m.cfg.CellTieZ*sd:
		return 0.5
	}
	sd *= temper
	if !(sd > 0) {
		switch {
		case d > 0:
			return 1
		case d < 0:
			return 0
		}
		return 0.5
	}
	return 0.5 * math.Erfc(-d/sd/math.Sqrt2)
}

// matchedValue is the pseudo-outcome of the learned policy as it draws
// without the guard (matching, never-send's share, the floor): Σ π(b)·Γ(b).
// With the cell model the guard judges that policy, exploration included,
// since that is what the retailer gets.
func (m *Model) matchedValue(sc []Score, gamma func(int) float64) float64 {
	probs := make([]float64, len(sc))
	saved := m.guard.Active
	m.guard.Active = false
	m.distributionCells(sc, probs)
	m.guard.Active = saved
	var v float64
	for i, p := range probs {
		v += p * gamma(i)
	}
	return v
}
