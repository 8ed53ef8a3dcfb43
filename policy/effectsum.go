package policy

import "math"

// EffectSum accumulates a weighted sum of coupon effects, Σ c·Effect over
// scores of one model (such as a policy's expected effect against a
// caller's action, over many customers), for the standard error of that
// sum (SE). The effects' errors share the model's coefficients, so they
// do not average out over customers as sampling noise does: SE is the
// standard error of the sum itself, gᵀ·Cov·g over the coefficients, with
// an action the model has no data for read at its prior's variance. The
// zero value is empty.
type EffectSum struct {
	sh  [nShared]float64
	psi map[int]*[dimEffect]float64 // per action id: Σ c·ψ
}

// Add adds c times the effect of s (a Score of the model SE is asked of;
// never-send's adds nothing).
func (e *EffectSum) Add(s *Score, c float64) {
	if s.ID == 0 || c == 0 {
		return
	}
	if e.psi == nil {
		e.psi = map[int]*[dimEffect]float64{}
	}
	p := e.psi[s.ID]
	if p == nil {
		p = new([dimEffect]float64)
		e.psi[s.ID] = p
	}
	for k := range e.sh {
		e.sh[k] += c * s.sh[k]
	}
	for j := range p {
		p[j] += c * s.psi[j]
	}
}

// SE is the standard error (cents) of the sum added to e, by m's fit:
// the pooled coupon effect's part, each action's own part (its fit's
// covariance, or its prior's variance without data), and their
// covariances.
func (m *Model) SE(e *EffectSum) float64 {
	v := 0.0
	if m.sharedCov != nil {
		v += quad(m.sharedCov, e.sh[:], nShared)
	}
	for id, p := range e.psi {
		st := m.arms[id]
		if st == nil || st.delta == nil {
			v += m.priorVar(p)
			continue
		}
		v += quad(st.cov, p[:], dimEffect)
		if st.shX != nil {
			v += 2 * bilinear(st.shX, e.sh[:], p[:])
		}
		for id2, p2 := range e.psi {
			if id2 <= id {
				continue
			}
			if c := m.cross[[2]int{id, id2}]; c != nil {
				v += 2 * bilinear(c, p[:], p2[:])
			}
		}
	}
	return math.Sqrt(max(v, 0))
}
