package engine

import (
	"time"

	"github.com/coupond/coupond/policy"
)

// RewardModel is the policy's model on its own, for simulations that
// compare exploration rules on the same model class: coupond lab's
// "greedy" is this model choosing the action of highest Predict, without
// exploration. It sees what the engine's model sees: the customer's
// features, the action's economics and categorias (Action.Categorias) and
// the main categories it has met (the first policy.NumCats names its
// customers bought, as the engine tallies them). Update folds a reward at
// once; Predict refits first when at least refitEvery rewards (or a tenth
// of all) were folded since the last fit, as the engine refits once per
// learner pass. It is not safe for concurrent use.
type RewardModel struct {
	m    *policy.Model
	cats catTally
}

// refitEvery is the least number of new rewards that makes Predict refit.
const refitEvery = 500

// NewRewardModel returns a model without data, in the engine's default
// configuration.
func NewRewardModel() *RewardModel { return NewRewardModelWith(policy.DefaultConfig()) }

// NewRewardModelWith returns a model without data in configuration cfg.
func NewRewardModelWith(cfg policy.Config) *RewardModel { return &RewardModel{m: policy.New(cfg)} }

// Predict returns the expected reward (cents over the window) of action a
// (nil: send nothing) for a customer with features f at now, and the
// standard error of its effect against sending nothing (0 for nil).
func (r *RewardModel) Predict(f *Features, now time.Time, window time.Duration, a *Action) (mu, sigma float64) {
	if s := r.m.Stale(); s >= refitEvery || (s > 0 && float64(s) >= 0.1*float64(r.m.N())) {
		if len(r.m.Cats) < policy.NumCats {
			r.m.AddCats(r.cats.top(r.m.Cats, policy.NumCats-len(r.m.Cats))...)
		}
		r.m.Refit()
	}
	c := newCustomer(*f, now, window)
	pc := c.policyCustomer(r.m.Cats)
	arms := []policy.Arm{c.arm(nil), c.arm(a)}
	var sc [2]policy.Score
	r.m.Score(&pc, arms, sc[:])
	return sc[1].Mu, r.m.Sigma(&sc[1])
}

// Update folds one observed outcome of a (nil: nothing was sent) for f at
// now, with weight 1 (no logged propensity): the model's learning target
// (policy.Model.Target) of o, o.TicketMargin read off f as the engine's
// learner reads it off the decision's record. o.Reward alone (Full false)
// folds the reward.
func (r *RewardModel) Update(f *Features, now time.Time, window time.Duration, a *Action, o policy.Outcome) {
	c := newCustomer(*f, now, window)
	o.TicketMargin, o.HistTickets = ticketHistory(c.x)
	if len(r.m.Cats) < policy.NumCats {
		r.cats.add(c.sum.catNames(nil))
	}
	pc := c.policyCustomer(r.m.Cats)
	arm := c.arm(a)
	target := r.m.Target(o)
	r.m.TallyTickets(o)
	r.m.Fold(&pc, &arm, target, 1)
}
