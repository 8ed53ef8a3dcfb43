package engine

import (
	"math"
	"sync"
	"sync/atomic"
)

// pendingCounts reports whether exploration counts the pending sends of
// action: a new action (none of its rewards folded) in a model that has
// learned from others.
func (m *policyModel) pendingCounts(action int) bool {
	_, ok := m.arms[action]
	return !ok && m.n > 0
}

// pendingSends is directed exploration under delayed rewards. A reward is
// final a whole window after its decision, so without this every decision
// of a new coupon's first window sees it without support, with its full
// optimism, and sends it to most customers (79–87 % of them in the lab's
// new-coupon week, at a cost of 4–9 MXN per decision). Instead, each send
// of a new action counts at once toward that action's uncertainty, as the
// reward it will bring will (hallucinated observations, GP-BUCB: Desautels,
// Krause & Burdick 2014): the action's precision matrix gains w·φφᵀ for
// the send, w its importance weight, which is what folding its reward will
// add; the expected reward does not move, since the outcome is unknown.
// Scoring takes for such an action the smaller of the model's σ and this
// one.
//
// Only new actions count (pendingCounts): at a cold start, when no action
// has data, the optimism of all of them is what explores, and cutting it
// short cost capture in the lab (0.65 → 0.61). A matrix starts from the
// prior of a new effect at the action's first send, lives in memory only (a
// restart forgets it, and the action's optimism comes back until its first
// reward is folded) and is dropped with the action's first folded reward,
// when the model's own σ takes over. Safe for concurrent use.
type pendingSends struct {
	n    atomic.Int32 // len(arms), so decisions skip the lock while no action is new
	mu   sync.Mutex
	arms map[int]*ridge // per action, its A⁻¹ with the pending sends (only Ainv is used)
}

// shrink lowers, for each candidate of sc that is new to m and has pending
// sends, σ to the uncertainty it has given those sends. x is the
// customer's vector.
func (p *pendingSends) shrink(m *policyModel, x []float64, sc *scored) {
	if p.n.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var buf [basisDim]float64
	var phi []float64
	var v float64
	for i := range sc.cands {
		c := &sc.cands[i]
		r, ok := p.arms[c.id]
		if !ok {
			continue
		}
		if !m.pendingCounts(c.id) {
			delete(p.arms, c.id)
			p.n.Store(int32(len(p.arms)))
			continue
		}
		if phi == nil {
			phi, v = basis(x, &buf), m.noise()
		}
		if s := math.Sqrt(v * r.quad(phi)); s < c.sigma {
			c.sigma = s
		}
	}
}

// add counts a send of action, drawn with importance weight w, for the
// customer with vector x.
func (p *pendingSends) add(m *policyModel, x []float64, action int, w float64) {
	if !m.pendingCounts(action) {
		return
	}
	var buf [basisDim]float64
	phi := basis(x, &buf)
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.arms[action]
	if !ok {
		// The prior of a new effect: A⁻¹ = (τ²/v)·I, as custScore.qNew.
		r = newRidge(m.noise() / m.newVar)
		if p.arms == nil {
			p.arms = map[int]*ridge{}
		}
		p.arms[action] = r
		p.n.Store(int32(len(p.arms)))
	}
	sw := math.Sqrt(w)
	for i := range phi {
		phi[i] *= sw
	}
	shermanMorrison(r.Ainv, phi)
}
