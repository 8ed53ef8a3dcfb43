package lab

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/coupond/coupond/engine"
)

// reference is the many-worlds lab's textbook learner, the engine's peer:
// what a statistician would build from the same events with nothing of
// the engine's model.
//
// Model: one joint ridge regression of the reward (MXN over the window),
//
//	y = b·β + Σₐ 1[A = a]·(z·γₐ) + ε,
//
// where b is the customer's engine feature vector (engine.Features.Vector)
// plus their spend share in each of the tenant's categories (the shared
// baseline: what the customer brings whatever is sent) and z a short
// effect vector (bias, recency, frequency, ticket, coupons received,
// redemption rate and the category shares), one γ per coupon: the coupon's
// effect against sending nothing. Ridge λ = 1 on every coefficient. The
// covariance is the HC0 sandwich A⁻¹(Σ xxᵀe²)A⁻¹ with A = XᵀX + λI, robust
// to the heavy-tailed, mostly-zero rewards.
//
// Rule: with probability εₜ = 1/t (t the week) a uniformly random action
// (nothing included); otherwise, among the coupons whose estimated effect
// minus one standard error is above zero, the one of largest effect; if
// none, nothing. It refits from all its samples at the end of each window.
//
// It sees the customer only through the engine's features (the same
// events, through the same ingestion path) and learns only from the
// sampled rewards of the actions it chose.
type reference struct {
	cats   []string
	rng    *rand.Rand
	week   int
	blocks map[int]int // action id → block of γ
	nb     int         // blocks allocated
	// samples are every folded observation, pending the current window's.
	samples, pending []refSample
	// fit: β then γ of each block; cov[blk] is γ's covariance block.
	coef []float64
	cov  [][]float64
}

// refSample is one observation: baseline vector, effect vector, block of
// the action (-1: nothing) and reward.
type refSample struct {
	b, z []float64
	blk  int
	y    float64
}

const (
	refLambda = 1.0
	refBaseF  = engine.VectorDim // baseline: the engine vector, then the category shares
	refEffF   = 6                // effect vector: its fixed part, then the category shares
)

func newReference(cats []string, rng *rand.Rand) *reference {
	return &reference{cats: cats, rng: rng, blocks: map[int]int{}}
}

func (r *reference) db() int { return refBaseF + len(r.cats) }
func (r *reference) de() int { return refEffF + len(r.cats) }

// vectors returns v's baseline and effect vectors, computed once per view.
func (r *reference) vectors(v *custView) (b, z []float64) {
	if v.refB != nil {
		return v.refB, v.refZ
	}
	b = v.f.Vector(v.now, make([]float64, 0, r.db()))
	shares := make([]float64, len(r.cats))
	for j, c := range r.cats {
		shares[j], _ = v.f.Get(engine.FeatureCategoryShare+c, v.now)
	}
	b = append(b, shares...)
	names := engine.VectorNames()
	z = make([]float64, 0, r.de())
	for _, n := range []string{"sesgo", "recencia", "frecuencia_90d", "ticket_promedio", "cupones_recibidos_90d", "tasa_redencion_365d"} {
		z = append(z, b[indexOf(names, n)])
	}
	z = append(z, shares...)
	v.refB, v.refZ = b, z
	return b, z
}

func indexOf(names []string, n string) int {
	for i, m := range names {
		if m == n {
			return i
		}
	}
	panic("lab: no engine vector position " + n)
}

// choose returns the index in acts of the action to send, -1 for nothing.
func (r *reference) choose(v *custView, acts []engine.Action) int {
	if r.rng.Float64() < 1/float64(r.week+1) {
		return r.rng.IntN(len(acts)+1) - 1
	}
	_, z := r.vectors(v)
	best, bestE := -1, 0.0
	for k := range acts {
		blk, ok := r.blocks[acts[k].ID]
		if !ok || blk >= len(r.cov) {
			continue
		}
		e, se := r.effect(blk, z)
		if e-se > 0 && e > bestE {
			best, bestE = k, e
		}
	}
	return best
}

// effect is γ_blk·z and its standard error √(zᵀV z).
func (r *reference) effect(blk int, z []float64) (e, se float64) {
	off := r.db() + blk*r.de()
	V := r.cov[blk]
	de := r.de()
	var q float64
	for i := range de {
		e += r.coef[off+i] * z[i]
		var s float64
		for j := range de {
			s += V[i*de+j] * z[j]
		}
		q += z[i] * s
	}
	return e, math.Sqrt(math.Max(q, 0))
}

// observe records the reward of action k (-1: nothing) for v: the
// textbook learner regresses the reward itself.
func (r *reference) observe(v *custView, acts []engine.Action, k int, s sampled) {
	rewardMXN := s.reward
	b, z := r.vectors(v)
	blk := -1
	if k >= 0 {
		id := acts[k].ID
		var ok bool
		if blk, ok = r.blocks[id]; !ok {
			blk = r.nb
			r.blocks[id] = blk
			r.nb++
		}
	}
	r.pending = append(r.pending, refSample{b: b, z: z, blk: blk, y: rewardMXN})
}

// fold closes the window: it adds the pending samples and refits.
func (r *reference) fold() {
	r.samples = append(r.samples, r.pending...)
	r.pending = nil
	r.week++
	r.fit()
}

// index lists the coefficient positions and values of sample s.
func (r *reference) index(s *refSample, idx []int, val []float64) ([]int, []float64) {
	idx, val = idx[:0], val[:0]
	for i, x := range s.b {
		idx, val = append(idx, i), append(val, x)
	}
	if s.blk >= 0 {
		off := r.db() + s.blk*r.de()
		for i, x := range s.z {
			idx, val = append(idx, off+i), append(val, x)
		}
	}
	return idx, val
}

// fit solves the ridge regression on all samples and computes the
// sandwich covariance of each coupon's γ.
func (r *reference) fit() {
	d := r.db() + r.nb*r.de()
	A, rhs := make([]float64, d*d), make([]float64, d)
	for i := range d {
		A[i*d+i] = refLambda
	}
	var idx []int
	var val []float64
	for i := range r.samples {
		s := &r.samples[i]
		idx, val = r.index(s, idx, val)
		for a, ia := range idx {
			rhs[ia] += val[a] * s.y
			row := A[ia*d:]
			for b, ib := range idx {
				row[ib] += val[a] * val[b]
			}
		}
	}
	inv, ok := invertSPD(A, d)
	if !ok {
		return // keep the previous fit
	}
	coef := matVec(inv, rhs, d)
	meat := make([]float64, d*d)
	for i := range r.samples {
		s := &r.samples[i]
		idx, val = r.index(s, idx, val)
		e := s.y
		for a, ia := range idx {
			e -= coef[ia] * val[a]
		}
		e2 := e * e
		for a, ia := range idx {
			row := meat[ia*d:]
			for b, ib := range idx {
				row[ib] += val[a] * val[b] * e2
			}
		}
	}
	r.coef, r.cov = coef, r.sandwichBlocks(inv, meat, d)
}

// sandwichBlocks returns, per coupon block, its block of A⁻¹ M A⁻¹.
func (r *reference) sandwichBlocks(inv, meat []float64, d int) [][]float64 {
	de := r.de()
	// left = A⁻¹ M restricted to the block rows; then times A⁻¹'s block columns.
	out := make([][]float64, r.nb)
	for blk := range r.nb {
		off := r.db() + blk*de
		left := make([]float64, de*d)
		for i := range de {
			for k := range d {
				a := inv[(off+i)*d+k]
				if a == 0 {
					continue
				}
				mrow := meat[k*d:]
				lrow := left[i*d:]
				for j := range d {
					lrow[j] += a * mrow[j]
				}
			}
		}
		V := make([]float64, de*de)
		for i := range de {
			for j := range de {
				var s float64
				for k := range d {
					s += left[i*d+k] * inv[k*d+off+j]
				}
				V[i*de+j] = s
			}
		}
		out[blk] = V
	}
	return out
}

// invertSPD inverts the symmetric positive definite d×d matrix A
// (row-major) by Cholesky; false if A is not positive definite.
func invertSPD(A []float64, d int) ([]float64, bool) {
	L := make([]float64, d*d)
	for i := range d {
		for j := 0; j <= i; j++ {
			s := A[i*d+j]
			for k := range j {
				s -= L[i*d+k] * L[j*d+k]
			}
			if i == j {
				if s <= 0 {
					return nil, false
				}
				L[i*d+i] = math.Sqrt(s)
			} else {
				L[i*d+j] = s / L[j*d+j]
			}
		}
	}
	// Solve L Lᵀ X = I column by column.
	inv := make([]float64, d*d)
	col := make([]float64, d)
	for c := range d {
		for i := range d {
			s := b2f(i == c)
			for k := range i {
				s -= L[i*d+k] * col[k]
			}
			col[i] = s / L[i*d+i]
		}
		for i := d - 1; i >= 0; i-- {
			s := col[i]
			for k := i + 1; k < d; k++ {
				s -= L[k*d+i] * col[k]
			}
			col[i] = s / L[i*d+i]
		}
		for i := range d {
			inv[i*d+c] = col[i]
		}
	}
	return inv, true
}

func matVec(M, v []float64, d int) []float64 {
	out := make([]float64, d)
	for i := range d {
		var s float64
		for j := range d {
			s += M[i*d+j] * v[j]
		}
		out[i] = s
	}
	return out
}

// custView is what the learners see of a customer at a decision: the
// engine's features, nothing of the world.
type custView struct {
	f          *engine.Features
	now        time.Time
	refB, refZ []float64 // the reference's vectors, filled on first use
}

// learner is a policy that learns from the sampled rewards of its own
// choices (greedy, the reference).
type learner interface {
	choose(v *custView, acts []engine.Action) int
	observe(v *custView, acts []engine.Action, k int, s sampled)
	fold()
}
