package policy

import (
	"maps"
	"math"
	"slices"
	"time"
)

// Guard keeps the learned policy from running below a plain baseline.
// From the model's own log (every folded reward with the exact
// probabilities it was drawn with and the model's expected rewards at
// decision time), it keeps doubly robust estimates (Dudík, Langford & Li
// 2011) of the value of the learned policy π (Model.Greedy, no
// exploration) and of each baseline: never-send (key 0) and "always
// action a" (key a; where a is not eligible, never-send). Each estimate
// is a mean of per-reward pseudo-outcomes Γ(b) = q̂(b) + 1[A=b]/p(b)·(r −
// q̂(b)); the comparison uses the paired differences Γ(π) − Γ(b), so their
// common noise cancels. Evidence fades with a half-life of
// Config.GuardHalfLife reward windows, so the guard can turn back.
//
// When π is worse than the best baseline by more than GuardZ standard
// errors (with at least GuardMinN effective rewards), the guard becomes
// active: decisions exploit that baseline (exploring the rest, still
// learning) until π is no longer below it by GuardReleaseZ standard
// errors (hysteresis: GuardReleaseZ < GuardZ).
type Guard struct {
	Active   bool `json:"active"`
	Baseline int  `json:"baseline"` // action id of the baseline exploited (0: never send)
	// Switches counts activations and deactivations.
	Switches int `json:"switches"`
	// Policy are π's sums; Options the baselines', by key.
	Policy  guardSum          `json:"policy"`
	Options map[int]*guardSum `json:"options"`
	// Decayed is the time up to which the evidence has been faded.
	Decayed time.Time `json:"decayed"`
	// Windows is the tenant's age in reward windows of learning: 1 at the
	// first Fade (the first window's rewards), then growing with the time
	// faded through, a stretch without learning passes (no rewards came
	// due) counting as one window, so a tenant that decides once a month
	// ages by campaigns, not by weeks. With the rewards folded it sets the
	// testing share (testShare).
	Windows float64 `json:"windows,omitempty"`
	// Test is the gate's evidence over all customers (gate.go): D sums
	// the inverse-propensity differences between the decisions' choices
	// and never-send; Fast is the same fading with GuardHalfLife; Bands
	// are the gate per frequency band.
	Test  guardSum   `json:"test,omitzero"`
	Fast  guardSum   `json:"fast,omitzero"`
	Bands []gateBand `json:"gate_bands,omitempty"`
	// Duels are the randomized comparisons inside top-two ties (DuelZ),
	// by duelKey: the mean of D is coupon b's effect minus coupon a's.
	Duels map[string]*guardSum `json:"duels,omitempty"`
}

// guardSum are weighted sums of pseudo-outcomes (V) and of the paired
// differences Γ(π) − Γ(b) (D, D2), with their weights (W, W2).
//
// E and E2 are the sums of Γ(b) − Γ(0): a single action qualifies as a
// baseline only when it also beats never-send with confidence.
type guardSum struct {
	W  float64 `json:"w"`
	W2 float64 `json:"w2"`
	V  float64 `json:"v"`
	D  float64 `json:"d"`
	D2 float64 `json:"d2"`
	E  float64 `json:"e,omitempty"`
	E2 float64 `json:"e2,omitempty"`
	// Q, S and K give the gate's tests a second standard error that does
	// not rest on each arm's own rare rewards (pooledSE): Q is Σ (w·c)², c
	// the decision's inverse-propensity factor (1/p of its arm), S the sum
	// of the squared residuals of the decisions in either arm and K their
	// number.
	Q float64 `json:"q,omitempty"`
	S float64 `json:"s,omitempty"`
	K float64 `json:"k,omitempty"`
}

func (s *guardSum) add(v, d, e float64) {
	s.W++
	s.W2++
	s.V += v
	s.D += d
	s.D2 += d * d
	s.E += e
	s.E2 += e * e
}

// addWeighted adds the difference d with weight w (the gate's tests,
// observeGate).
func (s *guardSum) addWeighted(d, w float64) {
	s.W += w
	s.W2 += w * w
	s.D += w * d
	s.D2 += w * d * d
}

// addArm adds to a gate's test the decision whose residual res (reward
// minus never-send's μ) was logged in an arm of propensity p, sign +1 for
// the choice and −1 for never-send, with weight w (observeGate).
func (s *guardSum) addArm(res, p, sign, w float64) {
	c := sign / p
	s.addWeighted(c*res, w)
	s.Q += w * w * c * c
	s.S += res * res
	s.K++
}

func (s *guardSum) scale(f float64) {
	s.W *= f
	s.W2 *= f * f
	s.V *= f
	s.D *= f
	s.D2 *= f
	s.E *= f
	s.E2 *= f
	s.Q *= f * f
	s.S *= f
	s.K *= f
}

// testDiff is a gate test's diff with the larger of its own standard
// error and pooledSE, the error every gate decision and figure reads.
func (s *guardSum) testDiff() (mean, se float64) {
	mean, se = s.diff()
	return mean, math.Max(se, s.pooledSE())
}

// pooledSE is the standard error of the mean difference with every arm's
// residuals given the variance of all of them (S/K): a small arm (the 10 %
// never-send of an open band, the testing share of a young one) that has
// not yet met its rare large rewards reads a variance far too small, and
// its test a difference far too sure. 0 before two residuals.
func (s *guardSum) pooledSE() float64 {
	if s.K < 2 || s.W <= 0 {
		return 0
	}
	return math.Sqrt(s.S/s.K*s.Q) / s.W
}

// overNever returns the mean of Γ(b) − Γ(0) and its standard error.
func (s *guardSum) overNever() (mean, se float64) {
	return meanSE(s.E, s.E2, s.W, s.neff())
}

func meanSE(sum, sum2, w, n float64) (mean, se float64) {
	if w <= 0 || n < 2 {
		return 0, math.Inf(1)
	}
	mean = sum / w
	return mean, math.Sqrt(math.Max(sum2/w-mean*mean, 0) / (n - 1))
}

// neff is the effective number of rewards behind the sums.
func (s *guardSum) neff() float64 {
	if s.W2 <= 0 {
		return 0
	}
	return s.W * s.W / s.W2
}

// diff returns the mean of Γ(π) − Γ(b) and its standard error.
func (s *guardSum) diff() (mean, se float64) {
	return meanSE(s.D, s.D2, s.W, s.neff())
}

// clone returns a deep copy: the engine learns on a clone while
// decisions read the original.
func (g Guard) clone() Guard {
	c := g
	c.Options = make(map[int]*guardSum, len(g.Options))
	for k, v := range g.Options {
		s := *v
		c.Options[k] = &s
	}
	c.Bands = slices.Clone(g.Bands)
	if g.Duels != nil {
		c.Duels = make(map[string]*guardSum, len(g.Duels))
		for k, v := range g.Duels {
			s := *v
			c.Duels[k] = &s
		}
	}
	return c
}

// GuardSample is one logged decision with its final reward, for the guard.
type GuardSample struct {
	Customer Customer
	Arms     []Arm
	Probs    []float64 // the logged distribution over Arms
	QHat     []float64 // the model's expected rewards at decision time (cents)
	Logged   int       // index in Arms of the action taken
	Reward   float64   // cents
	Options  []int     // every baseline key to update (0 and the catalog's actions)
	// Choice is the index in Arms of the policy's choice at decision time
	// (-1: none among Arms) when ChoiceKnown; records from before it was
	// logged leave ChoiceKnown false and the gate infers it (choiceGroup).
	Choice      int
	ChoiceKnown bool
}

// Observe adds one logged decision to the guard's evidence. It reads the
// model's current fit for π's choice, so call it before Refit when folding
// the same rewards. With Config.ResidualClip the reward counts at most
// ResidualClip standard deviations of the residual noise (√v) from the
// logged action's QHat, as Fold bounds it: one absurd amount would
// otherwise hold every test of the guard and the gate near z = ±1, its
// own share of their variance, for as long as it takes to fade.
func (m *Model) Observe(s *GuardSample) {
	k := len(s.Arms)
	if k == 0 || len(s.Probs) != k || len(s.QHat) != k || s.Logged < 0 || s.Logged >= k || !(s.Probs[s.Logged] > 0) {
		return
	}
	if e, ok := m.boundResidual(s.Reward-s.QHat[s.Logged], m.noise()); ok {
		bounded := *s
		bounded.Reward = s.QHat[s.Logged] + e
		s = &bounded
	}
	if cap(m.observed) < k {
		m.observed = make([]Score, k)
	}
	sc := m.observed[:k]
	m.Score(&s.Customer, s.Arms, sc)
	pi := m.Greedy(sc)
	gamma := func(i int) float64 {
		g := s.QHat[i]
		if i == s.Logged {
			g += (s.Reward - s.QHat[i]) / s.Probs[i]
		}
		return g
	}
	gp := gamma(pi)
	m.guard.Policy.add(gp, 0, 0)
	zero := -1
	for i, a := range s.Arms {
		if a.ID == 0 {
			zero = i
		}
	}
	if zero < 0 {
		return
	}
	if m.cfg.Gate {
		m.observeGate(s, zero)
	}
	if m.guard.Options == nil {
		m.guard.Options = map[int]*guardSum{}
	}
	for _, key := range s.Options {
		idx := zero
		for i, a := range s.Arms {
			if a.ID == key {
				idx = i
			}
		}
		o := m.guard.Options[key]
		if o == nil {
			o = &guardSum{}
			m.guard.Options[key] = o
		}
		gb := gamma(idx)
		o.add(gb, gp-gb, gb-gamma(zero))
	}
}

// Fade fades the guard's evidence up to now: weights halve every
// GuardHalfLife windows.
func (m *Model) Fade(now time.Time, window time.Duration) {
	g := &m.guard
	if g.Decayed.IsZero() || window <= 0 {
		g.Decayed = now
		g.Windows = max(g.Windows, 1)
		return
	}
	dt := now.Sub(g.Decayed)
	if dt <= 0 {
		return
	}
	g.Windows += min(float64(dt)/float64(window), 1) // an idle stretch is one window
	f := math.Exp2(-float64(dt) / (m.cfg.GuardHalfLife * float64(window)))
	g.Policy.scale(f)
	for _, o := range g.Options {
		o.scale(f)
	}
	g.Fast.scale(f)
	for b := range g.Bands {
		g.Bands[b].Fast.scale(f)
	}
	if hl := m.cfg.GateHalfLife; hl > 0 {
		f := math.Exp2(-float64(dt) / (hl * float64(window)))
		g.Test.scale(f)
		for b := range g.Bands {
			g.Bands[b].Test.scale(f)
		}
		for _, d := range g.Duels {
			d.scale(f)
		}
	}
	g.Decayed = now
}

// GuardEvent says what UpdateGuard changed.
type GuardEvent int

// Guard events.
const (
	GuardUnchanged GuardEvent = iota
	GuardActivated
	GuardReleased
)

// UpdateGuard applies the guard's rule to its evidence and reports a
// switch. A baseline qualifies when π is below it with confidence: the
// upper bound mean + GuardZ·SE of Γ(π) − Γ(b) is below 0 (with at least
// GuardMinN effective rewards), and, for a single action (only with
// Config.GuardSingleActions), when it also beats never-send by GuardZ
// standard errors; the most confident one (lowest bound) is exploited. An active guard is released when π is no longer below its
// baseline by GuardReleaseZ standard errors. backlog says the learner
// pass that calls it leaves entries due now (it was cut short, the next
// pass folds the rest): the gate then judges harm as at every update but
// holds its look at the opening bars (opensNow) for the pass that folds
// the last of them, so that a window's one look reads the window's
// rewards whole, not the first pass's share of them.
func (m *Model) UpdateGuard(backlog bool) GuardEvent {
	if m.cfg.Gate {
		was := m.guard.Active
		m.updateGate(backlog)
		switch {
		case !was && m.guard.Active:
			return GuardActivated
		case was && !m.guard.Active:
			return GuardReleased
		}
		return GuardUnchanged
	}
	return m.updateGuard()
}

func (m *Model) updateGuard() GuardEvent {
	g := &m.guard
	best, bestUB := -1, 0.0
	for _, k := range slices.Sorted(maps.Keys(g.Options)) {
		o := g.Options[k]
		if o.neff() < m.cfg.GuardMinN {
			continue
		}
		if k != 0 {
			if !m.cfg.GuardSingleActions {
				continue // estimated and shown, not exploited
			}
			if e, se := o.overNever(); e-m.cfg.GuardZ*se <= 0 {
				continue // not surely better than never sending
			}
		}
		if mean, se := o.diff(); mean+m.cfg.GuardZ*se < bestUB {
			best, bestUB = k, mean+m.cfg.GuardZ*se
		}
	}
	if !g.Active {
		if best < 0 {
			return GuardUnchanged
		}
		g.Active, g.Baseline = true, best
		g.Switches++
		return GuardActivated
	}
	if best >= 0 {
		g.Baseline = best
		return GuardUnchanged
	}
	cur := g.Options[g.Baseline]
	if cur == nil {
		g.Active = false
		g.Switches++
		return GuardReleased
	}
	if mean, se := cur.diff(); mean+m.cfg.GuardReleaseZ*se >= 0 {
		g.Active = false
		g.Switches++
		return GuardReleased
	}
	return GuardUnchanged
}

// GuardStatus is the guard's state and estimates for operators (MXN per
// decision over the reward window).
type GuardStatus struct {
	Active    bool             `json:"active"`
	Baseline  int              `json:"baseline"`
	Switches  int              `json:"switches"`
	Policy    float64          `json:"policy_value_mxn"`
	Rewards   float64          `json:"effective_rewards"`
	Baselines []BaselineStatus `json:"baselines"`
	// Gate is the gate's state and test (nil without Config.Gate).
	Gate *GateStatus `json:"gate,omitempty"`
}

// BaselineStatus is one baseline's estimated value and π's difference to
// it, with the difference's standard error (nil, null in JSON, while it
// cannot be estimated yet).
type BaselineStatus struct {
	Accion int      `json:"action"`
	Value  float64  `json:"value_mxn"`
	Diff   float64  `json:"policy_diff_mxn"`
	SE     *float64 `json:"standard_error_mxn"`
}

// GuardStatus reports the guard.
func (m *Model) GuardStatus() GuardStatus {
	g := &m.guard
	st := GuardStatus{Active: g.Active, Baseline: g.Baseline, Switches: g.Switches, Rewards: g.Policy.neff(), Baselines: []BaselineStatus{},
		Gate: m.GateStatus()}
	if g.Policy.W > 0 {
		st.Policy = g.Policy.V / g.Policy.W / 100
	}
	for _, k := range slices.Sorted(maps.Keys(g.Options)) {
		o := g.Options[k]
		if o.W <= 0 {
			continue
		}
		mean, se := o.diff()
		st.Baselines = append(st.Baselines, BaselineStatus{Accion: k, Value: o.V / o.W / 100, Diff: mean / 100, SE: seMXN(se)})
	}
	return st
}
