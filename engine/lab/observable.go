package lab

import "math/rand/v2"

// obsMembers is how many customers of a customer's ticket-count group
// stand in for the rates its history cannot tell apart.
const obsMembers = 16

// obsOracle is the observable oracle: each week, for each customer, the
// action of highest expected value given what the history can show. A
// customer's purchase rate is known only through their count of purchases
// (the history the engine ingested, then one draw a week at the rate
// without a coupon: a purchase count is all a constant rate leaves in the
// events, since given the count the dates add nothing); everything else
// of the profile (ticket, category shares, the redeem probability where
// the history shows it) is taken as known, and the hidden types enter by
// their expectations (observableValue). The value of an action for a
// customer is its mean over obsMembers customers of the same count, each
// lending the customer their rate (and the response that goes with a
// rate, where the response is tied to it): the issue's "average of the
// true effects over each group of customers the features cannot tell
// apart", with the rest of the profile kept the customer's own.
type obsOracle struct {
	counts []int      // purchases the customer's events show so far
	rng    *rand.Rand // the weekly purchases behind counts
	best   []int      // this week's action per customer (-1: nothing)
}

func newObsOracle(w *mworld, rng *rand.Rand) *obsOracle {
	o := &obsOracle{counts: make([]int, len(w.custs)), rng: rng, best: make([]int, len(w.custs))}
	for i, c := range w.custs {
		o.counts[i] = c.histTickets
	}
	return o
}

// choose sets best for the week; survived[i] is the number of coupons
// customer i received without opting out in the oracle's own path.
func (o *obsOracle) choose(w *mworld, survived []int) {
	groups := map[int][]int{}
	for i, n := range o.counts {
		groups[n] = append(groups[n], i)
	}
	vals := make([]float64, w.active+1)
	for i, c := range w.custs {
		g := groups[o.counts[i]]
		stride := max(1, len(g)/obsMembers)
		clear(vals)
		n := 0
		for j := 0; j < len(g) && n < obsMembers; j += stride {
			lent, m := *c, w.custs[g[j]]
			lent.p0 = m.p0
			lent.pResp = w.respProb(m.p0, c.top, m.rare)
			for k := -1; k < w.active; k++ {
				vals[k+1] += w.observableValue(&lent, k, survived[i])
			}
			n++
		}
		o.best[i] = -1
		for k := range w.active {
			if vals[k+1] > vals[o.best[i]+1] {
				o.best[i] = k
			}
		}
	}
}

// advance adds the week's purchases (at each customer's rate without a
// coupon) to the counts.
func (o *obsOracle) advance(w *mworld) {
	for i, c := range w.custs {
		if o.rng.Float64() < c.p0 {
			o.counts[i]++
		}
	}
}
