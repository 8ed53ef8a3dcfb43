package policy

import "math"

// The ladder chooses how far the send rule trusts the model, by evidence.
// Config.Ladder lists send-rule widths Z from the most pessimistic (the
// first, where every tenant starts) to the least (0: send the coupon of
// highest expected effect whenever it is positive). Each rung i is a
// policy π_i of the same model: Greedy with Z = Ladder[i]. From the same
// logged decisions the guard folds (exact propensities, the model's μ at
// decision time), the ladder keeps every rung's doubly robust pseudo-
// outcome against never-send, D_i = Γ(π_i) − Γ(0), and their cross sums,
// so the paired difference of any two rungs has a mean and a standard
// error. UpdateLadder moves one rung toward less pessimism only when the
// next rung beats the current one and never-send, both by LadderUpZ
// standard errors over at least LadderMinN effective rewards; it moves
// back when the current rung loses to the one before it or to never-send
// by LadderDownZ standard errors. Evidence fades with a half-life of
// LadderHalfLife reward windows. While the next rung is not refuted its
// choice, where it differs from the current one, is drawn with at least
// LadderShare, so its importance weights stay at most 1/LadderShare.

// maxRungs bounds Config.Ladder (the ladder's sums are fixed arrays).
const maxRungs = 6

// Ladder is the ladder's state and evidence (kept in Guard, stored).
type Ladder struct {
	Rung  int `json:"rung"`
	Moves int `json:"moves"`
	// W, W2: sum of weights and of squared weights (fading); S[i] Σ D_i;
	// Q[i*maxRungs+j] Σ D_i·D_j.
	W  float64                      `json:"w"`
	W2 float64                      `json:"w2"`
	S  [maxRungs]float64            `json:"s"`
	Q  [maxRungs * maxRungs]float64 `json:"q"`
	// IW[i] is Σ 1/p of rung i's choice over the decisions where it
	// differs from the logged rung's choice (faded like W), IN their
	// weight, IMax the largest 1/p seen there: the importance weights
	// that rung i's estimate rests on.
	IW   [maxRungs]float64 `json:"iw"`
	IN   [maxRungs]float64 `json:"in"`
	IMax [maxRungs]float64 `json:"imax"`
	// H[i] counts (faded like W) the decisions where rung i's choice
	// differs from the logged rung's and was the action drawn: the
	// samples that carry rung i's own outcomes.
	H [maxRungs]float64 `json:"h"`
	// NextShut: the next rung lost to the current one with confidence
	// (LadderShutZ) at the last update: it gets no LadderShare until it
	// recovers.
	NextShut bool `json:"next_shut,omitempty"`
}

// rungs is the number of rungs in use (0 or 1: no ladder).
func (m *Model) rungs() int { return min(len(m.cfg.Ladder), maxRungs) }

// rung returns the current rung, within the configured ladder.
func (m *Model) rung() int {
	r := m.guard.Ladder.Rung
	return max(0, min(r, m.rungs()-1))
}

// sendZ is the send rule's width now: the current rung's, or Config.Z
// without a ladder.
func (m *Model) sendZ() float64 {
	if m.rungs() == 0 {
		return m.cfg.Z
	}
	return m.cfg.Ladder[m.rung()]
}

// observeLadder adds one logged decision's pseudo-outcomes: gamma(i) is
// Γ of arm i, zero never-send's index, p the logged probabilities.
func (m *Model) observeLadder(sc []Score, gamma func(int) float64, zero, logged int, p []float64) {
	n := m.rungs()
	if n < 2 {
		return
	}
	l := &m.guard.Ladder
	g0 := gamma(zero)
	var d [maxRungs]float64
	cur := m.greedyZ(sc, m.cfg.Ladder[m.rung()])
	for i := 0; i < n; i++ {
		c := m.greedyZ(sc, m.cfg.Ladder[i])
		d[i] = gamma(c) - g0
		if c != cur && p[c] > 0 { // p > 0 with Config.Floor > 0; a 0 would store an Inf
			w := 1 / p[c]
			l.IW[i] += w
			l.IN[i]++
			l.IMax[i] = math.Max(l.IMax[i], w)
			if c == logged {
				l.H[i]++
			}
		}
	}
	l.W++
	l.W2++
	for i := 0; i < n; i++ {
		l.S[i] += d[i]
		for j := 0; j < n; j++ {
			l.Q[i*maxRungs+j] += d[i] * d[j]
		}
	}
}

func (l *Ladder) scale(f float64) {
	l.W *= f
	l.W2 *= f * f
	for i := range l.S {
		l.S[i] *= f
		l.IW[i] *= f
		l.IN[i] *= f
		l.H[i] *= f
	}
	for i := range l.Q {
		l.Q[i] *= f
	}
}

func (l *Ladder) neff() float64 {
	if l.W2 <= 0 {
		return 0
	}
	return l.W * l.W / l.W2
}

// diff returns the mean of D_i − D_j (j < 0: D_i, rung i against
// never-send) and its standard error.
func (l *Ladder) diff(i, j int) (mean, se float64) {
	s, q := l.S[i], l.Q[i*maxRungs+i]
	if j >= 0 {
		s -= l.S[j]
		q += l.Q[j*maxRungs+j] - 2*l.Q[i*maxRungs+j]
	}
	return meanSE(s, q, l.W, l.neff())
}

// LadderEvent says what UpdateLadder changed.
type LadderEvent int

// Ladder events.
const (
	LadderUnchanged LadderEvent = iota
	// LadderForward: one rung toward less pessimism.
	LadderForward
	// LadderBack: one rung back toward more pessimism.
	LadderBack
)

// UpdateLadder applies the ladder's rule to its evidence (see Ladder) and
// reports a move. Call it once per learner pass, after Refit.
//
// Forward: one rung, when the next rung beats the current one (paired
// difference) and never-send, both by LadderUpZ standard errors, with at
// least LadderMinHits draws of its own choices where they differ. Back:
// one rung, when the current one loses to the one before it or to
// never-send by LadderDownZ standard errors. Both need LadderMinN
// effective rewards.
func (m *Model) UpdateLadder() LadderEvent {
	n := m.rungs()
	l := &m.guard.Ladder
	if n < 2 {
		return LadderUnchanged
	}
	r := m.rung()
	l.Rung = r
	l.NextShut = false
	if l.neff() < m.cfg.LadderMinN {
		return LadderUnchanged
	}
	if r+1 < n {
		mean, se := l.diff(r+1, r)
		l.NextShut = mean+m.cfg.LadderShutZ*se < 0 // refuted for now
		nv, nse := l.diff(r+1, -1)
		if l.H[r+1] >= m.cfg.LadderMinHits && mean-m.cfg.LadderUpZ*se > 0 && nv-m.cfg.LadderUpZ*nse > 0 {
			l.Rung++
			l.Moves++
			return LadderForward
		}
	}
	if r == 0 {
		return LadderUnchanged
	}
	back, bse := l.diff(r, r-1)
	nv, nse := l.diff(r, -1)
	if back+m.cfg.LadderDownZ*bse < 0 || nv+m.cfg.LadderDownZ*nse < 0 {
		l.Rung--
		l.Moves++
		l.NextShut = true // the rung just left lost
		return LadderBack
	}
	return LadderUnchanged
}

// LadderStatus is the ladder's state and estimates for operators (MXN per
// decision over the reward window).
type LadderStatus struct {
	Rung  int     `json:"escalon"`
	Z     float64 `json:"z_envio"`
	Moves int     `json:"movimientos"`
	// Rungs are every rung's estimate.
	Rungs []RungStatus `json:"escalones"`
}

// RungStatus is one rung's policy: its Z, its DR value over never-send and
// its difference to the current rung, with their standard errors, and the
// importance weights its estimate rests on.
type RungStatus struct {
	Z          float64 `json:"z"`
	OverNever  float64 `json:"sobre_nunca_mxn"`
	NeverSE    float64 `json:"error_estandar_nunca_mxn"`
	Diff       float64 `json:"diferencia_actual_mxn"`
	DiffSE     float64 `json:"error_estandar_actual_mxn"`
	MeanWeight float64 `json:"peso_medio"`
	MaxWeight  float64 `json:"peso_max"`
}

// LadderStatus reports the ladder; nil without one.
func (m *Model) LadderStatus() *LadderStatus {
	n := m.rungs()
	if n < 2 {
		return nil
	}
	l := &m.guard.Ladder
	r := m.rung()
	st := &LadderStatus{Rung: r, Z: m.cfg.Ladder[r], Moves: l.Moves}
	fin := func(x float64) float64 {
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return -1
		}
		return x / 100
	}
	for i := 0; i < n; i++ {
		rs := RungStatus{Z: m.cfg.Ladder[i], MaxWeight: l.IMax[i]}
		mean, se := l.diff(i, -1)
		rs.OverNever, rs.NeverSE = mean/100, fin(se)
		if i != r {
			mean, se = l.diff(i, r)
			rs.Diff, rs.DiffSE = mean/100, fin(se)
		}
		if l.IN[i] > 0 {
			rs.MeanWeight = l.IW[i] / l.IN[i]
		}
		st.Rungs = append(st.Rungs, rs)
	}
	return st
}

// nextChoice is the next rung's choice where it differs from top and the
// next rung is not refuted (LadderShare), else -1.
func (m *Model) nextChoice(sc []Score, top int) int {
	n, r := m.rungs(), m.rung()
	if r+1 >= n || m.cfg.LadderShare <= 0 || m.guard.Ladder.NextShut {
		return -1
	}
	if c := m.greedyZ(sc, m.cfg.Ladder[r+1]); c != top {
		return c
	}
	return -1
}
