package lab

import (
	"time"

	"github.com/coupond/coupond/engine"
	policypkg "github.com/coupond/coupond/policy"
)

// engineModel is the engine's own reward model with no exploration: both
// labs' "greedy" policies. It is the one place that reaches into the
// engine's model: when the engine's model changes, change predict and
// update (and nothing else) so that greedy stays "the engine's model,
// minus exploration".
type engineModel struct {
	m       *engine.RewardModel
	pending []greedyObs
}

type greedyObs struct {
	f    engine.Features
	now  time.Time
	acts []engine.Action
	k    int // index in acts, -1: nothing
	o    policypkg.Outcome
}

func newEngineModel() *engineModel { return &engineModel{m: engine.NewRewardModel()} }

// newEngineModelWith is newEngineModel in the engine's policy
// configuration cfg (nil: the default).
func newEngineModelWith(cfg *policypkg.Config) *engineModel {
	if cfg == nil {
		return newEngineModel()
	}
	return &engineModel{m: engine.NewRewardModelWith(*cfg)}
}

// predict is the model's expected reward (cents over the window) of a
// (nil: nothing) for a customer with features f at now.
func (g *engineModel) predict(f *engine.Features, now time.Time, a *engine.Action) float64 {
	mu, _ := g.m.Predict(f, now, window, a)
	return mu
}

// update folds one observed outcome of acts[k] (-1: nothing) for f at
// now.
func (g *engineModel) update(f *engine.Features, now time.Time, acts []engine.Action, k int, o policypkg.Outcome) {
	var a *engine.Action
	if k >= 0 {
		a = &acts[k]
	}
	g.m.Update(f, now, window, a, o)
}

// choose returns the index of the action of acts with the highest
// expected reward, -1 for nothing.
func (g *engineModel) choose(v *custView, acts []engine.Action) int {
	best, bestV := -1, g.predict(v.f, v.now, nil)
	for k := range acts {
		if mu := g.predict(v.f, v.now, &acts[k]); mu > bestV {
			best, bestV = k, mu
		}
	}
	return best
}

// observe records the outcome of action k (-1: nothing) for v; fold
// learns it when the window closes. The engine reads the same outcome off
// the window's events: the reward, the margin net of the discount, the
// discount and the tickets (one a purchase).
func (g *engineModel) observe(v *custView, acts []engine.Action, k int, s sampled) {
	o := policypkg.Outcome{Reward: 100 * s.reward, Full: true}
	if s.o.bought {
		o.Tickets = 1
		o.DiscountCents = 100 * s.o.discount
		o.MarginCents = 100*s.o.amount*s.marginRate - o.DiscountCents
	}
	g.pending = append(g.pending, greedyObs{*v.f, v.now, acts, k, o})
}

// fold learns the rewards of the window that closed.
func (g *engineModel) fold() {
	for i := range g.pending {
		o := &g.pending[i]
		g.update(&o.f, o.now, o.acts, o.k, o.o)
	}
	g.pending = g.pending[:0]
}
