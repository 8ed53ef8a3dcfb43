package policy

import (
	"math"
	"math/rand/v2"
	"time"
)

// A small in-process world for the policy's tests: customers with a
// vector, category shares and a prior; a true expected reward per
// (customer, action) the model never sees; rewards drawn with a
// conversion probability and lognormal spend.

type simCust struct {
	c      Customer
	rare   bool
	cat    int     // main category (index in the shares)
	conv   float64 // probability of buying in the window without a coupon
	spend  float64 // mean ticket margin when buying, cents
	hidden float64 // a trait no feature shows
}

type simAction struct {
	id        int
	prior     func(sc *simCust) float64 // the economic prior's effect, cents
	lift      func(sc *simCust) float64 // true change in conversion probability
	costCents float64                   // sending cost and discount when bought
	cat       int                       // -1: none
}

// rareBuyersAction is a coupon whose economic prior is wrong: it promises
// rare buyers 60 MXN and frequent ones −5 MXN, while in truth only
// frequent buyers respond (conversion +0.15); it costs 30 MXN when redeemed.
func rareBuyersAction() simAction {
	return simAction{id: 1, cat: -1, costCents: 3000,
		prior: func(sc *simCust) float64 {
			if sc.rare {
				return 6000
			}
			return -500
		},
		lift: func(sc *simCust) float64 {
			if sc.rare {
				return 0
			}
			return 0.15
		}}
}

type world struct {
	custs   []*simCust
	actions []simAction
	rng     *rand.Rand
}

func newWorld(seed uint64, n int, actions []simAction) *world {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	w := &world{rng: rng, actions: actions}
	for i := 0; i < n; i++ {
		sc := &simCust{rare: rng.Float64() < 0.5, cat: rng.IntN(4), hidden: rng.Float64()}
		x := make([]float64, VectorLen)
		x[0] = 1
		for j := 1; j < VectorLen; j++ {
			x[j] = rng.Float64() * 0.3
		}
		if sc.rare {
			x[xFreq90] = 0.1 * rng.Float64()
			x[xRecencia] = 0.7 + 0.3*rng.Float64()
			sc.conv = 0.05 + 0.05*rng.Float64()
		} else {
			x[xFreq90] = 0.6 + 0.4*rng.Float64()
			x[xRecencia] = 0.3 * rng.Float64()
			sc.conv = 0.5 + 0.3*rng.Float64()
		}
		sc.spend = 20000 + 20000*rng.Float64()
		shares := make([]float64, NumCats)
		shares[sc.cat] = 0.6 + 0.3*rng.Float64()
		shares[(sc.cat+1)%4] = 1 - shares[sc.cat]
		sc.c = Customer{X: x, Shares: shares, Base: sc.conv * sc.spend}
		w.custs = append(w.custs, sc)
	}
	return w
}

// decide scores sc's candidate actions with m and returns them with their
// scores and the probabilities m draws them with.
func (w *world) decide(m *Model, sc *simCust) ([]Arm, []Score, []float64) {
	arms := w.arms(sc)
	scores := make([]Score, len(arms))
	m.Score(&sc.c, arms, scores)
	probs := make([]float64, len(arms))
	m.Distribution(scores, probs)
	return arms, scores, probs
}

// scoreBoth scores sc's candidate actions with two models (a model and
// its reloaded copy).
func (w *world) scoreBoth(m1, m2 *Model, sc *simCust) (arms []Arm, s1, s2 []Score) {
	arms = w.arms(sc)
	s1, s2 = make([]Score, len(arms)), make([]Score, len(arms))
	m1.Score(&sc.c, arms, s1)
	m2.Score(&sc.c, arms, s2)
	return arms, s1, s2
}

func (w *world) arms(sc *simCust) []Arm {
	arms := []Arm{{ID: 0, Prior: sc.c.Base}}
	for _, a := range w.actions {
		arm := Arm{ID: a.id, Prior: sc.c.Base + a.prior(sc)}
		if a.cat >= 0 {
			arm.AffShare = sc.c.Shares[a.cat]
		}
		arms = append(arms, arm)
	}
	return arms
}

// expected is the true expected reward of action id (0: nothing).
func (w *world) expected(sc *simCust, id int) float64 {
	if id == 0 {
		return sc.conv * sc.spend
	}
	a := w.actions[id-1]
	p := math.Min(math.Max(sc.conv+a.lift(sc), 0), 1)
	return p*(sc.spend-a.costCents) - 100
}

// draw samples a reward of action id: lognormal spend (σ = 1) with the
// same mean.
func (w *world) draw(sc *simCust, id int) float64 {
	p, cost := sc.conv, 0.0
	if id != 0 {
		a := w.actions[id-1]
		p = math.Min(math.Max(sc.conv+a.lift(sc), 0), 1)
		cost = a.costCents
	}
	r := 0.0
	if w.rng.Float64() < p {
		r = sc.spend*math.Exp(w.rng.NormFloat64()-0.5) - cost
	}
	if id != 0 {
		r -= 100
	}
	return r
}

type windowStats struct {
	sent     map[int]float64 // share of decisions per action
	prob     map[int]float64 // mean probability per action
	sentRare float64         // share of rare buyers sent a coupon
	value    float64         // true expected reward per decision of the drawn actions
	never    float64
	oracle   float64
	event    GuardEvent
}

// runWindow decides every customer once, folds the rewards, observes the
// guard and refits; it returns the window's figures.
func (w *world) runWindow(m *Model, now time.Time) windowStats {
	st := windowStats{sent: map[int]float64{}, prob: map[int]float64{}}
	var rare float64
	type logged struct {
		sc     *simCust
		arms   []Arm
		probs  []float64
		q      []float64
		idx    int
		reward float64
	}
	var log []logged
	opts := []int{0}
	for _, a := range w.actions {
		opts = append(opts, a.id)
	}
	for _, sc := range w.custs {
		arms, scores, probs := w.decide(m, sc)
		u, idx := w.rng.Float64(), len(arms)-1
		for i, p := range probs {
			if u < p {
				idx = i
				break
			}
			u -= p
		}
		id := arms[idx].ID
		st.sent[id]++
		for i, p := range probs {
			st.prob[arms[i].ID] += p
		}
		if sc.rare {
			rare++
			if id != 0 {
				st.sentRare++
			}
		}
		st.value += w.expected(sc, id)
		st.never += w.expected(sc, 0)
		best := w.expected(sc, 0)
		for _, a := range w.actions {
			best = math.Max(best, w.expected(sc, a.id))
		}
		st.oracle += best
		q := make([]float64, len(arms))
		for i := range scores {
			q[i] = scores[i].Mu
		}
		log = append(log, logged{sc, arms, probs, q, idx, w.draw(sc, id)})
	}
	m.Fade(now, 7*24*time.Hour)
	for _, l := range log {
		m.Observe(&GuardSample{Customer: l.sc.c, Arms: l.arms, Probs: l.probs, QHat: l.q, Logged: l.idx, Reward: l.reward, Options: opts})
	}
	for _, l := range log {
		m.Fold(&l.sc.c, &l.arms[l.idx], l.reward, m.Weight(l.probs[l.idx], len(l.arms)))
	}
	m.Refit()
	st.event = m.UpdateGuard(false)
	n := float64(len(w.custs))
	for k := range st.sent {
		st.sent[k] /= n
	}
	for k := range st.prob {
		st.prob[k] /= n
	}
	st.sentRare /= rare
	st.value, st.never, st.oracle = st.value/n, st.never/n, st.oracle/n
	return st
}
