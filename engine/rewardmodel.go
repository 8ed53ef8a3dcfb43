package engine

import "time"

// RewardModel is the policy's reward model on its own, for simulations that
// compare exploration rules on the same model class (coupond lab's greedy
// baselines). It is not safe for concurrent use.
type RewardModel struct{ pm *publishedModel }

// NewRewardModel returns a model without data.
func NewRewardModel() *RewardModel { return &RewardModel{pm: newPublishedModel()} }

// Predict returns the expected reward (cents over the window) of action a
// (nil: send nothing) for a customer with features f at now, and its
// uncertainty.
func (r *RewardModel) Predict(f *Features, now time.Time, window time.Duration, a *Action) (mu, sigma float64) {
	c := newCustomer(*f, now, window)
	cand := candidate{action: a}
	if a != nil {
		cand.id = a.ID
	}
	sc := r.pm.score(c, []candidate{cand}, window)
	return sc.cands[0].mu, sc.cands[0].sigma
}

// Update folds one observed reward (cents) of action a for f at now.
func (r *RewardModel) Update(f *Features, now time.Time, window time.Duration, a *Action, reward float64) {
	c := newCustomer(*f, now, window)
	id := 0
	if a != nil {
		id = a.ID
	}
	r.pm.update(c.x, id, reward, c.prior(a), 1) // no logged propensity: every sample weighs 1
}
