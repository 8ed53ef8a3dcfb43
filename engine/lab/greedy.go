package lab

import (
	"math"
	"time"

	"github.com/coupond/coupond/engine"
)

// engineModel is the engine's own reward model with no exploration, the
// "greedy" policy of the many-worlds lab: it ranks the catalog by the
// model's expected reward and sends the top action, and it learns from the
// sampled rewards of its own choices, folded at the end of each window.
// It is the one place that reaches into the engine's model: when the
// engine's model changes, change this adapter (and nothing else) so that
// greedy stays "the engine's model, minus exploration".
type engineModel struct {
	m       *engine.RewardModel
	pending []greedyObs
}

type greedyObs struct {
	f      engine.Features
	now    time.Time
	a      *engine.Action
	reward float64 // cents
}

func newEngineModel() *engineModel { return &engineModel{m: engine.NewRewardModel()} }

// choose returns the index of the active action of highest expected
// reward, -1 for nothing.
func (g *engineModel) choose(v *custView, acts []engine.Action) int {
	best, bestV := -1, math.Inf(-1)
	if mu, _ := g.m.Predict(v.f, v.now, window, nil); mu > bestV {
		bestV = mu
	}
	for k := range acts {
		if mu, _ := g.m.Predict(v.f, v.now, window, &acts[k]); mu > bestV {
			best, bestV = k, mu
		}
	}
	return best
}

// observe records the reward (MXN) of action k (-1: nothing) for v; fold
// learns it.
func (g *engineModel) observe(v *custView, acts []engine.Action, k int, rewardMXN float64) {
	var a *engine.Action
	if k >= 0 {
		a = &acts[k]
	}
	g.pending = append(g.pending, greedyObs{*v.f, v.now, a, 100 * rewardMXN})
}

// fold learns the rewards of the window that closed.
func (g *engineModel) fold() {
	for i := range g.pending {
		o := &g.pending[i]
		g.m.Update(&o.f, o.now, window, o.a, o.reward)
	}
	g.pending = g.pending[:0]
}
