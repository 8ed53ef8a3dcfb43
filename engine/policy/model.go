// Package policy is coupond's reward model and exploration: it predicts the
// expected reward μ(x, a) of every eligible action (0 = send nothing) and its
// uncertainty σ(x, a), turns the predictions into a probability distribution
// with exact propensities, and draws an action from it with a uniform number
// supplied by the caller.
//
// # Reward model
//
// Every action has its own Bayesian ridge regression of the raw reward
// (cents) on the customer vector x, kept as sufficient statistics
// A = λI + Σ w x xᵀ, b = Σ w r x, Σ w r² with A⁻¹ maintained by
// Sherman–Morrison (and rebuilt from A by Cholesky every refreshEvery updates
// so rounding cannot accumulate). Its prediction at x is μ_d = xᵀA⁻¹b, and
// its support at x, in observations, is n_x = 1/(xᵀA⁻¹x) − λ/|x|²: exactly n
// after n observations at x, 0 without data.
//
// The caller passes a prior mean m₀ (cents) per decision and candidate,
// computed from the catalog economics and the customer's history. The prior
// counts as κ (Params.PriorWeight) pseudo-observations at x, so the estimate
// moves from prior to data as support grows:
//
//	μ = (κ m₀ + n_x μ_d) / (κ + n_x)
//	σ = sqrt(v_a / (κ + n_x))
//
// where v_a is the action's noise variance: the in-sample residual sum of
// squares Σ w r² − bᵀA⁻¹b (degrees-of-freedom corrected) shrunk towards the
// global reward variance with NoiseWeight pseudo-observations.
//
// # Scale
//
// Exploration works on rewards divided by a running scale s: the standard
// deviation of every reward seen, starting from Config.InitScale with
// ScaleWeight pseudo-observations. Multiplying every reward and prior by a
// constant multiplies μ, σ and s by it and leaves the probabilities alone,
// so one set of Params fits tenants of any money size.
//
// # Exploration
//
// Actions are ranked by the optimistic score u = (μ + βσ)/s (RegCB-opt:
// actions without support carry a large σ and get directed exploration
// until they have support). The probabilities are SquareCB's inverse gap
// weighting (Foster & Rakhlin 2020; Vowpal Wabbit cb_explore_adf --squarecb)
// over u, p_a = 1/(K + γ(u_top − u_a)) with the rest of the mass on the
// top-ranked actions, γ = Gamma0·sqrt(GammaN0 + N) growing with the model's
// total support N, mixed with the uniform distribution so that every
// eligible action keeps at least PMin/K:
//
//	p = (1 − PMin)·IGW + PMin/K
//
// # Concurrency and determinism
//
// A Model is not safe for concurrent mutation. Read-only methods (Score,
// Support, MarshalBinary, ...) may run concurrently once no goroutine
// mutates it: publish with Clone → Update → atomic swap. Everything is
// deterministic given the inputs; randomness comes from the caller's uniform.
package policy

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// MaxDim is the largest feature dimension a Model accepts.
const MaxDim = 256

// refreshEvery is how many updates of one action pass between rebuilding its
// A⁻¹ from A by Cholesky, which bounds the rounding Sherman–Morrison
// accumulates. Part of the model's behaviour: changing it changes decisions.
const refreshEvery = 512

// Errors returned by the package; wrapped with detail, test with errors.Is.
var (
	// ErrDim: a feature vector's length differs from the model's dimension.
	ErrDim = errors.New("policy: feature vector has the wrong dimension")
	// ErrInvalid: a NaN or infinite input, a non-positive weight, a negative
	// action id, or parameters out of range.
	ErrInvalid = errors.New("policy: invalid input")
	// ErrFormat: UnmarshalBinary got bytes that are not a model encoding.
	ErrFormat = errors.New("policy: malformed model encoding")
)

// Config fixes what a Model's statistics depend on; it cannot change after
// New (Params, which only shape scoring and exploration, can change per call).
type Config struct {
	// Dim is the length of every feature vector x. The caller's x is
	// expected to start with a constant 1 (bias) and hold values roughly in
	// -1.5..1.5 (the model is not scale invariant in x: λ acts per unit).
	Dim int
	// Lambda is the ridge precision λ > 0: the weight of the zero-mean prior
	// on each coefficient, in observations per unit of x. Default 1.
	Lambda float64
	// InitScale is the reward scale (cents) assumed before data: a guess of
	// the standard deviation of one reward, e.g. of a customer's margin in
	// the reward window. Default 10000 (100 MXN).
	InitScale float64
	// ScaleWeight is how many observations InitScale counts for in the
	// running reward scale. Default 20.
	ScaleWeight float64
	// NoiseWeight is how many observations the global reward variance counts
	// for in each action's noise variance. Default 10.
	NoiseWeight float64
}

// DefaultConfig returns the documented defaults for dimension dim.
func DefaultConfig(dim int) Config {
	return Config{Dim: dim, Lambda: 1, InitScale: 10000, ScaleWeight: 20, NoiseWeight: 10}
}

func (c Config) validate() error {
	switch {
	case c.Dim < 1 || c.Dim > MaxDim:
		return fmt.Errorf("%w: Dim %d not in 1..%d", ErrInvalid, c.Dim, MaxDim)
	case !(c.Lambda > 0) || math.IsInf(c.Lambda, 0):
		return fmt.Errorf("%w: Lambda %v must be positive and finite", ErrInvalid, c.Lambda)
	case !(c.InitScale > 0) || math.IsInf(c.InitScale, 0):
		return fmt.Errorf("%w: InitScale %v must be positive and finite", ErrInvalid, c.InitScale)
	case !(c.ScaleWeight > 0) || math.IsInf(c.ScaleWeight, 0):
		return fmt.Errorf("%w: ScaleWeight %v must be positive and finite", ErrInvalid, c.ScaleWeight)
	case !(c.NoiseWeight > 0) || math.IsInf(c.NoiseWeight, 0):
		return fmt.Errorf("%w: NoiseWeight %v must be positive and finite", ErrInvalid, c.NoiseWeight)
	}
	return nil
}

// Model is the reward model of one tenant: one ridge regression per action
// plus the running reward scale. The zero value is not usable; use New or
// UnmarshalBinary.
type Model struct {
	cfg Config
	// Running weighted mean and sum of squared deviations of every reward
	// (Welford), and the total weight n.
	n, mean, m2 float64
	arms        []arm // sorted by id
}

// arm is one action's regression.
type arm struct {
	id    int
	n     float64   // Σ w: support
	sumR2 float64   // Σ w r²
	since int       // updates since A⁻¹ was last rebuilt from A
	a     []float64 // A, Dim×Dim row-major, symmetric
	ainv  []float64 // A⁻¹, Dim×Dim row-major, symmetric
	b     []float64 // Σ w r x
	theta []float64 // A⁻¹b (derived)
	rss   float64   // max(0, Σ w r² − bᵀθ) (derived)
}

// New returns an empty model.
func New(cfg Config) (*Model, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Model{cfg: cfg}, nil
}

// Config returns the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// Dim returns the feature dimension.
func (m *Model) Dim() int { return m.cfg.Dim }

// N returns the total weight of every update folded into the model (also of
// actions removed since).
func (m *Model) N() float64 { return m.n }

// Scale returns the current reward scale s in cents: the running standard
// deviation of rewards, pulled towards Config.InitScale.
func (m *Model) Scale() float64 {
	return math.Sqrt(m.variance())
}

func (m *Model) variance() float64 {
	w := m.cfg.ScaleWeight
	return (w*m.cfg.InitScale*m.cfg.InitScale + m.m2) / (w + m.n)
}

// Support returns the total update weight of action id (0 if unknown).
func (m *Model) Support(id int) float64 {
	if a := m.arm(id); a != nil {
		return a.n
	}
	return 0
}

// Actions returns the ids the model holds statistics for, ascending. The
// slice is the caller's.
func (m *Model) Actions() []int {
	ids := make([]int, len(m.arms))
	for i := range m.arms {
		ids[i] = m.arms[i].id
	}
	return ids
}

// Remove forgets action id (an action deleted from the catalog) and reports
// whether the model held it. The reward scale and N keep its data.
func (m *Model) Remove(id int) bool {
	i, ok := m.find(id)
	if ok {
		m.arms = slices.Delete(m.arms, i, i+1)
	}
	return ok
}

// Clone returns a deep copy that shares no memory with m.
func (m *Model) Clone() *Model {
	c := *m
	c.arms = make([]arm, len(m.arms))
	for i := range m.arms {
		c.arms[i] = m.arms[i].clone()
	}
	return &c
}

func (a *arm) clone() arm {
	c := *a
	d := len(a.b)
	buf := make([]float64, 2*d*d+2*d)
	c.a = buf[:d*d:d*d]
	c.ainv = buf[d*d : 2*d*d : 2*d*d]
	c.b = buf[2*d*d : 2*d*d+d : 2*d*d+d]
	c.theta = buf[2*d*d+d:]
	copy(c.a, a.a)
	copy(c.ainv, a.ainv)
	copy(c.b, a.b)
	copy(c.theta, a.theta)
	return c
}

func newArm(id, d int, lambda float64) arm {
	buf := make([]float64, 2*d*d+2*d)
	a := arm{
		id:    id,
		a:     buf[:d*d:d*d],
		ainv:  buf[d*d : 2*d*d : 2*d*d],
		b:     buf[2*d*d : 2*d*d+d : 2*d*d+d],
		theta: buf[2*d*d+d:],
	}
	for i := 0; i < d; i++ {
		a.a[i*d+i] = lambda
		a.ainv[i*d+i] = 1 / lambda
	}
	return a
}

func (m *Model) find(id int) (int, bool) {
	return slices.BinarySearchFunc(m.arms, id, func(a arm, id int) int {
		switch {
		case a.id < id:
			return -1
		case a.id > id:
			return 1
		}
		return 0
	})
}

func (m *Model) arm(id int) *arm {
	if i, ok := m.find(id); ok {
		return &m.arms[i]
	}
	return nil
}

// Update folds one observed reward (cents) of action at customer vector x
// into the model with weight w > 0 (1 for an ordinary observation). An
// action the model does not know yet starts from no support. The cost is
// O(Dim²), plus O(Dim³) once every 512 updates of the same action. x is not
// retained. On error the model is unchanged.
func (m *Model) Update(x []float64, action int, reward, w float64) error {
	d := m.cfg.Dim
	if len(x) != d {
		return fmt.Errorf("%w: len(x) = %d, model has %d", ErrDim, len(x), d)
	}
	if action < 0 {
		return fmt.Errorf("%w: action %d", ErrInvalid, action)
	}
	if !finite(reward) || !(w > 0) || math.IsInf(w, 0) {
		return fmt.Errorf("%w: reward %v, weight %v", ErrInvalid, reward, w)
	}
	for i, v := range x {
		if !finite(v) {
			return fmt.Errorf("%w: x[%d] = %v", ErrInvalid, i, v)
		}
	}
	i, ok := m.find(action)
	if !ok {
		m.arms = slices.Insert(m.arms, i, newArm(action, d, m.cfg.Lambda))
	}
	a := &m.arms[i]

	// Global reward scale (weighted Welford).
	m.n += w
	delta := reward - m.mean
	m.mean += w * delta / m.n
	m.m2 += w * delta * (reward - m.mean)

	a.n += w
	a.sumR2 += w * reward * reward
	for r := 0; r < d; r++ {
		row := a.a[r*d : r*d+d]
		wxr := w * x[r]
		for c := range row {
			row[c] += wxr * x[c]
		}
		a.b[r] += w * reward * x[r]
	}
	a.since++
	if a.since >= refreshEvery && invertSPD(a.ainv, a.a, d) {
		a.since = 0
	} else {
		shermanMorrison(a.ainv, x, w, d)
	}
	a.derive(d)
	return nil
}

// shermanMorrison applies A⁻¹ ← A⁻¹ − w (A⁻¹x)(A⁻¹x)ᵀ / (1 + w xᵀA⁻¹x).
// The update is exactly symmetric, so a symmetric A⁻¹ stays symmetric.
func shermanMorrison(ainv, x []float64, w float64, d int) {
	var vbuf [64]float64
	var v []float64
	if d <= len(vbuf) {
		v = vbuf[:d]
	} else {
		v = make([]float64, d)
	}
	q := 0.0
	for r := 0; r < d; r++ {
		v[r] = dot(ainv[r*d:r*d+d], x)
		q += x[r] * v[r]
	}
	c := w / (1 + w*q)
	for r := 0; r < d; r++ {
		row := ainv[r*d : r*d+d]
		cvr := c * v[r]
		for k := range row {
			row[k] -= cvr * v[k]
		}
	}
}

// derive recomputes θ = A⁻¹b and the residual sum of squares.
func (a *arm) derive(d int) {
	bt := 0.0
	for r := 0; r < d; r++ {
		a.theta[r] = dot(a.ainv[r*d:r*d+d], a.b)
		bt += a.b[r] * a.theta[r]
	}
	a.rss = max(0, a.sumR2-bt)
}

func dot(a, b []float64) float64 {
	b = b[:len(a)]
	s := 0.0
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// invertSPD writes the inverse of the symmetric positive definite d×d
// matrix a into dst by Cholesky factorisation and reports success; dst is
// untouched when a is not (numerically) positive definite. The result is
// exactly symmetric.
func invertSPD(dst, a []float64, d int) bool {
	l := make([]float64, d*d) // lower triangle of L, then of L⁻¹ in place
	for j := 0; j < d; j++ {
		s := a[j*d+j]
		for k := 0; k < j; k++ {
			s -= l[j*d+k] * l[j*d+k]
		}
		if !(s > 0) || math.IsInf(s, 0) {
			return false
		}
		ljj := math.Sqrt(s)
		l[j*d+j] = ljj
		for i := j + 1; i < d; i++ {
			s := a[i*d+j]
			for k := 0; k < j; k++ {
				s -= l[i*d+k] * l[j*d+k]
			}
			l[i*d+j] = s / ljj
		}
	}
	// L⁻¹ (lower triangular), column by column, into li.
	li := make([]float64, d*d)
	for j := 0; j < d; j++ {
		li[j*d+j] = 1 / l[j*d+j]
		for i := j + 1; i < d; i++ {
			s := 0.0
			for k := j; k < i; k++ {
				s -= l[i*d+k] * li[k*d+j]
			}
			li[i*d+j] = s / l[i*d+i]
		}
	}
	// A⁻¹ = L⁻ᵀ L⁻¹: (A⁻¹)_ij = Σ_{k ≥ max(i,j)} li[k][i]·li[k][j].
	for i := 0; i < d; i++ {
		for j := i; j < d; j++ {
			s := 0.0
			for k := j; k < d; k++ {
				s += li[k*d+i] * li[k*d+j]
			}
			dst[i*d+j] = s
			dst[j*d+i] = s
		}
	}
	return true
}
