package policy

import (
	"fmt"
	"math"
)

// Params shapes scoring and exploration. They are not part of the model's
// statistics and may change between calls (store them with the model if a
// decision must be reproducible).
type Params struct {
	// PriorWeight κ > 0 is how many observations the caller's prior mean
	// counts for at each x. Default 4.
	PriorWeight float64
	// Beta β >= 0 is the optimism multiplier: actions are ranked by
	// μ + βσ. 0 ranks by μ alone (no directed exploration). Default 1.
	Beta float64
	// Gamma0 and GammaN0 set SquareCB's learning rate
	// γ = Gamma0·sqrt(GammaN0 + N), N the model's total support: the larger
	// γ, the less probability on actions ranked below the top. Gaps are in
	// units of the reward scale. Defaults 2 and 100.
	Gamma0, GammaN0 float64
	// PMin in [0, 1) is the probability mass spread uniformly over the
	// candidates: every eligible action keeps at least PMin/K, so logged
	// propensities (and importance weights, at most K/PMin) stay bounded.
	// Default 0.05.
	PMin float64
}

// DefaultParams returns the documented defaults.
func DefaultParams() Params {
	return Params{PriorWeight: 4, Beta: 1, Gamma0: 2, GammaN0: 100, PMin: 0.05}
}

// Validate reports parameters out of range (ErrInvalid).
func (p Params) Validate() error {
	switch {
	case !(p.PriorWeight > 0) || math.IsInf(p.PriorWeight, 0):
		return fmt.Errorf("%w: PriorWeight %v must be positive and finite", ErrInvalid, p.PriorWeight)
	case !(p.Beta >= 0) || math.IsInf(p.Beta, 0):
		return fmt.Errorf("%w: Beta %v must be >= 0 and finite", ErrInvalid, p.Beta)
	case !(p.Gamma0 >= 0) || math.IsInf(p.Gamma0, 0):
		return fmt.Errorf("%w: Gamma0 %v must be >= 0 and finite", ErrInvalid, p.Gamma0)
	case !(p.GammaN0 >= 0) || math.IsInf(p.GammaN0, 0):
		return fmt.Errorf("%w: GammaN0 %v must be >= 0 and finite", ErrInvalid, p.GammaN0)
	case !(p.PMin >= 0 && p.PMin < 1):
		return fmt.Errorf("%w: PMin %v must be in [0, 1)", ErrInvalid, p.PMin)
	}
	return nil
}

// Candidate is one eligible action of a decision.
type Candidate struct {
	// ID is the catalog id; 0 is "send nothing".
	ID int
	// Prior is the caller's prior mean reward of this action for this
	// customer, in cents, on the same scale as the rewards passed to Update
	// (e.g. from catalog economics: expected margin uplift minus discount
	// minus sending cost, given the customer's history). It dominates while
	// the action has little support near x.
	Prior float64
}

// Scores is the model's view of one decision, index-aligned with the
// candidates passed to Score. Score reuses its slices: keep one Scores per
// goroutine to score without allocating.
type Scores struct {
	IDs []int
	// Mu is the expected reward μ (cents) and Sigma its standard deviation
	// σ (cents).
	Mu, Sigma []float64
	// Support is the data's support n_x at x (observations); 0 means μ is
	// the prior alone.
	Support []float64
	// Opt is the optimistic normalised score (μ + βσ)/Scale that ranks the
	// candidates for exploration.
	Opt []float64
	// Scale is the reward scale (cents) and N the model's total support at
	// scoring time.
	Scale, N float64
	// Greedy is the index of the largest Mu (the action the policy expects
	// to earn most: set explorado = drawn != Greedy); Top the index of the
	// largest Opt (the mode of the distribution). Ties go to the lower
	// index. -1 when there are no candidates.
	Greedy, Top int
}

// Score predicts every candidate's reward at customer vector x. x must have
// the model's dimension; cands may be empty or name actions the model does
// not know (they get the prior alone). The result goes to s, whose slices
// are reused; Score does not retain x or cands and does not modify m, so it
// may run concurrently on a published model.
func (m *Model) Score(x []float64, cands []Candidate, p Params, s *Scores) error {
	d := m.cfg.Dim
	if len(x) != d {
		return fmt.Errorf("%w: len(x) = %d, model has %d", ErrDim, len(x), d)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	xx := 0.0
	for i, v := range x {
		if !finite(v) {
			return fmt.Errorf("%w: x[%d] = %v", ErrInvalid, i, v)
		}
		xx += v * v
	}
	k := len(cands)
	s.IDs = resize(s.IDs, k)
	s.Mu = resize(s.Mu, k)
	s.Sigma = resize(s.Sigma, k)
	s.Support = resize(s.Support, k)
	s.Opt = resize(s.Opt, k)
	v := m.variance()
	s.Scale, s.N = math.Sqrt(v), m.n
	lambdaX := 0.0 // λ/|x|²: the ridge's own share of 1/(xᵀA⁻¹x)
	if xx > 0 {
		lambdaX = m.cfg.Lambda / xx
	}
	kappa := p.PriorWeight
	for i, c := range cands {
		if !finite(c.Prior) {
			return fmt.Errorf("%w: prior of action %d = %v", ErrInvalid, c.ID, c.Prior)
		}
		s.IDs[i] = c.ID
		mu, nx, noise := c.Prior, 0.0, v
		if a := m.arm(c.ID); a != nil && xx > 0 {
			q := quad(a.ainv, x, d)
			if q > 0 {
				nx = max(0, 1/q-lambdaX)
			}
			mud := dot(a.theta, x)
			mu = (kappa*c.Prior + nx*mud) / (kappa + nx)
			noise = (m.cfg.NoiseWeight*v + a.rss) / (m.cfg.NoiseWeight + max(0, a.n-float64(d)))
		}
		sigma := math.Sqrt(noise / (kappa + nx))
		s.Mu[i], s.Sigma[i], s.Support[i] = mu, sigma, nx
		s.Opt[i] = (mu + p.Beta*sigma) / s.Scale
	}
	s.rank()
	return nil
}

// quad returns xᵀ S x for the symmetric d×d matrix S, reading its upper
// triangle.
func quad(s, x []float64, d int) float64 {
	q := 0.0
	for r := 0; r < d; r++ {
		row := s[r*d+r : r*d+d]
		xr := x[r:d]
		t := 0.0
		for c := 1; c < len(row); c++ {
			t += row[c] * xr[c]
		}
		q += x[r] * (row[0]*x[r] + 2*t)
	}
	return q
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func (s *Scores) rank() {
	s.Greedy, s.Top = -1, -1
	for i := range s.Mu {
		if s.Greedy < 0 || s.Mu[i] > s.Mu[s.Greedy] {
			s.Greedy = i
		}
		if s.Top < 0 || s.Opt[i] > s.Opt[s.Top] {
			s.Top = i
		}
	}
}

// Filter keeps the candidates for which keep(i) is true (i indexes the
// current slices), in order, and re-ranks Greedy and Top. Use it to apply a
// budget cut after scoring and before Distribution.
func (s *Scores) Filter(keep func(i int) bool) {
	j := 0
	for i := range s.IDs {
		if !keep(i) {
			continue
		}
		s.IDs[j], s.Mu[j], s.Sigma[j], s.Support[j], s.Opt[j] = s.IDs[i], s.Mu[i], s.Sigma[i], s.Support[i], s.Opt[i]
		j++
	}
	s.IDs, s.Mu, s.Sigma, s.Support, s.Opt = s.IDs[:j], s.Mu[:j], s.Sigma[:j], s.Support[:j], s.Opt[:j]
	s.rank()
}

// Distribution returns the exploration distribution over the scored
// candidates, index-aligned with s: SquareCB inverse gap weighting over
// s.Opt with γ = Gamma0·sqrt(GammaN0 + s.N), candidates tied at the top
// sharing the remaining mass equally, mixed with PMin of uniform mass. Every
// probability is at least PMin/K and they sum to 1 up to rounding (a few
// ulps). The result is written to dst when it has the capacity and returned;
// pass nil for a new slice. Distribution panics if p is invalid (check with
// Params.Validate, which Score already did).
func Distribution(s *Scores, p Params, dst []float64) []float64 {
	if err := p.Validate(); err != nil {
		panic(err)
	}
	k := len(s.Opt)
	dst = resize(dst, k)
	if k == 0 {
		return dst
	}
	top := s.Opt[0]
	for _, u := range s.Opt[1:] {
		top = max(top, u)
	}
	gamma := p.Gamma0 * math.Sqrt(p.GammaN0+s.N)
	fk := float64(k)
	rest, ties := 1.0, 0
	for i, u := range s.Opt {
		if u == top {
			ties++
			continue
		}
		dst[i] = 1 / (fk + gamma*(top-u))
		rest -= dst[i]
	}
	share := rest / float64(ties)
	floor := p.PMin / fk
	for i, u := range s.Opt {
		if u == top {
			dst[i] = share
		}
		dst[i] = (1-p.PMin)*dst[i] + floor
	}
	return dst
}

// Draw returns the index drawn from probs with the uniform u in [0, 1)
// supplied by the caller (its seeded source owns the randomness): the first
// i whose cumulative probability exceeds u. When rounding leaves u beyond
// the total, the last index with non-zero probability is returned. Draw
// returns -1 for empty probs.
func Draw(probs []float64, u float64) int {
	acc := 0.0
	for i, p := range probs {
		acc += p
		if u < acc {
			return i
		}
	}
	for i := len(probs) - 1; i >= 0; i-- {
		if probs[i] > 0 {
			return i
		}
	}
	return len(probs) - 1
}
